"""Small layers' one-call route (``_kernels/cpu/small_linear.py``, issue 29 item 2).

A layer of at most ``SMALL_WEIGHTS`` weights with one scale a row is prepared once
(its codes in rows of whole blocks) and a call of a few rows is one kernel call. Its
int8 results are the NumPy reference's bit for bit (exact integer sums, the same
rescale), its float results float64 math's within float32 rounding, in every format;
more rows, more weights and scale groups take the packed routes.
"""

import numpy as np
import pytest

import tritnum as tn
from tritnum._kernels.cpu import group_gemv, small_linear
from tritnum._kernels.cpu import matmul as packed

SHAPES = [(1, 1), (3, 5), (64, 64), (17, 100), (8, 256), (5, 300), (256, 512)]  # (out, in)


def layer(out, n, fmt, per_row, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((out, n)).astype(np.float32)
    return tn.quantize(w, format=fmt, axis=-1 if per_row else None)


def activations(rows, n, seed=1):
    return (np.random.default_rng(seed).standard_normal((rows, n)) * 3).astype(np.float32)


@pytest.mark.parametrize("fmt", ["2bit", "base3", "bitplane"])
@pytest.mark.parametrize("out, n", SHAPES)
@pytest.mark.parametrize("rows", [1, 4, 5, 20, 300])  # one call or packed routes, by size
@pytest.mark.parametrize("per_row", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_int8_results_are_the_references_bits(fmt, out, n, rows, per_row, dtype):
    tw = layer(out, n, fmt, per_row)
    x = activations(rows, n).astype(dtype)
    bias = np.random.default_rng(2).standard_normal(out).astype(np.float32)
    # the reference adds the bias before its one rounding; the CPU adds it in float32
    # after (as the packed GEMV has): the bias checked as the CPU adds it
    want = tn.linear(x, tw, activations="int8", device="numpy") + bias
    for _ in range(2):  # the first call prepares the layer, the second finds it kept
        got = tn.linear(x, tw, bias, activations="int8", device="cpu")
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    q, scale = tn.quantize_activations(x)  # int8 x with its scales: the unfused op
    got = tn.linear(q, tw, bias, activations="int8", x_scale=scale)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("fmt", ["2bit", "base3", "bitplane"])
@pytest.mark.parametrize("out, n", SHAPES)
@pytest.mark.parametrize("rows", [1, 3, 6, 70])
def test_float_results_are_float64_math(fmt, out, n, rows):
    tw = layer(out, n, fmt, per_row=True)
    x = activations(rows, n)
    bias = np.random.default_rng(2).standard_normal(out).astype(np.float32)
    dense = tn.unpack(tw.packed).astype(np.float64) * tw.scales.astype(np.float64).reshape(-1, 1)
    want = x.astype(np.float64) @ dense.T + bias
    got = tn.linear(x, tw, bias, device="cpu")
    bound = 1e-6 * (np.abs(x) @ np.abs(dense).T + np.abs(bias)) + 1e-30
    assert (np.abs(got - want) <= bound).all()


def make_packed_routes_fail(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("took a packed route")
    for name in ("linear_float", "linear_int8", "linear_int8_fused"):
        monkeypatch.setattr(packed, name, fail)


@pytest.mark.parametrize("activations_", ["int8", "float"])
def test_a_few_rows_of_a_small_layer_take_one_call(monkeypatch, activations_):
    tw = layer(64, 100, "base3", per_row=False)
    x = activations(small_linear.SMALL_ROWS, 100)
    want = tn.linear(x, tw, activations=activations_, device="numpy")
    make_packed_routes_fail(monkeypatch)
    got = tn.BitLinear(tw, activations=activations_)(x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    int8 = activations_ == "int8"
    reach = small_linear.ONE_CALL_PRODUCTS[int8] // (64 * small_linear.BLOCK)  # rows
    tn.linear(activations(reach, 100), tw, activations=activations_)  # still one call
    with pytest.raises(AssertionError, match="packed route"):  # one row more: a packed route
        tn.linear(activations(reach + 1, 100), tw, activations=activations_)
    codes = tw._cache["cpu_small"].codes
    assert codes.shape == (64, small_linear.BLOCK // 4) and not codes.flags.writeable


@pytest.mark.parametrize("kw", [{"group_size": 32}, {}])
def test_small_layers_in_groups_take_one_call_and_large_layers_the_packed_routes(monkeypatch,
                                                                                  kw):
    n = 256 if kw else small_linear.SMALL_WEIGHTS // 64 + 256  # 64 rows past the bound
    tw = tn.quantize(np.random.default_rng(0).standard_normal((64, n)), **kw)
    make_packed_routes_fail(monkeypatch)
    if kw:  # the packed GEMVs' kernels in one call (int8: on laid-out rows, where it exists)
        tn.linear(activations(1, n), tw, activations="float")
        if group_gemv.ROW_TILE is not None:
            tn.linear(activations(1, n), tw, activations="int8")
            assert tw._cache["cpu_groups"]._panel is not None
        else:
            with pytest.raises(AssertionError, match="packed route"):
                tn.linear(activations(1, n), tw, activations="int8")
        with pytest.raises(AssertionError, match="packed route"):  # past a GEMV's rows
            tn.linear(activations(packed.GEMV_MAX_ROWS + 1, n), tw, activations="float")
    else:
        with pytest.raises(AssertionError, match="packed route"):
            tn.linear(activations(1, n), tw, activations="int8")
    assert "cpu_small" not in tw._cache


def test_out_bias_and_non_finite_input_through_the_one_call_route():
    tw = layer(16, 40, "2bit", per_row=False)
    bias = np.arange(16, dtype=np.float32)
    x = activations(2, 40)
    out = np.full((2, 16), np.nan, np.float32)
    for act in ("int8", "float"):
        lay = tn.BitLinear(tw, bias=bias, activations=act)
        assert lay(x, out=out) is out
        np.testing.assert_array_equal(out, lay(x))
        np.testing.assert_allclose(out, tn.linear(x, tw, bias, activations=act, device="numpy"),
                                   rtol=1e-5, atol=1e-5)
    x[1, 7] = np.nan
    with pytest.raises(ValueError, match=r"x\[1, 7\] = nan is not finite"):
        tn.BitLinear(tw)(x)
    y = tn.BitLinear(tw)(x, check_finite=False)
    assert np.isnan(y[1]).all() and np.isfinite(y[0]).all()


def test_the_general_route_gives_the_same_bits():
    """A list x (the general route) and a float32 array (the host route) meet the same kernel."""
    tw = layer(32, 48, "bitplane", per_row=True)
    x = activations(3, 48)
    for act in ("int8", "float"):
        fast = tn.linear(x, tw, activations=act)
        general = tn.linear(x.tolist(), tw, activations=act)
        np.testing.assert_array_equal(fast.view(np.uint32), general.view(np.uint32))


@pytest.mark.parametrize("out, kept", [(small_linear.SMALL_PADDED // small_linear.BLOCK, True),
                                       (small_linear.SMALL_PADDED // small_linear.BLOCK + 1,
                                        False)])
def test_narrow_layers_are_prepared_only_while_their_padded_codes_stay_small(out, kept):
    """One input a row pads to a whole block: prepared up to SMALL_PADDED padded codes."""
    tw = layer(out, 1, "2bit", per_row=True)
    x = activations(2, 1)
    want = tn.linear(x, tw, activations="int8", device="numpy")
    got = tn.linear(x, tw, activations="int8")
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    assert ("cpu_small" in tw._cache) is kept
