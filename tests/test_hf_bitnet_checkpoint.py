"""Hugging Face bitnet model directories: tn.io.read_hf_bitnet / write_hf_bitnet vs transformers."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import tritnum as tn
from tritnum.errors import FormatError
from tritnum.io.hf_checkpoint import open_hf_bitnet

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # transformers' bitnet quantizer needs it to load
from safetensors.torch import save_file  # noqa: E402
from transformers.integrations.bitnet import WeightQuant, pack_weights  # noqa: E402

transformers.logging.set_verbosity_error()
TOKENS = torch.arange(12).reshape(1, 12) % 128


@pytest.fixture(autouse=True, scope="module")
def _eager_transformers():
    """transformers' bitnet code is @torch.compile'd: run it eagerly in this module only
    (TORCH_COMPILE_DISABLE set here would leak into later modules' torch.compile tests)."""
    with torch._dynamo.config.patch(disable=True):
        yield



def tiny_config(**kwargs):
    """A BitNetConfig of hidden 64, 2 layers, vocab 128 (offline: nothing is downloaded)."""
    return transformers.BitNetConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                     num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, bos_token_id=0, eos_token_id=1,
                                     **kwargs)


def make_checkpoint(path, linear_class, *, dtype=torch.bfloat16, tie=False, seed=0):
    """A tiny offline checkpoint: random trits packed by transformers, scales in ``dtype``.

    Returns the trits and the stored scales by weight name.
    """
    torch.manual_seed(seed)
    config = tiny_config(dtype=str(dtype).removeprefix("torch."), tie_word_embeddings=tie)
    model = transformers.BitNetForCausalLM(config).to(dtype)
    state, trits, scales = {}, {}, {}
    for name, value in model.state_dict().items():
        if name.endswith("_proj.weight"):
            t = torch.randint(-1, 2, value.shape, dtype=torch.int8)
            trits[name] = t.numpy().copy()
            state[name] = pack_weights(t.clone())
            scale = torch.tensor([0.01 * (3 + len(name) % 7)], dtype=dtype)
            scales[name] = scale
            state[name.removesuffix("weight") + "weight_scale"] = scale
        elif not (tie and name == "lm_head.weight"):
            state[name] = value.contiguous()
    os.makedirs(path, exist_ok=True)
    save_file(state, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    config.quantization_config = {"quant_method": "bitnet", "linear_class": linear_class,
                                  "quantization_mode": "offline"}
    config.save_pretrained(path)
    return trits, scales


def logits(path):
    model = transformers.BitNetForCausalLM.from_pretrained(path)
    with torch.no_grad():
        return model(TOKENS).logits.float().numpy()


@pytest.fixture(scope="module", params=["autobitlinear", "bitlinear"])
def checkpoint(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param) / "model"
    trits, scales = make_checkpoint(path, request.param)
    return request.param, path, trits, scales


def test_read_exact(checkpoint):
    linear_class, path, trits, scales = checkpoint
    tensors, config = tn.io.read_hf_bitnet(path)
    assert config["quantization_config"]["linear_class"] == linear_class
    assert not any(name.endswith("weight_scale") for name in tensors)
    for name, t in trits.items():
        w = tensors[name]
        assert isinstance(w, tn.TernaryTensor) and w.group_size is None
        assert np.array_equal(tn.unpack(w.packed), t)
        value = scales[name].float().item()
        assert w.scales == np.float32(value if linear_class == "autobitlinear" else 1 / value)
    embed = tensors["model.embed_tokens.weight"]
    assert tensors.dtypes["model.embed_tokens.weight"] == "BF16" and embed.dtype == np.float32
    safetensors = pytest.importorskip("safetensors.torch")
    stored = safetensors.load_file(os.path.join(path, "model.safetensors"))
    assert np.array_equal(embed, stored["model.embed_tokens.weight"].float().numpy())


def test_written_directory_loads_with_the_same_logits(checkpoint, tmp_path):
    _, path, *_ = checkpoint
    tensors, config = tn.io.read_hf_bitnet(path)
    out = tmp_path / "written"
    tn.io.write_hf_bitnet(out, tensors, config)
    assert sorted(os.listdir(out)) == ["config.json", "model.safetensors"]
    expected = logits(path)
    np.testing.assert_array_equal(logits(out), expected)
    assert np.abs(expected).max() > 0.1  # the model computes something
    safetensors = pytest.importorskip("safetensors.torch")
    a = safetensors.load_file(os.path.join(path, "model.safetensors"))
    b = safetensors.load_file(os.path.join(out, "model.safetensors"))
    assert a.keys() == b.keys()
    for name in a:  # byte for byte, dtypes kept (bfloat16 stays bfloat16)
        assert a[name].dtype == b[name].dtype and torch.equal(a[name], b[name]), name


def test_sharded_both_ways(tmp_path):
    path = tmp_path / "model"
    make_checkpoint(path, "bitlinear")
    tensors, config = tn.io.read_hf_bitnet(path)
    out = tmp_path / "sharded"
    tn.io.write_hf_bitnet(out, tensors, config, max_shard_size=30_000)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 2 and shards == sorted(p for p in os.listdir(out) if "-of-" in p)
    np.testing.assert_array_equal(logits(out), logits(path))
    # transformers' own sharded save of the loaded model reads back the same
    model = transformers.BitNetForCausalLM.from_pretrained(path)
    model.save_pretrained(tmp_path / "saved", max_shard_size="30KB")
    saved, _ = tn.io.read_hf_bitnet(tmp_path / "saved")
    assert saved.keys() == tensors.keys()
    for name, value in tensors.items():
        if isinstance(value, tn.TernaryTensor):
            assert saved[name].packed == value.packed and saved[name].scales == value.scales
        else:
            assert np.array_equal(saved[name], value)


def test_float32_scales_and_retargeting(tmp_path):
    path = tmp_path / "model"
    make_checkpoint(path, "autobitlinear", dtype=torch.float32)
    tensors, config = tn.io.read_hf_bitnet(path)
    tn.io.write_hf_bitnet(tmp_path / "same", tensors, config)
    np.testing.assert_array_equal(logits(tmp_path / "same"), logits(path))
    # bitlinear stores 1 / scale: not always exact in float32 (nor in bfloat16)
    for dtype in ("float32", "bfloat16"):
        with pytest.raises(FormatError, match=rf"tensor 'model.*not exact in {dtype}"):
            tn.io.write_hf_bitnet(tmp_path / "bitlinear", tensors, config,
                                  linear_class="bitlinear", scale_dtype=dtype)
    assert sorted(os.listdir(tmp_path)) == ["model", "same"]  # nothing partial left
    out = tmp_path / "bitlinear"
    tn.io.write_hf_bitnet(out, tensors, config, linear_class="bitlinear", requantize=True)
    assert json.loads((out / "config.json").read_text())["quantization_config"][
        "linear_class"] == "bitlinear"
    back, _ = tn.io.read_hf_bitnet(out)
    for name, value in tensors.items():
        if isinstance(value, tn.TernaryTensor):
            assert back[name].packed == value.packed
            np.testing.assert_allclose(back[name].scales, value.scales, rtol=2**-23)
    np.testing.assert_allclose(logits(out), logits(path), rtol=1e-5, atol=1e-6)


def test_online_checkpoint_quantized_as_transformers_does(tmp_path):
    torch.manual_seed(1)
    model = transformers.BitNetForCausalLM(tiny_config()).to(torch.bfloat16)
    path = tmp_path / "online"
    os.makedirs(path)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              os.path.join(path, "model.safetensors"))
    model.config.quantization_config = {"quant_method": "bitnet", "linear_class": "autobitlinear",
                                        "quantization_mode": "online"}
    model.config.save_pretrained(path)
    tensors, _ = tn.io.read_hf_bitnet(path)
    state = model.state_dict()
    for name, value in state.items():
        w = tensors[name]
        if not name.endswith("_proj.weight"):
            assert isinstance(w, np.ndarray)
            continue
        expected = WeightQuant.apply(value.float())  # trits / scale, in float32
        mean = value.float().abs().mean().item()
        np.testing.assert_allclose(float(w.scales), mean, rtol=1e-6)
        np.testing.assert_array_equal(tn.unpack(w.packed), torch.round(expected / mean).numpy())
    assert isinstance(tensors["lm_head.weight"], np.ndarray)  # modules_to_not_convert: lm_head


