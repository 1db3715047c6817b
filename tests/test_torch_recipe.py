"""tritnum.torch's training-recipe knobs (issue 30 item 5): gradual quantization (λ and
QuantSchedule), norm="rms" and scale_dtype.

Oracles: tritnum's NumPy quantizers (tn.quantize, tn.quantize_activations), integer
products in int64 and float64 NumPy arithmetic; torch.nn.Linear/RMSNorm for λ = 0.
"""

import math

import numpy as np
import pytest

import tritnum as tn
from tritnum.errors import FormatError

torch = pytest.importorskip("torch")
from tritnum.torch import (  # noqa: E402
    BitLinear,
    QuantSchedule,
    convert,
    export,
    load_exported,
    set_quant_lambda,
)


def layer_with(n_in=40, n_out=12, *, bias=True, group_size=None, activations="int8",
               seed=0, **knobs):
    torch.manual_seed(seed)
    layer = BitLinear(n_in, n_out, bias, group_size=group_size, activations=activations,
                      **knobs)
    with torch.no_grad():
        layer.weight.mul_(torch.rand(n_out, 1) * 3)
        if bias:
            layer.bias.normal_()
        if layer.rms_norm is not None:
            layer.rms_norm.weight.uniform_(0.5, 2)
    return layer


def quantized_oracle(w, x, bias, scale_dtype="float32"):
    """float32 forward of today's quantized training layer, from tn's NumPy quantizers: the
    int64 product of int8 activations and trits, times the weight scale (rounded to
    ``scale_dtype``), times the activation scale, plus the bias: the same float32 steps."""
    t = tn.quantize(w)
    trits = tn.unpack(t.packed).astype(np.int64)
    q, sx = tn.quantize_activations(x)
    prod = (q.astype(np.int64) @ trits.T).astype(np.float32)
    sw = torch.tensor(t.scales).to(getattr(torch, scale_dtype)).float().numpy()
    y = prod * sw
    y = y * sx[:, None]
    return y + bias


# ------------------------------------------------------------------------- λ endpoints
@pytest.mark.parametrize("group_size", [None, 8])
@pytest.mark.parametrize("activations", ["int8", "float"])
def test_lambda_zero_is_the_float_layer_values_and_gradients(group_size, activations):
    layer = layer_with(group_size=group_size, activations=activations)
    layer.quant_lambda = 0
    dense = torch.nn.Linear(40, 12)
    with torch.no_grad():
        dense.weight.copy_(layer.weight)
        dense.bias.copy_(layer.bias)
    x = torch.randn(5, 40)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    y, want = layer(x1), dense(x2)
    assert torch.equal(y, want)
    (y * torch.arange(12.0)).sum().backward()
    (want * torch.arange(12.0)).sum().backward()
    assert torch.equal(layer.weight.grad, dense.weight.grad)
    assert torch.equal(layer.bias.grad, dense.bias.grad)
    assert torch.equal(x1.grad, x2.grad)


@pytest.mark.parametrize("scale_dtype", ["float32", "bfloat16", "float16"])
def test_lambda_one_is_the_quantized_layer_bit_for_bit(scale_dtype):
    layer = layer_with(scale_dtype=scale_dtype)
    x = torch.randn(6, 40)
    layer.quant_lambda = 0.3
    layer.quant_lambda = 1.0
    y = layer(x)
    want = quantized_oracle(layer.weight.detach().numpy(), x.numpy(),
                            layer.bias.detach().numpy(), scale_dtype)
    np.testing.assert_array_equal(y.detach().numpy(), want)


def test_blended_forward_and_gradients_against_float64():
    layer = layer_with()
    lam = 0.375
    set_quant_lambda(layer, lam)
    x = torch.randn(4, 40, requires_grad=True)
    y = layer(x)
    w, xs, b = (t.detach().numpy().astype(np.float64) for t in (layer.weight, x, layer.bias))
    t = tn.quantize(layer.weight.detach().numpy())
    w_q = tn.unpack(t.packed) * np.float64(t.scales)
    q, sx = tn.quantize_activations(x.detach().numpy())
    x_q = q * sx[:, None].astype(np.float64)
    x_eff, w_eff = xs + lam * (x_q - xs), w + lam * (w_q - w)
    np.testing.assert_allclose(y.detach().numpy(), x_eff @ w_eff.T + b, rtol=1e-5, atol=1e-5)
    g = np.arange(12.0)[None].repeat(4, 0)
    y.backward(torch.from_numpy(g).float())
    # straight through: the gradients of the float layer at the blended values
    np.testing.assert_allclose(layer.weight.grad.numpy(), g.T @ x_eff, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), g @ w_eff, rtol=1e-5, atol=1e-5)


def test_eval_mode_and_export_ignore_lambda():
    layer = layer_with()
    x = torch.randn(3, 40)
    full = layer.eval()(x)
    exported = export(layer)["weight"]
    layer.train().quant_lambda = 0.0
    assert not torch.equal(layer(x), full)
    assert torch.equal(layer.eval()(x), full)
    again = export(layer.train())["weight"]
    np.testing.assert_array_equal(again.packed.data, exported.packed.data)
    np.testing.assert_array_equal(again.scales, exported.scales)


@pytest.mark.parametrize("value, error", [(-0.1, ValueError), (1.5, ValueError),
                                          (math.nan, ValueError), ("1", TypeError),
                                          (True, TypeError)])
def test_lambda_outside_zero_one_is_refused(value, error):
    layer = layer_with()
    with pytest.raises(error, match="quant_lambda"):
        layer.quant_lambda = value
    with pytest.raises(error, match="quant_lambda"):
        set_quant_lambda(torch.nn.Sequential(layer), value)
    assert layer.quant_lambda == 1.0


