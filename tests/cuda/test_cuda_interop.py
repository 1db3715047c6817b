"""GPU arrays from other libraries: anything with ``__cuda_array_interface__`` stays on the GPU.

CuPy arrays and torch CUDA tensors reach tritnum through the CUDA array interface; this
stand-in exposes nothing else, so every op must read it through the interface and hand
back a GPU array, never a host copy.
"""

import numpy as np
import pytest
from numba import cuda

import tritnum as tn
from tritnum._interop import is_cuda_array, native

pytestmark = pytest.mark.skipif(
    not hasattr(cuda.to_device(np.zeros(1)), "__cuda_array_interface__"),
    reason="numba's simulator has no __cuda_array_interface__ (no device pointers): "
           "these run on a real GPU",
)


class ForeignGPUArray:
    """A GPU buffer known only by its ``__cuda_array_interface__`` (as CuPy's arrays are)."""

    def __init__(self, host):
        self._dev = cuda.to_device(np.ascontiguousarray(host))

    @property
    def __cuda_array_interface__(self):
        return self._dev.__cuda_array_interface__


def trits(shape, seed=0):
    return np.random.default_rng(seed).integers(-1, 2, shape).astype(np.int8)


def on_gpu(x):
    assert is_cuda_array(x) and not isinstance(x, np.ndarray), type(x)
    return x.copy_to_host()


def test_foreign_arrays_are_read_through_the_interface():
    a = trits((2, 9))
    dev = native(ForeignGPUArray(a))
    assert is_cuda_array(dev)
    np.testing.assert_array_equal(dev.copy_to_host(), a)


@pytest.mark.parametrize("fmt", tn.FORMATS)
def test_pack_unpack_stay_on_the_gpu(fmt):
    a = trits((3, 21), seed=1)
    p = tn.pack(ForeignGPUArray(a), fmt)
    assert p.device == "cuda"
    np.testing.assert_array_equal(on_gpu(tn.unpack(p)), a)


def test_linear_and_quantize_activations_stay_on_the_gpu():
    w = tn.quantize(np.random.default_rng(2).standard_normal((4, 16)).astype(np.float32))
    x = np.random.default_rng(3).standard_normal((2, 16)).astype(np.float32)
    np.testing.assert_allclose(on_gpu(tn.linear(ForeignGPUArray(x), w)), tn.linear(x, w),
                               rtol=1e-6)
    q, s = tn.quantize_activations(ForeignGPUArray(x))
    want_q, want_s = tn.quantize_activations(x)
    np.testing.assert_array_equal(on_gpu(q), want_q)
    np.testing.assert_array_equal(on_gpu(s), want_s)


def test_vsa_stays_on_the_gpu():
    a, b = trits((2, 40), 4), trits((2, 40), 5)
    np.testing.assert_array_equal(on_gpu(tn.vsa.bind(ForeignGPUArray(a), b)),
                                  tn.vsa.bind(a, b))
    np.testing.assert_array_equal(on_gpu(tn.vsa.similarity(ForeignGPUArray(a), b, "dot")),
                                  tn.vsa.similarity(a, b, "dot"))