@pytest.mark.parametrize("linear_class", ["autobitlinear", "bitlinear"])
def test_bias_through_a_directory(tmp_path, linear_class):
    """autobitlinear stores the bias divided by weight_scale (its layer multiplies the sum
    with the bias by it): written so, read back as the bias the layer adds; bitlinear as is."""
    trits = np.random.default_rng(0).integers(-1, 2, (8, 4))
    w = tn.TernaryTensor(tn.pack(trits), np.float32(0.5))
    bias = np.array([1, -2, 0.25, 3, 0, 1.5, -0.5, 4], np.float32)
    tn.io.write_hf_bitnet(tmp_path / "m", {"p.weight": w, "p.bias": bias},
                          {"model_type": "bitnet"}, linear_class=linear_class)
    stored = pytest.importorskip("safetensors.torch").load_file(tmp_path / "m" /
                                                                "model.safetensors")
    np.testing.assert_array_equal(stored["p.bias"].numpy(),
                                  bias / 0.5 if linear_class == "autobitlinear" else bias)
    tensors, _ = tn.io.read_hf_bitnet(tmp_path / "m")
    np.testing.assert_array_equal(tensors["p.bias"], bias)
    assert np.array_equal(tn.unpack(tensors["p.weight"].packed), trits)


def test_bias_of_unpacked_trits(tmp_path):
    """An autobitlinear projection stored as trits in a float dtype (AutoBitLinear's
    unpacked weight) with a bias: the bias the layer adds, as for a packed weight (it was
    refused: the bias was computed by decoding the weight as packed uint8), eager and lazy."""
    trits = np.random.default_rng(1).integers(-1, 2, (8, 4)).astype(np.float32)
    bias = np.array([1, -2, 0.25, 3, 0, 1.5, -0.5, 4], np.float32)
    os.makedirs(tmp_path / "m")
    save_file({"p.weight": torch.tensor(trits).to(torch.bfloat16),
               "p.weight_scale": torch.tensor([0.5]), "p.bias": torch.tensor(bias / 0.5)},
              tmp_path / "m" / "model.safetensors")
    (tmp_path / "m" / "config.json").write_text(json.dumps({
        "model_type": "bitnet", "quantization_config": {"quant_method": "bitnet",
                                                        "linear_class": "autobitlinear"}}))
    tensors, _ = tn.io.read_hf_bitnet(tmp_path / "m")
    np.testing.assert_array_equal(tensors["p.bias"], bias)
    np.testing.assert_array_equal(tn.unpack(tensors["p.weight"].packed), trits)
    lazy, _ = open_hf_bitnet(tmp_path / "m")
    np.testing.assert_array_equal(lazy["p.bias"], bias)
    assert lazy.dtypes["p.bias"] == "F32"


