"""tritnum.torch: BitLinear's quantization-aware training against tritnum's NumPy quantizers,
its eval mode against tn.linear, state dicts, torch.compile, autocast, convert and export.

The oracles are tritnum's own public functions on NumPy arrays (tn.quantize,
tn.quantize_activations, tn.linear) and float64 NumPy arithmetic: never the torch code
under test.
"""

import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tritnum as tn

torch = pytest.importorskip("torch")
from tritnum.torch import BitLinear, convert, export  # noqa: E402
from tritnum.torch import _quantize as Q  # noqa: E402

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
GROUPS = [None, "row", 8]  # per tensor, per row (group_size = in_features), per group of 8


def group(spec, n):
    return n if spec == "row" else spec


def host(t):
    """A NumPy float array of a tensor (bfloat16 widened exactly to float32)."""
    t = t.detach()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


def magnitudes(shape, dtype):
    """Floats of ``shape`` spread over 1e-6 .. 1e6 (1e-4 .. 1e4 for float16, whose largest is
    65504), with exact zeros and values that are halves."""
    top = 4 if dtype == torch.float16 else 6
    return st.builds(
        lambda a, exp: torch.from_numpy(a * 10.0 ** exp).to(dtype),
        hnp.arrays(np.float64, shape, elements=st.one_of(
            st.floats(-4, 4, allow_subnormal=False), st.sampled_from([0.0, 0.5, -0.5, 1.5]))),
        st.integers(-top, top))


def within(got, want, bound):
    """``|got - want| <= bound`` everywhere (``bound`` an array of per-element bounds)."""
    err = np.abs(np.asarray(got, np.float64) - want)
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert (err <= bound).all(), (worst, err[worst], bound[worst])


# ------------------------------------------------------------- the quantizers, bit for bit
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("spec", GROUPS)
@given(data=st.data())
def test_weight_quantizer_matches_tn_quantize(dtype, spec, data):
    rows = data.draw(st.integers(1, 6))
    w = data.draw(magnitudes((rows, 24), dtype))
    gs = group(spec, 24)
    want = tn.quantize(host(w), group_size=gs)
    scale = Q.weight_scale(w, gs)
    assert scale.dtype == torch.float32
    np.testing.assert_array_equal(scale.numpy(), want.scales)
    trits = Q.ternarize(w, scale, gs)
    assert trits.dtype == dtype
    np.testing.assert_array_equal(trits.to(torch.int8).numpy(), want.packed.unpack())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@given(data=st.data())
def test_activation_quantizer_matches_tn_quantize_activations(dtype, data):
    x = data.draw(magnitudes((data.draw(st.integers(1, 5)), 19), dtype))
    q, scale = Q.quantize_activations(x)
    want_q, want_scale = tn.quantize_activations(host(x))
    np.testing.assert_array_equal(q.numpy(), want_q)
    np.testing.assert_array_equal(scale.numpy(), want_scale)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_quantizers_match_on_many_random_rows(dtype):
    # one element in thousands falls where a reciprocal-multiply or a float32 sum rounds
    # differently from tritnum: hypothesis' small arrays rarely meet one
    rng = np.random.default_rng(7)
    for exp in (-3, 0, 3):
        x = torch.from_numpy(rng.standard_normal((2048, 333)) * 10.0**exp).to(dtype)
        q, scale = Q.quantize_activations(x)
        want_q, want_scale = tn.quantize_activations(host(x))
        np.testing.assert_array_equal(q.numpy(), want_q)
        np.testing.assert_array_equal(scale.numpy(), want_scale)
        for gs in (None, 37, 333):
            want = tn.quantize(host(x), group_size=gs)
            s = Q.weight_scale(x, gs)
            np.testing.assert_array_equal(s.numpy(), want.scales)
            t = Q.ternarize(x, s, gs).to(torch.int8)
            np.testing.assert_array_equal(t.numpy(), want.packed.unpack())


