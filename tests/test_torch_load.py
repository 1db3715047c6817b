"""Back into torch (issue 30 item 4): load_exported (export's inverse), model-level
freeze/unfreeze, and convert of transformers' BitNet layers.

Oracles: the model's own eval outputs before export (bit for bit), tn.quantize on the
rebuilt latent weights, and transformers' own BitLinear/AutoBitLinear modules and its
pack_weights for the convert path.
"""

import warnings

import numpy as np
import pytest

import tritnum as tn
from tritnum.errors import FormatError, InvalidTritsError, ShapeMismatchError

torch = pytest.importorskip("torch")
from tritnum.torch import (  # noqa: E402
    BitLinear,
    convert,
    export,
    freeze,
    load_exported,
    unfreeze,
)
from tritnum.torch.layers import latent_from_trits  # noqa: E402


def model_of(*, group_size=None, scale_dtype="float32", dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(48, 32), torch.nn.LayerNorm(32),
                                torch.nn.Linear(32, 16, bias=False), torch.nn.ReLU(),
                                torch.nn.Linear(16, 4))
    return convert(model.to(dtype), group_size=group_size, scale_dtype=scale_dtype)


def snapshot(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def same_state(model, saved):
    state = model.state_dict()
    return state.keys() == saved.keys() and all(torch.equal(state[k], saved[k]) for k in saved)


# -------------------------------------------------------------------------- load_exported
@pytest.mark.parametrize("group_size, scale_dtype, dtype", [
    (None, "float32", torch.float32), (16, "float32", torch.float32),
    (None, "bfloat16", torch.bfloat16), (8, "float16", torch.float32)])
def test_export_then_load_exported_reproduces_the_outputs_bit_for_bit(group_size, scale_dtype,
                                                                      dtype):
    trained = model_of(group_size=group_size, scale_dtype=scale_dtype, dtype=dtype).eval()
    tensors = export(trained)
    fresh = model_of(group_size=group_size, scale_dtype=scale_dtype, dtype=dtype, seed=1)
    result = load_exported(fresh, tensors)
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert not fresh[0].training and fresh[0].weight is None  # frozen, packed only
    x = torch.randn(5, 48).to(dtype)
    assert torch.equal(fresh.eval()(x), trained(x))
    np.testing.assert_array_equal(export(fresh)["0.weight"].packed.data,
                                  tensors["0.weight"].packed.data)


def test_load_exported_takes_a_file_and_other_formats(tmp_path):
    trained = model_of().eval()
    tensors = export(trained)
    tensors["2.weight"] = tn.TernaryTensor(tn.pack(tn.unpack(tensors["2.weight"].packed),
                                                   "base3"), tensors["2.weight"].scales)
    tensors["1.weight"] = torch.from_numpy(tensors["1.weight"])  # a torch tensor is fine too
    fresh = model_of(seed=2)
    load_exported(fresh, tensors)
    x = torch.randn(3, 48)
    assert torch.equal(fresh.eval()(x), trained(x))
    path = tmp_path / "m.safetensors"
    tn.save(path, {k: v for k, v in export(trained).items()})
    again = model_of(seed=3)
    load_exported(again, tn.load(path))
    assert torch.equal(again.eval()(x), trained(x))


def broken(tensors, how):
    tensors = dict(tensors)
    if how == "missing":
        del tensors["1.bias"]
    elif how == "unexpected":
        tensors["9.weight"] = np.zeros(3, np.float32)
    elif how == "shape":
        tensors["1.bias"] = np.zeros(31, np.float32)
    elif how == "ternary shape":
        tensors["2.weight"] = tn.quantize(np.ones((16, 40), np.float32))
    elif how == "group size":
        tensors["2.weight"] = tn.quantize(np.ones((16, 32), np.float32), group_size=8)
    elif how == "array for a BitLinear":
        tensors["0.weight"] = np.zeros((32, 48), np.float32)
    elif how == "ternary for an array":
        tensors["1.weight"] = tn.quantize(np.ones((1, 32), np.float32))[0]
    elif how == "kind":
        tensors["1.bias"] = np.zeros(32, np.int32)
    return tensors


@pytest.mark.parametrize("how, error, key", [
    ("missing", FormatError, "1.bias"), ("unexpected", FormatError, "9.weight"),
    ("shape", ShapeMismatchError, "1.bias"), ("ternary shape", ShapeMismatchError, "2.weight"),
    ("group size", ShapeMismatchError, "2.weight"),
    ("array for a BitLinear", TypeError, "0.weight"),
    ("ternary for an array", TypeError, "1.weight"), ("kind", TypeError, "1.bias")])
def test_bad_entries_are_refused_by_name_and_nothing_is_loaded(how, error, key):
    tensors = broken(export(model_of().eval()), how)
    model = model_of(seed=4)
    before = snapshot(model)
    with pytest.raises(error, match=key.replace(".", r"\.")):
        load_exported(model, tensors)
    assert same_state(model, before)
    assert model[0].weight is not None and model[0].training


def test_not_strict_loads_what_matches_and_reports_the_rest():
    trained = model_of().eval()
    tensors = broken(broken(export(trained), "missing"), "unexpected")
    model = model_of(seed=5)
    bias = model[1].bias.detach().clone()
    result = load_exported(model, tensors, strict=False)
    assert result.missing_keys == ["1.bias"] and result.unexpected_keys == ["9.weight"]
    assert torch.equal(model[1].bias, bias)
    assert torch.equal(model[1].weight, trained[1].weight)
    with pytest.raises(TypeError, match="mapping"):
        load_exported(model, [1, 2])
    with pytest.raises(TypeError, match=r"torch\.nn\.Module"):
        load_exported(tensors, tensors)


# -------------------------------------------------------------------- freeze / unfreeze
def test_freeze_keeping_the_latent_weights_and_unfreeze_round_trip():
    model = model_of().train()
    before = snapshot(model)
    x = torch.randn(4, 48)
    y_train = model(x).detach()
    freeze(model)
    assert not model.training and model[0].weight_packed is not None
    torch.testing.assert_close(model(x), y_train, rtol=1e-5, atol=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing rebuilt: no warning
        unfreeze(model)
    assert model.training and same_state(model, before)


@pytest.mark.parametrize("group_size", [None, 16, 4])
@pytest.mark.parametrize("scale_dtype", ["float32", "bfloat16"])
def test_unfreeze_after_releasing_rebuilds_weights_that_quantize_back(group_size, scale_dtype):
    model = model_of(group_size=group_size, scale_dtype=scale_dtype)
    x = torch.randn(4, 48)
    frozen = {name: export(model)[name] for name in ("0.weight", "2.weight")}
    y_eval = freeze(model, keep_latent=False)(x)
    assert model[0].weight is None and "0.weight_packed" in model.state_dict()
    with pytest.warns(UserWarning, match="rebuilt the latent weights of 2 BitLinear"):
        unfreeze(model)
    assert model.training and model[0].weight.dtype == torch.float32
    for name, t in frozen.items():
        layer = model[int(name[0])]
        # the oracle: tn.quantize of the rebuilt float weights
        again = tn.quantize(layer.weight.detach().numpy(), group_size=group_size)
        np.testing.assert_array_equal(tn.unpack(again.packed), tn.unpack(t.packed))
        rounded = torch.tensor(again.scales).to(getattr(torch, scale_dtype)).float().numpy()
        np.testing.assert_array_equal(rounded, t.scales)
    torch.testing.assert_close(model(x).detach(), y_eval, rtol=1e-5, atol=1e-5)
    assert torch.equal(freeze(model)(x), y_eval)


def test_latent_from_trits_hits_the_scale_exactly_on_random_groups():
    rng = np.random.default_rng(11)
    for group_size in (None, 8, 64):
        w = (rng.standard_normal((64, 128)) * rng.uniform(0.01, 10, (64, 1))).astype(np.float32)
        t = tn.quantize(w, group_size=group_size)
        trits = tn.unpack(t.packed)
        rebuilt = latent_from_trits(trits, t.scales, group_size)
        again = tn.quantize(rebuilt, group_size=group_size)
        np.testing.assert_array_equal(tn.unpack(again.packed), trits)
        np.testing.assert_array_equal(again.scales, t.scales)
    zero = latent_from_trits(np.zeros((2, 8), np.int8), np.float32([[1.0], [2.0]]), 8)
    assert not zero.any()


# ------------------------------------------------------- transformers' BitNet layers
@pytest.fixture
def hf():
    """transformers' bitnet module, its @torch.compile'd quantizers run eagerly: torch was
    imported before this (TORCH_COMPILE_DISABLE would come too late), so dynamo's config."""
    pytest.importorskip("transformers")
    from transformers.integrations import bitnet
    with torch._dynamo.config.patch(disable=True):
        yield bitnet


def random_trits(out, n, seed):
    return torch.from_numpy(np.random.default_rng(seed).integers(-1, 2, (out, n))).float()


def close_to(got, want):
    """Equal up to the rounding of the final rescale (a few float32 steps of the row's
    largest output): the int8 activations and the integer sums are the same."""
    got, want = got.detach().double(), want.detach().double()
    bound = 8 * torch.finfo(torch.float32).eps * want.abs().amax(-1, keepdim=True) + 1e-7
    assert ((got - want).abs() <= bound).all(), (got - want).abs().max()


@pytest.mark.parametrize("bias, rms", [(False, False), (True, True)])
def test_convert_of_transformers_bitlinear_divides_by_its_scale(hf, bias, rms):
    trits = random_trits(16, 40, 1)
    module = hf.BitLinear(40, 16, bias=bias, dtype=torch.float32, use_rms_norm=rms,
                          rms_norm_eps=1e-5)
    with torch.no_grad():
        module.weight.copy_(hf.pack_weights(trits.clone()))
        module.weight_scale.fill_(1 / 0.0375)  # 1 / gamma: transformers divides
        if bias:
            module.bias.normal_()
        if rms:
            module.rms_norm.weight.uniform_(0.5, 2)
    x = torch.randn(6, 40) * 2
    want = module(x)
    layer = convert(torch.nn.Sequential(module))[0]
    assert isinstance(layer, BitLinear) and layer.weight is None and not layer.training
    t = layer.ternary_weight()
    np.testing.assert_array_equal(tn.unpack(t.packed), trits.numpy())
    assert t.scales == np.float32(1 / np.float32(1 / 0.0375))
    assert (layer.rms_norm is not None) == rms
    close_to(layer(x), want)


def test_convert_of_offline_autobitlinear_multiplies_the_output_and_bias(hf):
    trits = random_trits(12, 24, 2)
    module = hf.AutoBitLinear(24, 12, bias=True, dtype=torch.float32)
    with torch.no_grad():
        module.weight.copy_(trits)
        module.weight_scale.fill_(0.0625)
        module.bias.normal_()
    x = torch.randn(3, 24)
    want = module(x)
    layer = convert(torch.nn.Sequential(module, torch.nn.Linear(12, 2)))[0]
    np.testing.assert_array_equal(tn.unpack(layer.ternary_weight().packed), trits.numpy())
    close_to(layer(x), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_convert_of_online_autobitlinear_shares_the_master_weights(hf, dtype):
    torch.manual_seed(0)
    module = hf.AutoBitLinear(32, 8, bias=False, dtype=dtype, online_quant=True,
                              use_rms_norm=True).to(dtype)  # its norm is made float32
    x = torch.randn(4, 32).to(dtype)
    want = module(x)
    w_hf = hf.WeightQuant.apply(module.weight).detach().float()
    layer = convert(torch.nn.Sequential(module))[0]
    assert layer.weight is module.weight and layer.training
    assert layer.scale_dtype == ("bfloat16" if dtype == torch.bfloat16 else "float32")
    t = layer.ternary_weight()
    trits = tn.unpack(t.packed)
    np.testing.assert_array_equal(np.sign(w_hf.numpy()), trits)  # the same trits
    y = layer(x)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(y.float(), want.float(), rtol=tol, atol=tol)
    y.float().sum().backward()  # trainable: gradients reach the master weights
    assert module.weight.grad is not None


def test_a_code_three_in_transformers_packing_is_refused(hf):
    module = hf.BitLinear(8, 8, bias=False, dtype=torch.float32)
    with torch.no_grad():
        module.weight.fill_(0b01010101)
        module.weight[1, 5] = 0b01110101  # code 3 in bits 4..5: row 1 * 2 + 1, column 5
    with pytest.raises(InvalidTritsError, match=r"packed\[1, 5\] bits 4-5 hold code 3"):
        convert(torch.nn.Sequential(module))


@pytest.mark.parametrize("linear_class", ["bitlinear", "autobitlinear"])
def test_convert_runs_a_tiny_transformers_bitnet_model_with_its_logits(hf, linear_class):
    transformers = pytest.importorskip("transformers")
    from transformers.utils.quantization_config import BitNetQuantConfig
    config = transformers.BitNetConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
        bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    model = transformers.BitNetForCausalLM(config).eval()
    float_state = model.state_dict()
    hf.replace_with_bitnet_linear(model, modules_to_not_convert=["lm_head"],
                                  quantization_config=BitNetQuantConfig(
                                      linear_class=linear_class, quantization_mode="offline"))
    model.to_empty(device="cpu")  # the bitnet layers were made on the meta device
    own = model.state_dict()
    model.load_state_dict({k: v for k, v in float_state.items()
                           if k in own and own[k].shape == v.shape}, strict=False)
    rng = np.random.default_rng(1)
    trits = {}
    with torch.no_grad():
        for name, m in model.named_modules():
            if isinstance(m, (hf.BitLinear, hf.AutoBitLinear)):
                t = torch.from_numpy(rng.integers(-1, 2, (m.out_features, m.in_features)))
                trits[name] = t.numpy()
                t = t.float()
                m.weight.copy_(hf.pack_weights(t.clone()) if linear_class == "bitlinear" else t)
                m.weight_scale.fill_(float(rng.uniform(0.02, 0.05)) if linear_class ==
                                     "autobitlinear" else float(rng.uniform(20, 50)))
    ids = torch.from_numpy(rng.integers(0, 64, (2, 12)))
    seen = {}  # each transformers layer's input and output in the model's own forward

    def record(name):
        def hook(module, inputs, output):
            seen[name] = inputs[0], output
        return hook
    hooks = [m.register_forward_hook(record(name))
             for name, m in model.named_modules() if name in trits]
    with torch.no_grad():
        want = model(ids).logits
        for h in hooks:
            h.remove()
        convert(model)
        got = model(ids).logits
    layers = {name: m for name, m in model.named_modules() if isinstance(m, BitLinear)}
    assert layers.keys() == trits.keys() == seen.keys() and len(trits) == 14
    with torch.no_grad():
        for name, t in trits.items():
            np.testing.assert_array_equal(tn.unpack(layers[name].ternary_weight().packed), t)
            x, y = seen[name]
            close_to(layers[name](x), y)  # each layer, on the same input: the same int8 sums
    assert isinstance(model.lm_head, torch.nn.Linear)
    # The whole model: a later layer's input differs from transformers' by float32
    # rounding (attention and norms in torch's order, then each rescale), and an activation
    # within that of a rounding boundary of its int8 step lands on the other side (tie
    # margins here are ~1e-4 of a step, the perturbation ~1e-5). One flipped step moves a
    # logit by ~5e-4 of the largest; a wrong scale or trit moves it by far more than 1 %.
    torch.testing.assert_close(got, want, rtol=0, atol=1e-2 * float(want.abs().amax()))