def _broken(tmp_path, name="bad"):
    path = tmp_path / name
    make_checkpoint(path, "autobitlinear")
    return path


@pytest.mark.parametrize("edit, match", [
    (lambda c: c.pop("quantization_config"), "no key 'quantization_config'"),
    (lambda c: c["quantization_config"].pop("quant_method"), "no key 'quant_method'"),
    (lambda c: c["quantization_config"].update(quant_method="bitsandbytes"), "not 'bitnet'"),
    (lambda c: c["quantization_config"].update(linear_class=3), "linear_class.*not a str"),
    (lambda c: c["quantization_config"].update(linear_class="linear"), "transformers takes"),
    (lambda c: c["quantization_config"].update(use_rms_norm="yes"), "use_rms_norm.*not a bool"),
    (lambda c: c.update(quantization_config=[1]), "quantization_config.*not a dict"),
])
def test_hostile_config(tmp_path, edit, match):
    path = _broken(tmp_path)
    config = json.loads((path / "config.json").read_text())
    edit(config)
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(FormatError, match=match):
        tn.io.read_hf_bitnet(path)


def test_hostile_files(tmp_path):
    path = _broken(tmp_path)
    (path / "config.json").write_text("{not json")
    with pytest.raises(FormatError, match="not valid JSON"):
        tn.io.read_hf_bitnet(path)
    (path / "config.json").unlink()
    with pytest.raises(FormatError, match=r"no config.json"):
        tn.io.read_hf_bitnet(path)
    with pytest.raises(FileNotFoundError):
        tn.io.read_hf_bitnet(tmp_path / "nowhere")
    path = _broken(tmp_path, "truncated")
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[:-100])  # offsets past the end of the file
    with pytest.raises(FormatError, match=r"model.safetensors"):
        tn.io.read_hf_bitnet(path)
    (path / "model.safetensors").unlink()
    with pytest.raises(FormatError, match=r"neither model.safetensors nor"):
        tn.io.read_hf_bitnet(path)