def test_quantizers_on_the_rounding_edges(weights_a_hair_from_half_a_scale):
    # float64 weights 2**-40 either side of scale / 2: only a float64 quotient tells them apart
    w, s, trits = weights_a_hair_from_half_a_scale
    wt = torch.from_numpy(w)
    scale = Q.weight_scale(wt, 64)
    assert (scale.numpy() == s).all()
    np.testing.assert_array_equal(Q.ternarize(wt, scale, 64).to(torch.int8).numpy(), trits)
    # weights exactly at +-scale / 2 round to 0 (half to even), 1.5 scales clip to 1
    w = torch.tensor([[1.5, -1.5, 0.5, -0.5]])
    assert Q.ternarize(w, Q.weight_scale(w)).tolist() == [[1, -1, 0, 0]]
    assert tn.quantize(w.numpy()).packed.unpack().tolist() == [[1, -1, 0, 0]]
    # x * 127 / amax = k + 1/2 exactly: half to even; a zero row takes the 1e-5 floor
    x = torch.tensor([[127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -127.0], [0.0] * 7])
    q, scale = Q.quantize_activations(x)
    assert q[0].tolist() == [127, 0, 2, 2, 0, -2, -127] and q[1].abs().sum() == 0
    np.testing.assert_array_equal(scale.numpy(), np.float32([127, 1e-5]) / np.float32(127))


# ----------------------------------------------------------------- forward and gradients
def layer_with(n_in=40, n_out=12, *, bias=True, spec=None, activations="int8", seed=0):
    torch.manual_seed(seed)
    layer = BitLinear(n_in, n_out, bias, group_size=group(spec, n_in), activations=activations)
    with torch.no_grad():
        layer.weight.mul_(torch.rand(n_out, 1) * 3)  # rows of different scales
        if bias:
            layer.bias.normal_()
    return layer


def oracle(layer, x):
    """float64 (x_deq, w_deq, |x_deq| @ |w_deq|.T: the forward's terms) from tn's quantizers."""
    t = tn.quantize(host(layer.weight), group_size=layer.group_size)
    w_deq = t.dequantize().astype(np.float64)
    xs = host(x).reshape(-1, layer.in_features)
    if layer.activations == "int8":
        q, scale = tn.quantize_activations(xs)
        x_deq = q.astype(np.float64) * scale.astype(np.float64)[:, None]
    else:
        x_deq = xs.astype(np.float64)
    return x_deq, w_deq, np.abs(x_deq) @ np.abs(w_deq).T


@pytest.mark.parametrize("activations", ["int8", "float"])
@pytest.mark.parametrize("spec", GROUPS)
@pytest.mark.parametrize("bias", [True, False])
def test_ste_gradients_are_the_straight_through_ones(activations, spec, bias):
    layer = layer_with(spec=spec, activations=activations, bias=bias)
    x = torch.randn(3, 5, 40, dtype=torch.float32, requires_grad=True)
    g = torch.randn(3, 5, 12, dtype=torch.float64)
    (layer(x).double() * g).sum().backward()
    x_deq, w_deq, _ = oracle(layer, x)
    g2 = g.reshape(-1, 12).numpy()
    # y = x_deq @ w_deq.T + b with d x_deq / d x and d w_deq / d w the identity
    want_x, want_w = g2 @ w_deq, g2.T @ x_deq
    tol = 2e-6
    within(x.grad.reshape(-1, 40).numpy(), want_x, tol * np.abs(g2) @ np.abs(w_deq))
    within(layer.weight.grad.numpy(), want_w, tol * np.abs(g2.T) @ np.abs(x_deq))
    if bias:
        np.testing.assert_allclose(layer.bias.grad.numpy(), g2.sum(0), rtol=1e-6)


