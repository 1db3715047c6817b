"""The CUDA sketch kernels (``tritnum/_kernels/cuda/compress.py``) against the NumPy reference.

Tiny shapes: under the simulator every thread costs ~150 µs. For one seed the sketch, both
estimates and error feedback's residual must be the same bits on CUDA, on the CPU and in
the reference.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

import tritnum as tn

# the simulator runs the hash on NumPy uint64 scalars, which warn when a product wraps
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")

def host(x):
    return x.copy_to_host() if hasattr(x, "copy_to_host") else np.asarray(x)


def on_gpu(x):
    return getattr(x, "__cuda_ndarray__", False) or hasattr(x, "__cuda_array_interface__")


@pytest.mark.parametrize(("n", "ratio", "dtype"), [
    (1, 1, np.float32), (70, 16, np.float32), (130, 2.5, np.float64), (200, 64, np.float16),
    (64, 1, np.float32),
])
def test_sketch_and_estimates_are_the_same_bits_everywhere(backends, n, ratio, dtype):
    assert "cuda" in backends  # the lane runs only where CUDA does
    g = np.random.default_rng(n).standard_normal(n).astype(dtype)
    got = {}
    for dev in backends:
        s = tn.compress(g, ratio, seed=n, device=dev)
        got[dev] = [host(s.values)] + [
            host(tn.decompress(s, estimate=e, device=dev)) for e in ("unbiased", "projection")]
    reference, *others = backends
    for dev in others:
        for a, b in zip(got[reference], got[dev], strict=True):
            np.testing.assert_array_equal(a, b)


def test_error_feedback_on_the_gpu_keeps_its_residual_there():
    rng = np.random.default_rng(1)
    grads = rng.standard_normal((3, 90)).astype(np.float32)
    ref = tn.ErrorFeedback(8, seed=4, device="numpy")
    ef = tn.ErrorFeedback(8, seed=4)
    for g in grads:
        expected = ref(g)
        got = ef(cuda.to_device(g))
        assert on_gpu(got) and on_gpu(ef._residual)
        np.testing.assert_array_equal(host(got), expected)
        np.testing.assert_array_equal(host(ef.residual), ref.residual)
    sketch = ef.compress(cuda.to_device(grads[0]))
    assert on_gpu(sketch.values)
    np.testing.assert_array_equal(host(sketch.values), ref.compress(grads[0]).values)


def test_device_arrays_in_device_arrays_out():
    g = cuda.to_device(np.linspace(-1, 1, 50, dtype=np.float32))
    s = tn.compress(g, 5, seed=2)
    assert on_gpu(s.values) and s.values.shape == (10,)
    est = tn.decompress(s)
    assert on_gpu(est) and est.shape == (50,)
    out = cuda.device_array(50, np.float32)
    assert tn.decompress(s, out=out) is out
    np.testing.assert_array_equal(out.copy_to_host(), host(est))
    with pytest.raises(TypeError):
        tn.decompress(s, out=np.empty(50, np.float32))  # a host out for a GPU kernel
    np.testing.assert_array_equal(host(tn.decompress(host(s.values), 50, 2, device="cuda")),
                                  host(est))
