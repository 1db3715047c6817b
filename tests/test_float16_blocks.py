"""float16 gradients and weights are widened to float32 a block at a time, never whole.

Peaks measured with ``tracemalloc`` (NumPy's allocations are traced; the kernels' run
buffers are 64 values), after a warm-up call of the same size so that compiling and
starting the thread pool are not measured; the
results equal the float32 path's bit for bit (widening float16 is exact).
"""

import tracemalloc

import numpy as np
import pytest

import tritnum as tn
from tritnum.quantize import HALF_BLOCK

MIB = 1 << 20


def peak(fn, runs=3):
    """The result of ``fn()`` and the most bytes traced while it ran (its result included),
    the least of ``runs`` calls (another thread's allocations are traced too)."""
    most = []
    for _ in range(runs):
        tracemalloc.start()
        try:
            result = fn()
            most.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    return result, min(most)


def every_finite_half():
    """Every finite float16 (subnormals, both zeros), shuffled, as a gradient."""
    h = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    h = h[np.isfinite(h)]
    return np.random.default_rng(0).permutation(h)


@pytest.mark.parametrize("ratio", [1, 3, 100])
def test_compress_of_float16_equals_float32_bit_for_bit(ratio, backends):
    g = every_finite_half()
    for device in backends:
        s = tn.compress(g, ratio, seed=5, device=device)
        ref = tn.compress(g.astype(np.float32), ratio, seed=5, device="numpy")
        assert s.values.tobytes() == ref.values.tobytes(), device


@pytest.mark.parametrize("ratio", [1, 7])
def test_error_feedback_of_float16_equals_float32_bit_for_bit(ratio):
    g = every_finite_half()
    halves = [g, g / np.float16(2), -g]
    runs = {}
    for name, device, grads in (("cpu", "cpu", halves), ("numpy", "numpy", halves),
                                ("float32", "cpu", [h.astype(np.float32) for h in halves])):
        ef = tn.ErrorFeedback(ratio, seed=9, device=device)
        updates = np.concatenate([ef(h) for h in grads])
        runs[name] = updates.tobytes(), ef.residual.tobytes()
    assert runs["cpu"] == runs["numpy"] == runs["float32"]


def test_compress_peak_is_the_sketch_not_a_float32_copy():
    g = np.random.default_rng(1).standard_normal(2 * MIB).astype(np.float16)  # 4 MiB
    tn.compress(g, 8, seed=1, device="cpu")  # compiled, threads started, outside the measure
    s, most = peak(lambda: tn.compress(g, 8, seed=1, device="cpu"))
    assert s.values.nbytes == MIB
    assert most < s.values.nbytes + MIB, most  # a float32 copy is 8 MiB


def test_error_feedback_peak_is_the_update_not_a_float32_copy():
    g = np.random.default_rng(2).standard_normal(2 * MIB).astype(np.float16)
    ef = tn.ErrorFeedback(8, seed=3, device="cpu")
    ef(g)  # compiled, and the residual made, outside the measure
    p, most = peak(lambda: ef(g))
    assert p.nbytes == 8 * MIB
    # the update, the sketch and its projected values: not 8 MiB more
    assert most < p.nbytes + 3 * MIB, most


def test_quantize_of_float16_rows_equals_float32_and_peaks_at_a_block(backends):
    w = np.random.default_rng(4).standard_normal((2048, 2048)).astype(np.float16)  # 8 MiB
    for kwargs in ({}, {"axis": -1}, {"group_size": 512}):
        tn.quantize(w[:8], device="cpu", **kwargs)  # compiled first: numba's objects are traced
        t, most = peak(lambda kw=kwargs: tn.quantize(w, device="cpu", **kw))
        ref = tn.quantize(w.astype(np.float32), device="cpu", **kwargs)
        assert t.packed.data.tobytes() == ref.packed.data.tobytes()
        assert np.asarray(t.scales).tobytes() == np.asarray(ref.scales).tobytes()
        # the block buffer and one block-sized temporary of the packing kernel: a float32
        # copy of the whole input would be 16 MiB more
        assert most < t.packed.nbytes + 2 * 4 * HALF_BLOCK + 2 * MIB, (kwargs, most)
    small = w[:64].copy()
    for device in backends:
        np.testing.assert_array_equal(tn.quantize(small, axis=-1, device=device).dequantize(),
                                      tn.quantize(small.astype(np.float32), axis=-1,
                                                  device=device).dequantize())
