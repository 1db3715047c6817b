"""CUDA scratch (``_launch.scratch``) is busy while a call's launches are queued, and what a
call returns is never a buffer a later call writes.

A call nested in another on the same thread (a signal handler's) runs here at a fixed point:
right after the outer call has quantized its activations into scratch and before its matmul
kernel reads them (``launch`` wrapped). Tiny shapes for the simulator.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

import tritnum as tn
from tritnum._dispatch import call
from tritnum._formats import FORMATS
from tritnum._kernels.cuda import _launch
from tritnum._kernels.cuda import matmul as kernels


def _layers(rng, n):
    w = tn.quantize(rng.standard_normal((5, n)).astype(np.float32), axis=-1)
    small = tn.quantize(rng.standard_normal((3, n)).astype(np.float32), axis=-1)
    return w, small


@pytest.mark.parametrize("m", [1, 2])  # the word GEMV (one row), the row GEMV
def test_nested_call_between_the_quantizer_and_the_matmul(m, monkeypatch):
    rng = np.random.default_rng(m)
    n = 64
    w, small = _layers(rng, n)
    x = rng.standard_normal((m, n)).astype(np.float32)
    other = rng.standard_normal((m, n)).astype(np.float32) * 3  # the same shapes: same scratch
    want = tn.linear(x, w, activations="int8", device="numpy")
    want_other = tn.linear(other, small, activations="int8", device="numpy")
    tn.linear(cuda.to_device(x), w, activations="int8")  # warm: the scratch exists
    real = kernels.launch
    nested = []

    def launch(kernel, *args):
        real(kernel, *args)
        if kernel is kernels.quantize_act_permuted and not nested:
            nested.append(None)  # before the call, so that the nested one does not nest again
            nested[0] = tn.linear(cuda.to_device(other), small, activations="int8").copy_to_host()

    monkeypatch.setattr(kernels, "launch", launch)
    outer = tn.linear(cuda.to_device(x), w, activations="int8").copy_to_host()
    assert nested, "the nested call did not run"
    np.testing.assert_array_equal(nested[0], want_other)
    np.testing.assert_array_equal(outer, want)


def _fused(x, w):
    """``linear_int8_fused`` on the GPU: the result and the row scales it returns."""
    scales = cuda.to_device(np.ascontiguousarray(w.scales.reshape(w.shape[0], -1)))
    return call("linear_int8_fused", "cuda", cuda.to_device(x), cuda.to_device(w.packed.data),
                FORMATS["2bit"], w.shape[1], scales, None)


@pytest.mark.parametrize("m", [1, 2])
def test_returned_row_scales_are_never_rewritten(m):
    rng = np.random.default_rng(5)
    w, _ = _layers(rng, 64)
    x = rng.standard_normal((m, 64)).astype(np.float32)
    _, first = _fused(x, w)
    kept = first.copy_to_host()
    _, second = _fused(x * 2, w)
    assert second is not first
    np.testing.assert_array_equal(first.copy_to_host(), kept)  # the second call wrote elsewhere
    np.testing.assert_array_equal(second.copy_to_host(), kept * 2)
    del first, second
    _, again = _fused(x, w)  # dropped by its holder: a kept buffer serves again
    assert any(again is b for b in _launch._POOL.buffers.values())


def test_zero_rows_return_fresh_arrays():
    w, _ = _layers(np.random.default_rng(0), 64)
    x = np.zeros((0, 64), np.float32)
    y1, s1 = _fused(x, w)
    y2, s2 = _fused(x, w)
    assert s1.shape == (0,) and y1.shape == (0, 5)
    assert s1 is not s2 and y1 is not y2
    assert not any(s is b for s in (s1, s2) for b in _launch._POOL.buffers.values())


def test_scratch_is_busy_inside_held():
    with _launch.held() as outer:
        a = _launch.scratch("t", (3,), np.float32, outer)
        with _launch.held() as inner:
            b = _launch.scratch("t", (3,), np.float32, inner)
    assert outer and not inner and a is not b
    del b
    with _launch.held() as again:
        assert again
        # ``a`` is still held here: a fresh buffer takes its place in the pool
        c = _launch.scratch("t", (3,), np.float32, again)
    assert c is not a
    kept = id(c)
    del a, c
    with _launch.held() as again:
        assert id(_launch.scratch("t", (3,), np.float32, again)) == kept