def test_lambda_follows_the_layer_to_another_dtype_and_stays_out_of_the_state_dict():
    layer = layer_with()
    layer.quant_lambda = 0.5
    assert layer.double().quant_lambda == 0.5
    assert "_quant_lambda" not in layer.state_dict()


# -------------------------------------------------------------------------- schedules
def test_schedule_shapes_against_their_formulas():
    model = convert(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)))
    n, k = 10, 5.0
    t = np.arange(n + 3) / n
    sig = 1 / (1 + np.exp(-k * (t - 0.5)))
    lo, hi = 1 / (1 + np.exp(k / 2)), 1 / (1 + np.exp(-k / 2))
    want = {"linear": t, "exponential": (np.exp(k * t) - 1) / (np.exp(k) - 1),
            "sigmoid": (sig - lo) / (hi - lo)}
    for shape, values in want.items():
        values = np.minimum(values, 1.0)
        schedule = QuantSchedule(model, n, shape=shape, sharpness=k)
        assert model[0].quant_lambda == 0.0
        got = [schedule.value(0)] + [schedule.step() for _ in range(n + 2)]
        np.testing.assert_allclose(got, values, rtol=0, atol=1e-6)
        assert got[0] == 0.0 and got[n] == 1.0 and model[0].quant_lambda == 1.0
        assert np.all(np.diff(got) >= 0)


def test_schedule_state_dict_resumes():
    model = convert(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)))
    a = QuantSchedule(model, 8, shape="exponential")
    for _ in range(3):
        a.step()
    b = QuantSchedule(model, 100)
    assert model[0].quant_lambda == 0.0
    b.load_state_dict(a.state_dict())
    assert model[0].quant_lambda == a.value(3) and b.step() == a.step()
    assert QuantSchedule(model, 0).value(0) == 1.0
    with pytest.raises(ValueError, match="shape"):
        QuantSchedule(model, 4, shape="cosine")
    with pytest.raises(ValueError, match="warmup_steps"):
        QuantSchedule(model, -1)


# ------------------------------------------------------------------------ norm="rms"
@pytest.mark.parametrize("activations", ["int8", "float"])
def test_rms_norm_comes_before_the_quantization_in_both_modes(activations):
    layer = layer_with(norm="rms", norm_eps=1e-5, activations=activations)
    x = torch.randn(5, 40) * 3
    xs = x.numpy().astype(np.float64)
    normed = xs / np.sqrt((xs ** 2).mean(-1, keepdims=True) + 1e-5) * \
        layer.rms_norm.weight.detach().numpy()
    inner = BitLinear(40, 12, activations=activations)
    with torch.no_grad():
        inner.weight.copy_(layer.weight)
        inner.bias.copy_(layer.bias)
    want = inner(torch.from_numpy(normed).float())
    y = layer(x)
    np.testing.assert_allclose(y.detach().numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-4)
    assert torch.equal(layer.eval()(x), inner.eval()(layer.rms_norm(x)))
    assert "rms_norm.weight" in layer.state_dict()


def test_rms_norm_is_exported_and_restored():
    def make():
        return convert(torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(),
                                           torch.nn.Linear(16, 4)), norm="rms",
                       scale_dtype="bfloat16")
    torch.manual_seed(3)
    trained = make()
    with torch.no_grad():
        trained[0].rms_norm.weight.uniform_(0.5, 2)
    tensors = export(trained)
    assert "0.rms_norm.weight" in tensors
    fresh = make()
    load_exported(fresh, tensors)
    x = torch.randn(3, 32)
    assert torch.equal(fresh.eval()(x), trained.eval()(x))


# ------------------------------------------------------------------------ scale_dtype
@pytest.mark.parametrize("scale_dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("group_size", [None, 8])
def test_scale_dtype_rounds_the_scales_everywhere(scale_dtype, group_size):
    layer = layer_with(group_size=group_size, scale_dtype=scale_dtype)
    t = tn.quantize(layer.weight.detach().numpy(), group_size=group_size)
    want = torch.tensor(t.scales).to(getattr(torch, scale_dtype)).float().numpy()
    assert not np.array_equal(want, t.scales)  # the rounding is visible
    exported = export(layer)["weight"]
    np.testing.assert_array_equal(exported.scales, want)
    np.testing.assert_array_equal(tn.unpack(exported.packed), tn.unpack(t.packed))
    x = torch.randn(4, 40)
    y_train = layer(x)
    layer.eval()
    np.testing.assert_array_equal(layer.weight_scale.numpy(), want)
    torch.testing.assert_close(layer(x), y_train.detach(), rtol=1e-6, atol=1e-6)


def test_a_scale_float16_cannot_hold_is_a_format_error():
    layer = BitLinear(8, 4, scale_dtype="float16")
    with torch.no_grad():
        layer.weight.fill_(1e5)
    with pytest.raises(FormatError, match="float16"):
        layer.eval()
    with pytest.raises(ValueError, match="scale_dtype"):
        BitLinear(8, 4, scale_dtype="float64")
    with pytest.raises(ValueError, match="norm"):
        BitLinear(8, 4, norm="layer")


@pytest.mark.slow
def test_a_compiled_layer_traces_two_graphs_whatever_the_lambdas():
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    layer = layer_with(norm="rms", scale_dtype="bfloat16")
    compiled = torch.compile(layer, fullgraph=True, backend="eager")
    x = torch.randn(4, 40)
    for lam in (0.1, 0.2, 0.3, 1.0, 0.5, 0.0):
        layer.quant_lambda = lam
        assert torch.equal(compiled(x), layer(x))
    assert counters["stats"]["unique_graphs"] == 2  # λ < 1 and λ = 1; λ is a buffer