@pytest.mark.parametrize("activations", ["int8", "float"])
@pytest.mark.parametrize("spec", GROUPS)
@pytest.mark.parametrize("shape", [(40,), (7, 40), (2, 3, 40)], ids=str)
def test_training_forward_equals_tn_linear_on_the_frozen_layer(activations, spec, shape):
    layer = layer_with(spec=spec, activations=activations)
    x = torch.randn(shape)
    with torch.no_grad():
        y_train = layer(x)
    frozen = tn.quantize(host(layer.weight), group_size=layer.group_size)
    want = tn.linear(x.numpy(), frozen, host(layer.bias), activations=activations)
    x_deq, w_deq, terms = oracle(layer, x)
    exact = (x_deq @ w_deq.T + host(layer.bias)).reshape(want.shape)
    size = (terms + np.abs(host(layer.bias))).reshape(want.shape)
    if activations == "int8" and spec != 8:
        # exact integer sums in both, then two float32 roundings of the rescale and the bias
        bound = 2.0**-22 * size
    else:  # float32 sums (of floats, or of per-group products) in different orders
        bound = 40 * 2.0**-24 * size
    assert y_train.shape == want.shape
    assert (np.abs(y_train.numpy() - exact) <= bound).all()
    assert (np.abs(want - exact) <= bound).all()
    layer.eval()
    with torch.no_grad():
        y_eval = layer(x)
    np.testing.assert_array_equal(y_eval.numpy(), want)  # eval mode is tn.linear itself


def test_one_activation_off_by_one_is_caught():
    # the bound above is tight enough to see one int8 activation rounded the other way
    layer = layer_with(bias=False)
    x = torch.randn(1, 40)
    x_deq, w_deq, terms = oracle(layer, x)
    q, scale = tn.quantize_activations(x.numpy())
    q = q.astype(np.float64)
    j = np.flatnonzero(w_deq[0])[0]
    q[0, j] += 1
    moved = (q * scale[:, None]) @ w_deq.T
    assert (np.abs(moved - x_deq @ w_deq.T) > 2.0**-22 * terms).any()


# ------------------------------------------------------------------------- modes and state
def test_eval_packs_and_train_goes_back_to_the_latent_weights():
    layer = layer_with()
    x = torch.randn(4, 40)
    y_train = layer(x).detach()
    assert layer.weight_packed is None
    layer.eval()
    assert layer.weight_packed.dtype == torch.uint8 and layer.weight_packed.shape == (12, 10)
    assert layer.weight_scale.dtype == torch.float32 and layer.weight_scale.shape == ()
    np.testing.assert_array_equal(layer.weight_packed.numpy(),
                                  tn.quantize(layer.weight.detach().numpy()).packed.data)
    torch.testing.assert_close(layer(x), y_train, rtol=2e-6, atol=2e-6)
    with torch.no_grad():  # changed in place while in eval mode: packed again on the next call
        layer.weight.mul_(-1)
    torch.testing.assert_close(layer(x), -y_train + 2 * layer.bias.detach(), rtol=2e-6,
                               atol=2e-6)
    layer.train()
    assert layer.weight_packed is None
    torch.testing.assert_close(layer(x).detach(), -y_train + 2 * layer.bias.detach(),
                               rtol=2e-6, atol=2e-6)


def test_eval_forward_takes_half_precision_inputs_and_returns_their_dtype():
    layer = layer_with().eval()
    x = torch.randn(3, 40)
    for dtype in (torch.bfloat16, torch.float16, torch.float64):
        y = layer(x.to(dtype)).detach()
        assert y.dtype == dtype
        want = tn.linear(host(x.to(dtype)), layer.ternary_weight(), host(layer.bias),
                         activations="int8")
        np.testing.assert_array_equal(y.float().numpy(), torch.from_numpy(want).to(dtype).float())


def test_state_dict_is_nn_linears_while_the_latent_weights_are_kept():
    dense = torch.nn.Linear(40, 12)
    layer = BitLinear(40, 12).eval()
    assert set(layer.state_dict()) == {"weight", "bias"}
    layer.load_state_dict(dense.state_dict())
    assert torch.equal(layer.weight, dense.weight)
    # loading changed the latent weights of an eval-mode layer: packed again at once
    np.testing.assert_array_equal(layer.weight_packed.numpy(),
                                  tn.quantize(dense.weight.detach().numpy()).packed.data)
    dense.load_state_dict(layer.state_dict())