def test_hostile_index(tmp_path):
    path = _broken(tmp_path)
    tensors, config = tn.io.read_hf_bitnet(path)
    out = tmp_path / "sharded"
    tn.io.write_hf_bitnet(out, tensors, config, max_shard_size=30_000)
    index_file = out / "model.safetensors.index.json"
    index = json.loads(index_file.read_text())
    shards = list(index["weight_map"].values())
    first = next(n for n, shard in index["weight_map"].items() if shards.count(shard) > 1)
    for weight_map, match in [
        ("shards", "weight_map.*not a dict"),
        ({}, "names no tensors"),
        ({**index["weight_map"], first: "../model.safetensors"}, "not a file name"),
        ({**index["weight_map"], first: f"{tmp_path}/bad/model.safetensors"}, "not a file name"),
        ({**index["weight_map"], first: "model-00009-of-00009.safetensors"},
         "which is not in"),
        ({k: v for k, v in index["weight_map"].items() if k != first}, "not in the index"),
        ({**index["weight_map"], "extra.weight": index["weight_map"][first]}, "missing"),
    ]:
        index_file.write_text(json.dumps({"weight_map": weight_map}))
        with pytest.raises(FormatError, match=match):
            tn.io.read_hf_bitnet(out)


def test_hostile_tensors(tmp_path):
    path = _broken(tmp_path)
    safetensors = pytest.importorskip("safetensors.torch")
    state = safetensors.load_file(os.path.join(path, "model.safetensors"))
    name = "model.layers.1.mlp.up_proj.weight"
    state[name][0, 0] = 0xFF  # code 3
    save_file(state, os.path.join(path, "model.safetensors"))
    with pytest.raises(FormatError, match=f"tensor '{name}'.*code 3"):
        tn.io.read_hf_bitnet(path)
    state.pop(name)
    save_file(state, os.path.join(path, "model.safetensors"))
    with pytest.raises(FormatError, match="has no weight"):
        tn.io.read_hf_bitnet(path)


def test_write_refuses(tmp_path):
    w = tn.TernaryTensor(tn.pack(np.ones((4, 4), np.int8)), np.float32(0.5))
    config = {"model_type": "bitnet"}
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(FileExistsError):
        tn.io.write_hf_bitnet(tmp_path / "full", {"a.weight": w}, config)
    with pytest.raises(ValueError, match=r"<module>.weight"):
        tn.io.write_hf_bitnet(tmp_path / "d", {"a": w}, config)
    with pytest.raises(ValueError, match="leave the weight_scale out"):
        tn.io.write_hf_bitnet(tmp_path / "d", {"a.weight": w, "a.weight_scale": np.ones(1)},
                              config)
    with pytest.raises(TypeError, match="list"):
        tn.io.write_hf_bitnet(tmp_path / "d", {"a.weight": [1, 2]}, config)
    with pytest.raises(FormatError, match="config must be a mapping"):
        tn.io.write_hf_bitnet(tmp_path / "d", {"a.weight": w}, [])
    with pytest.raises(FormatError, match="linear_class"):
        tn.io.write_hf_bitnet(tmp_path / "d", {"a.weight": w}, config, linear_class="dense")
    assert sorted(os.listdir(tmp_path)) == ["full"]
