"""CPU quantization kernels (precision contract: :mod:`..reference.quantize`)."""

from __future__ import annotations

import numpy as np

from ..._dispatch import register
from ..._formats import Format
from ..reference.quantize import kept_amax
from . import packing
from ._jit import jit
from ._parallel import run

BLOCK_BYTES = 1 << 22  # int8 trits held at once between quantizing and packing


@jit()
def _abs_sums(w, groups, out, t0, t1):
    """float64 sums of |w| over equal groups of each row, four running sums at a time."""
    g = w.shape[1] // groups
    for r in range(t0, t1):
        for k in range(groups):
            s0 = s1 = s2 = s3 = 0.0
            j = k * g
            end = j + g
            while j + 4 <= end:
                s0 += abs(np.float64(w[r, j]))
                s1 += abs(np.float64(w[r, j + 1]))
                s2 += abs(np.float64(w[r, j + 2]))
                s3 += abs(np.float64(w[r, j + 3]))
                j += 4
            while j < end:
                s0 += abs(np.float64(w[r, j]))
                j += 1
            out[r, k] = (s0 + s1) + (s2 + s3)
    return 0


@jit()
def _ternarize(w, scales, out, t0, t1):
    """int8 trits ``(q > 0.5) - (q < -0.5)`` of ``q = w / scale``, per group."""
    groups = scales.shape[1]
    g = w.shape[1] // groups
    for r in range(t0, t1):
        for k in range(groups):
            s = np.float64(scales[r, k])
            for j in range(k * g, k * g + g):
                q = np.float64(w[r, j]) / s
                out[r, j] = np.int8(q > 0.5) - np.int8(q < -0.5)
    return 0


@jit()
def _row_amax(x, out, t0, t1):
    """Max |x| per row in float32; NaN when the row holds NaN or infinity."""
    for r in range(t0, t1):
        m = np.float32(0)
        finite = np.float32(0)  # x * 0 is NaN exactly for NaN and infinities
        for j in range(x.shape[1]):
            v = np.float32(x[r, j])
            m = max(m, abs(v))
            finite += v * np.float32(0)
        out[r] = m + finite
    return 0


@jit()
def _quantize_rows(x, amax, q, t0, t1):
    """bitnet.cpp's quantize_row_i8_s in float32: rint(x * (127 / amax)), clipped."""
    for r in range(t0, t1):
        iscale = np.float32(127) / amax[r]
        for j in range(x.shape[1]):
            v = np.rint(np.float32(x[r, j]) * iscale)
            q[r, j] = np.int8(min(max(v, np.float32(-128)), np.float32(127)))
    return 0


def _widened(x: np.ndarray) -> np.ndarray:
    """float16 as float32 (exactly): numba's CPU target has no float16 arithmetic."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


@register("abs_sums", "cpu")
def abs_sums(w: np.ndarray, groups: int) -> np.ndarray:
    w = _widened(w)
    out = np.empty((w.shape[0], groups), np.float64)
    run(_abs_sums, w.shape[0], w.nbytes, w, groups, out)
    return out


@register("quantize_pack", "cpu")
def quantize_pack(w: np.ndarray, scales: np.ndarray, fmt: Format) -> np.ndarray:
    w = _widened(w)
    rows, n = w.shape
    out = np.empty(fmt.data_shape((rows, n)), fmt.dtype)
    step = max(1, BLOCK_BYTES // max(n, 1))
    trits = np.empty((min(step, rows), n), np.int8)
    for r0 in range(0, rows, step):
        block = w[r0:r0 + step]
        tile = trits[: block.shape[0]]
        run(_ternarize, block.shape[0], block.nbytes, block, scales[r0:r0 + step], tile)
        out[r0:r0 + step] = packing.pack(tile, fmt)[0]
    return out


@register("quantize_activations", "cpu")
def quantize_activations(x: np.ndarray, per_tensor: bool) -> tuple[np.ndarray, np.ndarray]:
    x = _widened(x)
    rows = x.shape[0]
    amax = np.empty(rows, np.float32)
    run(_row_amax, rows, x.nbytes, x, amax)
    if per_tensor:
        amax = np.full(rows, amax.max(initial=np.float32(0)), np.float32)
    amax = np.maximum(amax, np.float32(1e-5))  # NaN stays NaN
    q = np.empty(x.shape, np.int8)
    run(_quantize_rows, rows, x.nbytes, x, amax, q)
    return q, kept_amax(amax, per_tensor)
