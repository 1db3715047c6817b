"""GPU data stays on the GPU: strided and mistyped GPU arrays are made whole there.

Every path that used to copy a GPU array to the host and back (to make it contiguous,
convert its dtype, gather rows, dequantize, decode GGUF blocks) is run on numba device
arrays with a spy on ``copy_to_host``: results equal the NumPy reference, come back as
GPU arrays, and nothing the size of the data crosses to the host (the one-element flags
and scalars the kernels read back are allowed).
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

import tritnum as tn
from tritnum import _interop
from tritnum._interop import is_cuda_array

DEVICE_ARRAY = type(cuda.to_device(np.zeros(1)))
SMALL = 8  # elements: flags, a scale, what kernels legitimately read back


@pytest.fixture
def host_copies(monkeypatch):
    """``(dtype, size)`` of every GPU array copied to the host while the test runs."""
    seen = []
    real = DEVICE_ARRAY.copy_to_host

    def spy(self, *args, **kwargs):
        seen.append((np.dtype(self.dtype), int(self.size)))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(DEVICE_ARRAY, "copy_to_host", spy)
    return seen


def big(copies):
    return [c for c in copies if c[1] > SMALL]


def host(a):
    assert is_cuda_array(a) and not isinstance(a, np.ndarray), type(a)
    return a.copy_to_host()


def trits(shape, seed=0):
    return np.random.default_rng(seed).integers(-1, 2, shape).astype(np.int8)


def floats(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


# ------------------------------------------------------------------ the helpers themselves
@pytest.mark.parametrize(("shape", "key"), [
    ((40,), np.s_[::3]),
    ((6, 20), np.s_[::2, 1::3]),
    ((3, 4, 10), np.s_[:, ::2, 3:]),
    ((2, 3, 4, 5), np.s_[:, ::2, :, 1:]),  # rank 4: one launch per leading index
])
@pytest.mark.parametrize(("src", "dst"), [
    (np.int8, None), (np.int64, np.int8), (np.float64, np.float32), (np.float16, np.float32),
])
def test_contiguous_copies_and_casts_on_the_gpu(host_copies, shape, key, src, dst):
    a = (floats(shape) * 3).astype(src)
    got = _interop.contiguous(cuda.to_device(a)[key], dst)
    assert not big(host_copies)
    assert got.is_c_contiguous()
    want = np.ascontiguousarray(a[key], dst)
    out = host(got)
    assert out.dtype == want.dtype
    np.testing.assert_array_equal(out, want)


def test_contiguous_keeps_a_contiguous_array_of_its_dtype():
    d = cuda.to_device(np.arange(6, dtype=np.float32))
    assert _interop.contiguous(d) is d and _interop.contiguous(d, np.float32) is d


@pytest.mark.parametrize("key", [
    (np.array([1, 0, 1]),), (np.array([[1], [0]]),), (1, np.array([0, 2])), (slice(None), 1),
])
def test_take_gathers_rows_on_the_gpu(host_copies, key):
    a = np.arange(2 * 3 * 4 * 5, dtype=np.uint64).reshape(2, 3, 4, 5)
    got = _interop.take(cuda.to_device(a), key, 2)
    assert not big(host_copies)
    np.testing.assert_array_equal(host(got), a[key])


# ------------------------------------------------------------------ packed objects
@pytest.mark.parametrize("fmt", tn.FORMATS)
def test_packed_rows_of_a_gpu_buffer_stay_on_the_gpu(host_copies, fmt):
    a = trits((2, 3, 21), 1)
    p = tn.pack(cuda.to_device(a), fmt)
    hits = cuda.to_device(np.array([2, 0]))
    picks = {"strided": (p[:, 1], a[:, 1]), "numpy": (p[:, np.array([2, 0])], a[:, [2, 0]]),
             "gpu": (p[1, hits], a[1, [2, 0]])}
    for name, (rows, want) in picks.items():
        assert rows.device == "cuda", name
        np.testing.assert_array_equal(host(tn.unpack(rows)), want, err_msg=name)
    assert not [c for c in host_copies if c[0] != np.int8 and c[1] > SMALL]


def test_a_strided_gpu_buffer_is_wrapped_whole(host_copies):
    a = trits((4, 21), 2)
    data = cuda.to_device(np.repeat(tn.pack(a).data, 2, axis=0))[::2]  # strided rows
    p = tn.PackedTrits(data, a.shape, "2bit")
    assert p.device == "cuda" and p.data.is_c_contiguous()
    assert not big(host_copies)
    np.testing.assert_array_equal(host(p.unpack()), a)


def test_ternary_rows_take_gpu_index_arrays():
    w = tn.quantize(cuda.to_device(floats((5, 32), 3).astype(np.float32)), axis=-1)
    idx = np.array([4, 1])
    got = w[cuda.to_device(idx)]
    np.testing.assert_array_equal(host(got.dequantize()), host(w.dequantize())[idx])


# ------------------------------------------------------------------ dequantize, linear
@pytest.mark.parametrize("group_size", [None, 16, 32])
def test_dequantize_runs_where_the_trits_live(host_copies, group_size):
    w = floats((3, 32), 4).astype(np.float32)
    t = tn.quantize(cuda.to_device(w), group_size=group_size)
    host_copies.clear()
    got = t.dequantize()
    assert not big(host_copies)
    want = tn.quantize(w, group_size=group_size).dequantize(device="numpy")
    np.testing.assert_array_equal(host(got), want)


def test_linear_reads_strided_float64_gpu_activations_on_the_gpu(host_copies):
    w = tn.quantize(floats((6, 16), 5).astype(np.float32))
    x = floats((2, 4, 16), 6)
    dx = cuda.to_device(x)[:, ::2]  # strided, float64, 3-D
    host_copies.clear()
    got = tn.linear(dx, w)
    assert not [c for c in host_copies if c[0] == np.float64 or c[1] >= 16]
    np.testing.assert_allclose(host(got), tn.linear(x[:, ::2], w), rtol=1e-6)


def test_linear_out_on_the_gpu_from_a_kernel_without_out():
    w = tn.quantize(floats((4, 256), 7).astype(np.float32), group_size=256)
    x = floats((2, 256), 8).astype(np.float32)
    target = cuda.device_array((2, 4), np.float32)
    assert tn.linear(cuda.to_device(x), w, activations="q8_k", out=target) is target
    np.testing.assert_array_equal(host(target), tn.linear(x, w, activations="q8_k"))


# ------------------------------------------------------------------ compress, vsa
# the simulator runs the sign hash's wrapping uint64 multiplies on NumPy scalars, which warn
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_compress_reads_a_strided_gpu_gradient_on_the_gpu(host_copies):
    g = floats((8, 10), 9).astype(np.float32)
    s = tn.compress(cuda.to_device(g)[:, ::2], ratio=4, seed=3)
    assert not big(host_copies)
    np.testing.assert_allclose(host(s.values),
                               tn.compress(g[:, ::2], ratio=4, seed=3).values, rtol=1e-6)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_error_feedback_residual_is_copied_on_the_gpu(host_copies):
    g = floats((4, 16), 14).astype(np.float32)
    ef, ref = tn.ErrorFeedback(ratio=4, seed=5), tn.ErrorFeedback(ratio=4, seed=5)
    ef(cuda.to_device(g))
    ref(g)
    host_copies.clear()
    got = ef.residual
    assert not big(host_copies)
    assert got is not ef._residual
    np.testing.assert_array_equal(host(got), ref.residual)


def test_vsa_narrows_wide_strided_gpu_trits_on_the_gpu(host_copies):
    a, b = trits((3, 40), 10).astype(np.int64), trits((3, 40), 11)
    got = tn.vsa.bind(cuda.to_device(a)[::2], cuda.to_device(b)[::2])
    assert not [c for c in host_copies if c[0] == np.int64]
    np.testing.assert_array_equal(host(got), tn.vsa.bind(a[::2], b[::2]))


# ------------------------------------------------------------------ GGUF blocks
@pytest.mark.parametrize("qtype", ["TQ2_0", "TQ1_0", "I2_S"])
def test_gguf_blocks_on_the_gpu_decode_there(host_copies, qtype):
    x = floats((2, 256), 12).astype(np.float32)
    buf = tn.io.to_gguf_blocks(x, qtype)
    host_copies.clear()
    got = tn.io.from_gguf_blocks(cuda.to_device(buf), qtype, x.shape)
    assert not big(host_copies)
    np.testing.assert_array_equal(host(got), tn.io.from_gguf_blocks(buf, qtype, x.shape))
    t = tn.io.from_gguf_blocks(cuda.to_device(buf), qtype, x.shape, ternary=True)
    assert t.packed.device == "cuda"
    np.testing.assert_array_equal(host(t.dequantize()),
                                  tn.io.from_gguf_blocks(buf, qtype, x.shape))


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_gguf_encode_reads_gpu_floats_on_the_gpu(host_copies, dtype):
    x = floats((2, 256), 13).astype(dtype)
    dx = cuda.to_device(x)
    host_copies.clear()
    got = tn.io.to_gguf_blocks(dx, "TQ2_0")
    assert not [c for c in host_copies if c[0].kind == "f" and c[1] > SMALL]
    np.testing.assert_array_equal(host(got), tn.io.to_gguf_blocks(x, "TQ2_0"))