def test_released_latent_weights_save_and_load_packed(tmp_path):
    src = layer_with(spec=8)
    x = torch.randn(5, 40)
    want = src.eval()(x)
    src.freeze(keep_latent=False)
    assert src.weight is None and not src.training
    assert set(src.state_dict()) == {"weight_packed", "weight_scale", "bias"}
    torch.save(src.state_dict(), tmp_path / "frozen.pt")
    torch.testing.assert_close(src(x), want, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="released"):
        src.train()(x)

    dst = BitLinear(40, 12, group_size=8)  # a fresh, training-mode layer
    dst.load_state_dict(torch.load(tmp_path / "frozen.pt", weights_only=True))
    assert dst.weight is None and not dst.training
    torch.testing.assert_close(dst(x), want, rtol=0, atol=0)
    assert "latent weights released" in repr(dst)

    # a latent checkpoint brings the latent weights back
    latent = layer_with(spec=8, seed=3)
    dst.load_state_dict(latent.state_dict())
    assert torch.equal(dst.weight, latent.weight)
    torch.testing.assert_close(dst.train()(x), latent(x))

    wrong = BitLinear(40, 12, group_size=20)  # scales of another shape
    with pytest.raises(RuntimeError, match="weight_scale"):
        wrong.load_state_dict(torch.load(tmp_path / "frozen.pt", weights_only=True))


def test_corrupt_packed_bytes_are_refused_on_first_use():
    layer = layer_with().freeze(keep_latent=False)
    state = {k: v.clone() for k, v in layer.state_dict().items()}
    state["weight_packed"][0, 0] = 255  # code 3 is no trit
    fresh = BitLinear(40, 12)
    fresh.load_state_dict(state)
    with pytest.raises(tn.InvalidTritsError):
        fresh(torch.randn(2, 40))
    layer(torch.randn(2, 40))
    with torch.no_grad():  # a buffer written in place after use is checked again
        layer.weight_packed[0, 0] = 255
    with pytest.raises(tn.InvalidTritsError):
        layer(torch.randn(2, 40))


# writes through .data bump no version counter: eval mode compares a sample of the values
def fresh_like(layer):
    """A new eval-mode BitLinear built from ``layer``'s state: the output to expect."""
    fresh = BitLinear(layer.in_features, layer.out_features, layer.bias is not None,
                      group_size=layer.group_size, activations=layer.activations)
    fresh.load_state_dict({k: v.clone() for k, v in layer.state_dict().items()})
    return fresh.eval()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("size", [(40, 12), (300, 64)], ids=str)
@pytest.mark.parametrize("spec", [None, 4])
def test_data_writes_to_the_latent_weights_are_packed_again(size, spec, dtype):
    layer = layer_with(*size, spec=spec).to(dtype).eval()
    x = torch.randn(3, size[0], dtype=dtype)
    before = layer(x).detach()
    layer.weight.data.mul_(-1)  # a sign flip, as weight-averaging code writes it
    with torch.no_grad():
        y = layer(x)
    assert torch.equal(y, fresh_like(layer)(x).detach()) and not torch.equal(y, before)
    target = torch.randn(size[1], size[0], dtype=dtype)
    for _ in range(3):  # EMA steps
        layer.weight.data.lerp_(target, 0.1)
        assert torch.equal(layer(x).detach(), fresh_like(layer)(x).detach())
    layer.weight.data.mul_(3)  # rescaling: the same trits, three times the scale
    assert torch.equal(layer(x).detach(), fresh_like(layer)(x).detach())


@pytest.mark.parametrize("spec", [None, 4])
def test_scale_and_code_writes_to_a_frozen_layer_are_used(spec):
    layer = layer_with(spec=spec).freeze(keep_latent=False)
    x = torch.randn(3, 40)
    before = layer(x)
    layer.weight_scale.data.mul_(2)
    y = layer(x)
    assert torch.equal(y, fresh_like(layer)(x)) and not torch.equal(y, before)
    torch.testing.assert_close(y - layer.bias.detach(), 2 * (before - layer.bias.detach()))
    other = layer_with(spec=spec, seed=5).freeze(keep_latent=False)
    layer.weight_packed.data.copy_(other.weight_packed)  # valid codes: used
    assert torch.equal(layer(x), fresh_like(layer)(x))


