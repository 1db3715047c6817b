"""Wrappers own what their kernels read: the caller cannot reshape or rewrite it afterwards."""

import numpy as np
import pytest

import tritnum as tn


def weights():
    w = np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)
    return tn.quantize(w, axis=-1)


X = np.random.default_rng(1).standard_normal((3, 64)).astype(np.float32)


@pytest.mark.parametrize("fmt", tn.FORMATS)
def test_reshaping_the_callers_buffer_does_not_reach_the_wrapper(fmt):
    ref = weights()
    buf = ref.packed.to(fmt).data.copy()
    w = tn.TernaryTensor(tn.PackedTrits(buf, (8, 64), fmt), ref.scales.copy(), 64)
    want = tn.linear(X, w)
    buf.shape = (buf.size,)  # in place, on the caller's object
    np.testing.assert_array_equal(tn.linear(X, w), want)


@pytest.mark.parametrize("fmt", tn.FORMATS)
def test_writing_the_callers_buffer_after_first_use_changes_nothing(fmt):
    ref = weights()
    buf = ref.packed.to(fmt).data.copy()
    scales = ref.scales.copy()
    w = tn.TernaryTensor(tn.PackedTrits(buf, (8, 64), fmt), scales, 64)
    want = tn.linear(X, w)  # validates the codes once
    buf[...] = 0xFF  # corrupt codes in every format
    scales[...] = 1e30
    np.testing.assert_array_equal(tn.linear(X, w), want)
    np.testing.assert_array_equal(w.dequantize(), ref.dequantize())


def test_the_wrappers_buffers_are_read_only():
    w = weights()
    with pytest.raises(ValueError, match="read-only"):
        w.packed.data[0, 0] = 0xFF
    with pytest.raises(ValueError, match="read-only"):
        w.scales[0] = 0
    mem = tn.vsa.ItemMemory(64)
    mem.add("a")
    with pytest.raises(ValueError, match="read-only"):
        mem.vectors[0, 0] = 5


def test_no_copy_where_nobody_else_can_write():
    data = tn.pack(np.ones((4, 64), np.int8)).data
    frozen = np.frombuffer(data.tobytes(), np.uint8).reshape(data.shape)  # over immutable bytes
    assert np.shares_memory(tn.PackedTrits(frozen, (4, 64)).data, frozen)
    writable = data.copy()
    assert not np.shares_memory(tn.PackedTrits(writable, (4, 64)).data, writable)
    trusted = tn.PackedTrits(writable, (4, 64), copy=False)  # the caller promises
    assert np.shares_memory(trusted.data, writable)
    view = writable.view()
    view.flags.writeable = False  # read-only, but its base is not
    assert not np.shares_memory(tn.PackedTrits(view, (4, 64)).data, writable)
    p = tn.pack(np.ones((4, 64), np.int8))
    assert np.shares_memory(p[1:3].data, p.data)  # rows of a wrapper are views of it


@pytest.mark.parametrize("shape", [(256,), (3, 100)])
def test_bit_plane_results_of_one_vector_ops_are_read_only_and_exact(shape):
    """The host route builds its PackedTrits directly: still read-only, valid, exact."""
    rng = np.random.default_rng(2)
    a, b = (rng.integers(-1, 2, shape).astype(np.int8) for _ in range(2))
    c = tn.vsa.bind(tn.pack(a, format="bitplane"), tn.pack(b, format="bitplane"))
    assert c.shape == shape and all(type(s) is int for s in c.shape)
    np.testing.assert_array_equal(tn.unpack(c), a * b)
    with pytest.raises(ValueError, match="read-only"):
        c.data[..., 0] = 0
