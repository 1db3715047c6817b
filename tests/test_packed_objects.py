"""PackedTrits and TernaryTensor as containers: len, leading-axis indexing, no silent arrays."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tritnum as tn
from tritnum.matmul import _scale_rows

FORMATS = tn.FORMATS


def trits(shape, seed=0):
    return np.random.default_rng(seed).integers(-1, 2, shape).astype(np.int8)


KEYS = [0, -1, 2, slice(1, 3), slice(None, None, -2), (1, 2), (slice(0, 3, 2), -1),
        np.array([3, 0, 3]), [1, 1], (np.array([0, 2]), slice(1, None)), np.array([], int)]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_indexing_leading_axes_matches_numpy(fmt, key):
    a = trits((4, 3, 70))
    p = tn.pack(a, fmt)
    got = p[key]
    assert isinstance(got, tn.PackedTrits) and got.format == fmt
    want = a[key]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.unpack(), want)
    assert got == tn.pack(want, fmt)  # the same bytes an encoder writes


@given(rows=st.integers(1, 6), n=st.integers(1, 90), data=st.data())
def test_indexing_any_rows(rows, n, data):
    a = trits((rows, n), seed=n)
    fmt = data.draw(st.sampled_from(FORMATS))
    idx = data.draw(st.lists(st.integers(-rows, rows - 1), max_size=5))
    np.testing.assert_array_equal(tn.pack(a, fmt)[np.array(idx, int)].unpack(), a[idx])


def test_len():
    assert len(tn.pack(trits((5, 9)))) == 5
    assert len(tn.pack(trits(9))) == 9  # the logical shape's first axis, as NumPy
    assert len(tn.quantize(np.ones((3, 8)))) == 3


def test_the_packed_axis_is_not_indexed():
    p = tn.pack(trits((2, 9)))
    with pytest.raises(IndexError, match="unpack"):
        p[0, 1]
    with pytest.raises(IndexError, match="unpack"):
        tn.pack(trits(9))[0]
    with pytest.raises(IndexError):
        p[5]
    with pytest.raises(TypeError, match="integers"):
        p[1.5]
    with pytest.raises(TypeError, match="bool"):
        p[True]
    with pytest.raises(TypeError, match="integers"):
        p[np.array([0.5])]


def test_indexing_keeps_corrupt_bytes_unchecked():
    data = np.array([[0xFF, 0x55], [0x55, 0x55]], np.uint8)  # row 0 holds code 3
    p = tn.PackedTrits(data, (2, 8), "2bit")
    np.testing.assert_array_equal(p[1].unpack(), np.zeros(8, np.int8))
    with pytest.raises(tn.InvalidTritsError):
        p[0].unpack()


@pytest.mark.parametrize("make", [lambda: tn.pack(trits((2, 5))),
                                  lambda: tn.quantize(np.ones((2, 8)))],
                         ids=["PackedTrits", "TernaryTensor"])
def test_no_silent_object_arrays(make):
    obj = make()
    with pytest.raises(TypeError, match="tn\\."):
        np.asarray(obj)
    with pytest.raises(TypeError, match="tn\\."):
        np.stack([obj, obj])


@pytest.mark.parametrize("group_size", [None, 8, 32])
def test_ternary_tensor_rows_keep_their_scales(group_size):
    w = np.random.default_rng(1).standard_normal((6, 32)).astype(np.float32)
    t = tn.quantize(w, group_size=group_size)
    for key in (2, slice(1, 4), np.array([5, 0])):
        part = t[key]
        assert isinstance(part, tn.TernaryTensor) and part.group_size == group_size
        np.testing.assert_array_equal(part.dequantize(), t.dequantize()[key])
    x = np.random.default_rng(2).standard_normal((3, 32)).astype(np.float32)
    np.testing.assert_allclose(tn.linear(x, t[1:4]), tn.linear(x, t)[:, 1:4], rtol=1e-6)


@pytest.mark.parametrize("group_size", [None, 8, 32])
def test_the_scales_by_row_are_made_once_and_cannot_be_changed(group_size):
    w = np.random.default_rng(3).standard_normal((4, 32)).astype(np.float32)
    t = tn.quantize(w, group_size=group_size)
    rows = _scale_rows(t)
    expected = np.broadcast_to(t.scales, (4, 1)) if group_size is None else t.scales
    np.testing.assert_array_equal(rows, expected)
    assert rows.dtype == np.float32 and rows.shape == (4, 32 // (group_size or 32))
    assert _scale_rows(t) is rows and not rows.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        rows[0, 0] = 2
    assert _scale_rows(t[1:3]).shape == (2, rows.shape[1])  # a new tensor: its own