@pytest.mark.parametrize("keep_latent", [True, False])
def test_corrupt_codes_written_through_data_after_first_use_are_refused(keep_latent):
    layer = layer_with().freeze(keep_latent=keep_latent)
    x = torch.randn(2, 40)
    layer(x)
    layer.weight_packed.data[0, 0] = 255  # code 3 is no trit
    with pytest.raises(tn.InvalidTritsError):
        layer(x)
    layer.weight_packed.data.fill_(0xFF)
    with pytest.raises(tn.InvalidTritsError):
        layer(x)


def test_refresh_after_a_single_element_data_edit():
    layer = layer_with(300, 64, bias=False).eval()
    x = torch.randn(2, 300)
    with torch.no_grad():
        layer(x)
        layer.weight.data[37, 151] = 1e3  # one element: the scale and many trits change
        y = layer.refresh()(x)
        assert torch.equal(y, fresh_like(layer)(x))
        assert layer.train().refresh() is layer and layer.weight_packed is None
    frozen = layer_with(300, 64).freeze(keep_latent=False)
    frozen(x)
    frozen.weight_packed.data[37, 51] = 0xFF  # between the sampled bytes, perhaps
    with pytest.raises(tn.InvalidTritsError):
        frozen.refresh()
    frozen.weight_packed.data[37, 51] = 0x55  # four zeros
    frozen.weight_scale.data[()] = 0.5
    y = frozen.refresh()(x)
    assert torch.equal(y, fresh_like(frozen)(x))


def test_dtype_conversions_keep_the_scales_float32():
    layer = layer_with().freeze(keep_latent=False)
    scale = layer.weight_scale.clone()
    layer.half()
    assert layer.weight_scale.dtype == torch.float32 and torch.equal(layer.weight_scale, scale)
    assert layer.bias.dtype == torch.float16
    latent = layer_with().eval().to(torch.bfloat16)  # packed again from the bf16 latent weights
    np.testing.assert_array_equal(latent.weight_packed.numpy(),
                                  tn.quantize(host(latent.weight)).packed.data)
    x = torch.randn(2, 40, dtype=torch.bfloat16)
    assert latent(x).dtype == torch.bfloat16 and latent.train()(x).dtype == torch.bfloat16


def test_constructor_checks_and_repr():
    assert repr(BitLinear(8, 4, False, group_size=4, activations="float")) == (
        "BitLinear(in_features=8, out_features=4, bias=False, group_size=4, "
        "activations='float')")
    with pytest.raises(tn.ShapeMismatchError, match="group_size must divide"):
        BitLinear(10, 4, group_size=4)
    with pytest.raises(ValueError, match="activations must be one of 'int8', 'float'"):
        BitLinear(8, 4, activations="q8")
    with pytest.raises(TypeError):
        BitLinear.from_linear(torch.nn.Conv1d(1, 1, 1))
    # reset_parameters is nn.Linear's
    torch.manual_seed(5)
    dense = torch.nn.Linear(8, 4)
    torch.manual_seed(5)
    layer = BitLinear(8, 4)
    assert torch.equal(layer.weight, dense.weight) and torch.equal(layer.bias, dense.bias)


# -------------------------------------------------------------- compile, autocast, bf16
def mlp(seed=0):
    torch.manual_seed(seed)
    return convert(torch.nn.Sequential(torch.nn.Linear(40, 32), torch.nn.ReLU(),
                                       torch.nn.Linear(32, 32), torch.nn.ReLU(),
                                       torch.nn.Linear(32, 5)))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_torch_compile_training_mode_is_one_graph(backend):
    torch._dynamo.reset()
    model, twin = mlp(), mlp()
    x = torch.randn(6, 40)
    compiled = torch.compile(twin, backend=backend, fullgraph=True)
    y, y_c = model(x), compiled(x)
    torch.testing.assert_close(y_c, y, rtol=0, atol=0)
    y.sum().backward()
    y_c.sum().backward()
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_torch_compile_eval_mode_calls_tritnum_as_an_opaque_op(backend):
    torch._dynamo.reset()
    model = mlp().eval()
    x = torch.randn(6, 40, requires_grad=True)
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=0, atol=0)
    y = compiled(x)  # with autograd on (the biases require grad): the op's backward
    y.sum().backward()
    grad = x.grad.clone()
    x.grad = None
    model(x).sum().backward()
    torch.testing.assert_close(grad, x.grad)


