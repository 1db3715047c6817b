"""Quantization on every CPU-side backend against plain-NumPy transcriptions of the formulas."""

import warnings

import numpy as np
import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tritnum as tn
from tritnum.errors import InvalidTritsError


def float_arrays(max_dims=3, max_side=40):
    return hnp.arrays(
        st.sampled_from([np.float16, np.float32, np.float64]),
        hnp.array_shapes(min_dims=1, max_dims=max_dims, min_side=1, max_side=max_side),
        elements={"min_value": -100, "max_value": 100},  # from_dtype: each dtype's own width
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_arrays_hold_values_of_their_own_width(dtype):
    # float32/64 paths must see values float16 cannot hold, not float16 values widened
    find(float_arrays(), lambda w: w.dtype == dtype and (w.astype(np.float16) != w).any(),
         settings=settings(database=None))


def mode_for(w, data):
    n = w.shape[-1]
    divisors = [g for g in range(1, n + 1) if n % g == 0]
    return data.draw(st.sampled_from(
        [{}, {"axis": -1}, {"group_size": data.draw(st.sampled_from(divisors))}]))


def expected_scales(w, mode):
    """scale = max(mean|w|, 1e-5) per tensor / row / group, straight from the formula."""
    a = np.abs(w.astype(np.float64))
    if not mode:
        return np.float32(max(a.mean(), 1e-5))
    g = mode.get("group_size", w.shape[-1])
    means = a.reshape(*w.shape[:-1], w.shape[-1] // g, g).mean(axis=-1)
    return np.maximum(means, 1e-5).astype(np.float32)


def expected_trits(w, scales, mode):
    """t = clip(round_half_even(w / scale), -1, 1) with the scales the function returned."""
    g = w.shape[-1] if not mode else mode.get("group_size", w.shape[-1])
    per_elem = np.repeat(np.broadcast_to(scales, (*w.shape[:-1], w.shape[-1] // g)), g, axis=-1)
    return np.clip(np.rint(w.astype(np.float64) / per_elem.astype(np.float64)), -1, 1)


@given(w=float_arrays(), fmt=st.sampled_from(list(tn.FORMATS)), data=st.data())
def test_quantize_matches_formula(w, fmt, device, data):
    mode = mode_for(w, data)
    t = tn.quantize(w, format=fmt, device=device, **mode)
    assert t.shape == w.shape and t.format == fmt and t.scales.dtype == np.float32
    np.testing.assert_allclose(t.scales, expected_scales(w, mode), rtol=1e-6)
    trits = tn.unpack(t.packed)
    np.testing.assert_array_equal(trits, expected_trits(w, t.scales, mode))
    ref = tn.quantize(w, format=fmt, device="numpy", **mode)
    assert t.packed == ref.packed


def test_float64_weights_a_hair_from_half_a_scale(device, weights_a_hair_from_half_a_scale):
    w, s, trits = weights_a_hair_from_half_a_scale
    t = tn.quantize(w, axis=-1, device=device)
    np.testing.assert_array_equal(t.scales, np.full((3, 1), s))
    np.testing.assert_array_equal(tn.unpack(t.packed), trits)


@given(w=float_arrays(max_dims=2), data=st.data())
def test_dequantize_error_bound(w, data):
    """|w - t*s| <= s/2 where |w| <= 1.5 s (rounding), else |w| - s (clipping)."""
    mode = mode_for(w, data)
    t = tn.quantize(w, **mode)
    g = w.shape[-1] if not mode else mode.get("group_size", w.shape[-1])
    s = np.repeat(np.broadcast_to(t.scales, (*w.shape[:-1], w.shape[-1] // g)), g, axis=-1)
    w64 = w.astype(np.float64)
    bound = np.maximum(0.5 * s, np.abs(w64) - s) * (1 + 1e-6) + 1e-12
    deq = tn.dequantize(t)
    assert deq.dtype == np.float32 and deq.shape == w.shape
    assert (np.abs(w64 - deq) <= bound).all()


def test_all_zero_weights(device):
    t = tn.quantize(np.zeros((3, 8), np.float32), axis=-1, device=device)
    assert (t.scales == np.float32(1e-5)).all()
    assert not tn.unpack(t.packed).any()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_weights_name_the_position(bad, device):
    w = np.ones((3, 5), np.float32)
    w[2, 3] = bad
    with pytest.raises(ValueError, match=rf"w\[2, 3\] = {bad} is not finite"):
        tn.quantize(w, device=device)


@pytest.mark.parametrize(("mode", "where"), [({}, "w"), ({"axis": -1}, r"w\[1, 0:4\]"),
                                             ({"group_size": 2}, r"w\[1, 2:4\]")])
def test_scales_beyond_float32_name_the_group(mode, where, device):
    w = np.ones((2, 4))
    w[1, 2:] = 1e300  # finite in float64, its mean not in float32
    with pytest.raises(ValueError, match=rf"the scale mean\(\|{where}\|\) = .* overflows float32"):
        tn.quantize(w, device=device, **mode)


def test_scales_at_float32_s_edge(device):
    """A mean that rounds to float32's largest value is its scale; half a step more overflows."""
    edge = 2.0 ** 128 - 2.0 ** 103  # halfway between float32's largest value and 2**128
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning on the way either
        t = tn.quantize(np.full((1, 1), np.nextafter(edge, 0)), device=device)
    assert t.scales == np.finfo(np.float32).max
    with pytest.raises(ValueError, match=r"the scale mean\(\|w\|\) = .* overflows float32"):
        tn.quantize(np.full((1, 1), edge), device=device)


@pytest.mark.parametrize("dtype", [">f2", ">f4", ">f8"])
def test_big_endian_floats(dtype, device):
    w = np.random.default_rng(5).standard_normal((3, 10)).astype(dtype)
    native = w.astype(w.dtype.newbyteorder("="))
    t, ref = tn.quantize(w, axis=-1, device=device), tn.quantize(native, axis=-1, device="numpy")
    assert t.packed == ref.packed
    np.testing.assert_array_equal(t.scales, ref.scales)
    for got, want in zip(tn.quantize_activations(w, device=device),
                         tn.quantize_activations(native, device="numpy"), strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.longdouble, np.int8, bool])
def test_only_float16_32_64(dtype):
    with pytest.raises(TypeError, match="must be a float16/32/64 array"):
        tn.quantize(np.ones(4, dtype))
    with pytest.raises(TypeError, match="must be a float16/32/64 array"):
        tn.quantize_activations(np.ones((1, 4), dtype))


def test_group_size_must_divide():
    with pytest.raises(tn.ShapeMismatchError, match="must divide the last axis") as info:
        tn.quantize(np.ones((2, 10)), group_size=4)
    assert info.value.expected == "a divisor of 10" and info.value.actual == 4
    with pytest.raises(ValueError, match="axis must be None"):
        tn.quantize(np.ones((2, 10)), axis=0)
    with pytest.raises(tn.ShapeMismatchError, match="non-empty last axis"):
        tn.quantize(np.ones((2, 0)), axis=-1)
    assert tn.quantize(np.ones((2, 0))).scales == np.float32(1e-5)
    with pytest.raises(TypeError, match=r"tn\.pack"):
        tn.quantize(np.ones((2, 10), np.int8))


def test_ternary_tensor_properties():
    w = np.random.default_rng(0).standard_normal((6, 40)).astype(np.float32)
    t = tn.quantize(w, group_size=8, format="base3")
    assert t.scales.shape == (6, 5) and t.group_size == 8
    assert t.nbytes == 6 * 8 + 6 * 5 * 4
    assert repr(t) == ("TernaryTensor(shape=(6, 40), format='base3', group_size=8, "
                       "5.6 bits/weight, 168 bytes)")  # 48 packed + 120 scale bytes
    assert t.T.shape == (40, 6) and t.T.T is t
    np.testing.assert_array_equal(t.T.dequantize(), t.dequantize().T)
    with pytest.raises(tn.ShapeMismatchError):
        tn.TernaryTensor(t.packed, t.scales[:, :2], 8)
    with pytest.raises(TypeError, match="float32"):
        tn.TernaryTensor(t.packed, t.scales.astype(np.float64), 8)
    with pytest.raises(tn.ShapeMismatchError):
        tn.quantize(np.ones(5)).T  # noqa: B018


@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, max_side=80),
       fmt=st.sampled_from(list(tn.FORMATS)))
def test_nbytes_plans_the_packed_size(shape, fmt):
    assert tn.nbytes(shape, fmt) == tn.pack(np.zeros(shape, np.int8), fmt).nbytes


def expected_activations(x, per_tensor):
    """bitnet.cpp quantize_row_i8_s in float32."""
    x = x.astype(np.float32).reshape(-1, x.shape[-1])
    amax = np.abs(x).max(axis=None if per_tensor else 1, keepdims=True)
    amax = np.maximum(amax, np.float32(1e-5)).astype(np.float32)
    q = np.clip(np.rint(x * (np.float32(127) / amax)), -128, 127).astype(np.int8)
    return q, amax / np.float32(127)


@given(x=float_arrays(), per_tensor=st.booleans())
def test_quantize_activations_matches_formula(x, per_tensor, device):
    q, scale = tn.quantize_activations(x, axis=None if per_tensor else -1, device=device)
    eq, escale = expected_activations(x, per_tensor)
    assert q.dtype == np.int8 and q.shape == x.shape and scale.dtype == np.float32
    np.testing.assert_array_equal(q.reshape(eq.shape), eq)
    if per_tensor:
        assert scale.shape == () and scale == escale.reshape(())
    else:
        assert scale.shape == x.shape[:-1]
        np.testing.assert_array_equal(scale.reshape(-1), escale.reshape(-1))


def test_activation_ties_round_half_even(device):
    # 127 / amax = 1 exactly: x * 1 lands on .5 ties
    x = np.array([[127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5]], np.float32)
    q, _ = tn.quantize_activations(x, device=device)
    assert q.tolist() == [[127, 0, 2, 2, 0, -2, -2]]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_activations_non_finite_name_the_position(bad, dtype, device):
    x = np.ones((3, 40), dtype)
    x[1, 2] = bad
    x[2, 0] = bad
    for axis in (-1, None):
        with pytest.raises(ValueError, match=rf"x\[1, 2\] = {bad} is not finite"):
            tn.quantize_activations(x, axis=axis, device=device)


def test_activations_non_finite(device):
    x = np.ones((2, 4))
    x[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"x\[1, 2\] = nan is not finite"):
        tn.quantize_activations(x, device=device)
    x[1, 2] = 1.0
    x[0, 3] = -1e300  # finite, but activations are computed in float32
    with pytest.raises(ValueError, match=r"x\[0, 3\] = -1e\+300 overflows float32"):
        tn.quantize_activations(x, device=device)


@pytest.mark.parametrize("shape", [(0, 64), (1, 5), (7, 64), (300, 640), (3, 1029)])
@pytest.mark.parametrize("kw", [{}, {"axis": -1}, {"group_size": 32}])
@pytest.mark.parametrize("fmt", ["2bit", "base3", "bitplane"])
def test_dequantize_is_trits_times_their_scale_on_every_backend(device, shape, kw, fmt):
    """Each weight's trit times its tensor's, row's or group's scale, bits as float32 math."""
    if "group_size" in kw and shape[1] % 32:
        kw = {"group_size": shape[1]}
    rng = np.random.default_rng(3)
    tw = tn.quantize(rng.standard_normal(shape).astype(np.float32), format=fmt, **kw)
    trits = tn.unpack(tw.packed).astype(np.float32)
    scales = np.asarray(tw.scales, np.float32)
    groups = 1 if tw.group_size is None else shape[1] // tw.group_size
    by_group = trits.reshape(shape[0], groups, shape[1] // groups)
    want = (by_group * (scales if not kw else scales.reshape(shape[0], groups, 1))).reshape(shape)
    got = tn.dequantize(tw, device=device)
    assert got.dtype == np.float32 and got.shape == shape
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("fmt,bad", [("2bit", 0b11), ("base3", 1)])
def test_dequantize_of_corrupt_codes_raises_as_unpack_does(device, fmt, bad):
    data = tn.pack(np.zeros((2, 300), np.int8), fmt).data.copy()
    data[1, 7] = bad  # a code no encoder writes
    w = tn.TernaryTensor(tn.PackedTrits(data, (2, 300), fmt), np.float32(0.5))
    with pytest.raises(InvalidTritsError) as unpacked:
        tn.unpack(w.packed, device=device)
    with pytest.raises(InvalidTritsError) as dequantized:
        w.dequantize(device=device)
    assert str(dequantized.value) == str(unpacked.value)