def test_eval_backward_is_straight_through_to_the_input_and_bias():
    layer = layer_with(spec=8).eval()
    x = torch.randn(3, 40, requires_grad=True)
    g = torch.randn(3, 12)
    (layer(x) * g).sum().backward()
    w_deq = layer.ternary_weight().dequantize()
    np.testing.assert_allclose(x.grad.numpy(), g.numpy() @ w_deq, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(layer.bias.grad.numpy(), g.sum(0).numpy(), rtol=1e-6)
    assert layer.weight.grad is None  # eval mode does not train the weights


def test_eval_gradients_equal_the_operator_s_and_vmap_takes_the_layer():
    """An eval-mode call under autograd (its bias requires grad) skips the operator's
    dispatch, with the operator's gradients (half-precision x, bias of another dtype);
    under torch.func.vmap it is the operator, which has a rule for it (one call a sample),
    make_fx traces the operator, and forward-mode AD is refused (the operator's tangents
    are zeros)."""
    layer = layer_with(spec=8).eval()
    layer(torch.randn(1, 40))  # packs the weights
    for x_dtype, bias_dtype in [(torch.float32, torch.float32), (torch.bfloat16, torch.float32),
                                (torch.float16, torch.bfloat16)]:
        grads = []
        for call in (layer, lambda x: torch.ops.tritnum.ternary_linear(
                x, layer.weight_packed, layer.weight_scale, layer.bias,
                layer.in_features, layer.group_size, layer.activations)):
            bias = layer.bias
            layer.bias = torch.nn.Parameter(bias.detach().to(bias_dtype))
            x = torch.randn(2, 3, 40, generator=torch.Generator().manual_seed(1)).to(x_dtype)
            x.requires_grad_()
            y = call(x)
            (y.float() * torch.arange(12.0)).sum().backward()
            grads.append((y, x.grad, layer.bias.grad))
            layer.bias = bias
        for got, want in zip(*grads, strict=True):
            assert got.dtype == want.dtype
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    x = torch.randn(4, 3, 40)
    w, bias = layer.ternary_weight(), layer.bias.detach().numpy()
    want = np.stack([tn.linear(xi.numpy(), w, bias, activations="int8") for xi in x])
    np.testing.assert_array_equal(torch.func.vmap(layer)(x).detach().numpy(), want)
    with pytest.raises(RuntimeError, match="functorch transforms"):  # not the operator's zeros
        torch.func.jvp(layer, (x,), (torch.ones_like(x),))
    # make_fx (a dispatch mode) records the operator, not its result as a constant
    from torch.fx.experimental.proxy_tensor import make_fx
    graph = make_fx(layer)(torch.randn(3, 40, requires_grad=True))
    np.testing.assert_array_equal(graph(x[1]).detach().numpy(), want[1])
    with torch.no_grad():  # the route without autograd too
        graph = make_fx(layer)(torch.randn(3, 40))
        np.testing.assert_array_equal(graph(x[2]).numpy(), want[2])
        np.testing.assert_array_equal(torch.func.vmap(layer)(x).numpy(), want)


def test_autocast_bfloat16_training_step():
    model, reference = mlp(), mlp()
    x = torch.randn(16, 40)
    target = torch.randint(0, 5, (16,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = model(x)
        loss = torch.nn.functional.cross_entropy(y, target)
    assert y.dtype == torch.bfloat16
    loss.backward()
    torch.nn.functional.cross_entropy(reference(x), target).backward()
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        assert p.grad.dtype == torch.float32 and torch.isfinite(p.grad).all()
        # bf16 has 8 bits of mantissa: the gradients agree to about 1 %
        assert torch.linalg.norm(p.grad - q.grad) <= 0.05 * torch.linalg.norm(q.grad)


def test_bfloat16_model_trains():
    model = mlp().to(torch.bfloat16)
    x = torch.randn(16, 40, dtype=torch.bfloat16)
    y = model(x)
    assert y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert all(p.grad.dtype == torch.bfloat16 for p in model.parameters())
    assert model.eval()(x).dtype == torch.bfloat16


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU for torch")
def test_cuda_layer_matches_the_cpu_one():
    layer = layer_with(spec=8)
    x = torch.randn(5, 40)
    gpu = layer_with(spec=8).cuda()
    torch.testing.assert_close(gpu(x.cuda()).cpu(), layer(x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gpu.eval()(x.cuda()).cpu(), layer.eval()(x), rtol=1e-5,
                               atol=1e-5)


# -------------------------------------------------------------------------- QAT on digits
def test_qat_on_digits_reaches_97_percent():
    sklearn = pytest.importorskip("sklearn.datasets")
    from sklearn.model_selection import train_test_split

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small matrices: one thread is faster, and reproducible
    try:
        X, y = sklearn.load_digits(return_X_y=True)
        Xtr, Xte, ytr, yte = (torch.as_tensor(a) for a in train_test_split(
            X / 16, y, test_size=0.25, random_state=0, stratify=y))
        Xtr, Xte = Xtr.float(), Xte.float()
        torch.manual_seed(0)
        model = convert(torch.nn.Sequential(
            torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)))
        assert isinstance(model[0], BitLinear) and type(model[2]) is torch.nn.Linear
        epochs, batch = 20, 32
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0)
        steps = epochs * -(-len(Xtr) // batch)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, 1e-2, total_steps=steps)
        g = torch.Generator().manual_seed(0)
        for _ in range(epochs):
            order = torch.randperm(len(Xtr), generator=g)
            for i in range(0, len(Xtr), batch):
                idx = order[i:i + batch]
                loss = torch.nn.functional.cross_entropy(model(Xtr[idx]), ytr[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
        with torch.no_grad():
            accuracy = (model.eval()(Xte).argmax(1) == yte).float().mean().item()
    finally:
        torch.set_num_threads(threads)
    assert accuracy >= 0.97, accuracy


# ---------------------------------------------------------------------- convert and export
class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 256)
        self.attn = torch.nn.MultiheadAttention(256, 4, batch_first=True)
        self.up = torch.nn.Linear(256, 512)
        self.down = torch.nn.Linear(512, 256)
        self.norm = torch.nn.LayerNorm(256)
        self.lm_head = torch.nn.Linear(256, 10, bias=False)
        self.tail = torch.nn.Linear(10, 3)

    def forward(self, tokens):
        h = self.embed(tokens)
        h = h + self.attn(h, h, h)[0]
        h = self.norm(h + self.down(torch.relu(self.up(h))))
        return self.tail(self.lm_head(h))


def kinds(model):
    return {name: type(m).__name__ for name, m in model.named_children()}


def test_convert_replaces_plain_linear_layers_but_the_head():
    model = Block()
    up = model.up.weight
    out = convert(model)
    assert out is model and model.up.weight is up
    assert kinds(model) == {"embed": "Embedding", "attn": "MultiheadAttention",
                            "up": "BitLinear", "down": "BitLinear", "norm": "LayerNorm",
                            "lm_head": "Linear", "tail": "Linear"}
    assert type(model.attn.out_proj).__name__ == "NonDynamicallyQuantizableLinear"
    model(torch.randint(0, 10, (2, 5))).sum().backward()
    assert up.grad is not None


def test_convert_selection():
    assert kinds(convert(Block(), keep_head=False))["lm_head"] == "BitLinear"
    assert kinds(convert(Block(), keep_head=False))["tail"] == "BitLinear"
    chosen = kinds(convert(Block(), include="up", group_size=64))
    assert chosen["up"] == "BitLinear" and chosen["down"] == "Linear"
    chosen = kinds(convert(Block(), exclude=["d*", "x"]))
    assert chosen["up"] == "BitLinear" and chosen["down"] == "Linear"
    chosen = kinds(convert(Block(), exclude=lambda name, m: m.out_features > 300))
    assert chosen["up"] == "Linear" and chosen["down"] == "BitLinear"
    with pytest.raises(TypeError, match="include must be a glob"):
        convert(Block(), include=[1])
    shared = torch.nn.Linear(4, 4)
    model = torch.nn.Sequential(shared, torch.nn.ReLU(), shared, torch.nn.Linear(4, 2))
    convert(model)
    assert isinstance(model[0], BitLinear) and model[0] is model[2]
    assert isinstance(convert(torch.nn.Linear(4, 4), keep_head=False), BitLinear)
    eval_linear = torch.nn.Linear(4, 4).eval()
    layer = convert(torch.nn.Sequential(eval_linear, torch.nn.Linear(4, 1)))[0]
    assert not layer.training and layer.weight_packed is not None


def test_export_round_trips_through_tn_save_and_gguf(tmp_path):
    model = convert(Block())
    model.down.freeze(keep_latent=False)
    tensors = export(model)
    assert model.up.training and model.up.weight_packed is None  # the model is unchanged
    state = model.state_dict()
    ternary = {k for k, v in tensors.items() if isinstance(v, tn.TernaryTensor)}
    assert ternary == {"up.weight", "down.weight"}
    assert set(tensors) == (set(state) - {"down.weight_packed", "down.weight_scale"}) | ternary
    for name, value in tensors.items():
        if name in ternary:
            continue
        assert isinstance(value, np.ndarray)
        np.testing.assert_array_equal(value, state[name].numpy())
    up = tn.quantize(model.up.weight.detach().numpy())
    np.testing.assert_array_equal(tensors["up.weight"].packed.data, up.packed.data)
    assert tensors["down.weight"].packed == model.down.ternary_weight().packed
    # the eval-mode layer runs exactly the exported weights
    x = torch.randn(3, 256)
    np.testing.assert_array_equal(model.up.eval()(x).detach().numpy(),
                                  tn.linear(x.numpy(), tensors["up.weight"], tensors["up.bias"],
                                            activations="int8"))

    # tn.save holds TernaryTensors only (float arrays: see the README)
    tn.save(tmp_path / "w.npz", {k: tensors[k] for k in ternary})
    back = tn.load(tmp_path / "w.npz")
    for k in ternary:
        assert back[k].packed == tensors[k].packed
        np.testing.assert_array_equal(back[k].scales, tensors[k].scales)

    # GGUF takes the whole dict; I2_S keeps the per-tensor float32 scale exactly
    path = os.fspath(tmp_path / "model.gguf")
    tn.io.write_gguf(path, tensors, qtype="I2_S")
    back = tn.io.read_gguf(path)
    for k, v in tensors.items():
        if k in ternary:
            np.testing.assert_array_equal(back[k].packed.unpack(), v.packed.unpack())
            np.testing.assert_array_equal(back[k].scales.ravel(), v.scales.ravel())
        else:
            np.testing.assert_array_equal(back[k], v)


@pytest.mark.parametrize("what", [convert, export])
def test_convert_and_export_of_a_non_model_say_what_they_take(what):
    for bad in (np.zeros((2, 2)), "model.pt", None, {"w": torch.zeros(2)}):
        with pytest.raises(TypeError, match=r"takes a torch\.nn\.Module"):
            what(bad)


def test_export_of_a_model_on_the_meta_device_is_a_clear_error():
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(256, 8), torch.nn.Linear(8, 2))
    for m in (model, convert(model)):
        with pytest.raises(ValueError, match="meta device"):
            export(m)


def test_eval_weights_are_kept_per_buffer_and_leave_with_it():
    """The TernaryTensor over an eval layer's packed buffer is made once, found again while
    the buffer lives and holds the same values, made anew after a write, and dropped with
    the buffer (a plain dict keyed by id: an entry must not outlive its tensor)."""
    import gc

    from tritnum.torch import _ops

    packed = torch.from_numpy(tn.quantize(np.ones((4, 8), np.float32)).packed.data.copy())
    scale = torch.tensor(0.5)
    first = _ops.ternary_weight(packed, scale, 8, None)
    assert _ops.ternary_weight(packed, scale, 8, None) is first
    packed.data[0, 0] = 0  # through .data: no version bump, the sample sees it
    again = _ops.ternary_weight(packed, scale, 8, None)
    assert again is not first and tn.unpack(again.packed)[0, 0] == -1
    key = id(packed)
    assert key in _ops._WEIGHTS
    del packed, first, again
    gc.collect()
    assert key not in _ops._WEIGHTS
