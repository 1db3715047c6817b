"""CPU ``dequantize``: float32 ``trit * scale`` of int8 trit rows in one pass.

The NumPy version (the numpy backend's) converts the trits to a fresh float32 array,
then multiplies it in place: two passes over the output, the first one faulting its
pages in. Here each value is written once, from the rows' trits and their group's
scale, on the pool's threads for large tensors (4096 x 4096, the sweep on a quiet
machine: 3.5 ms against 7.0 ms for NumPy's one-pass ``trits * scale``, where the
two-pass route took 1.2-2.1x that). ``trit * scale`` is exact (0 or +-scale), so the
bits are NumPy's.
"""

from __future__ import annotations

import numpy as np

from ..._dispatch import register
from ._jit import jit
from ._parallel import run


@jit()
def _dequantize(trits, scales, out, t0, t1):
    """Rows ``t0..t1`` of ``out`` = ``trits * scales`` (scales ``(1, 1)``: one for all)."""
    n = trits.shape[1]
    groups = scales.shape[1]
    size = n // groups
    shared = scales.shape[0] == 1
    for r in range(t0, t1):
        sr = 0 if shared else r
        row, o = trits[r], out[r]
        for g in range(groups):
            s = scales[sr, g]
            lo = g * size
            for j in range(size):
                o[lo + j] = np.float32(row[lo + j]) * s
    return 0


@register("dequantize", "cpu")
def dequantize_rows(trits: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """float32 ``trits * scale`` of int8 rows ``(R, n)`` and float32 scales ``(R, groups)``."""
    rows, n = trits.shape
    out = np.empty((rows, n), np.float32)
    if out.size:
        run(_dequantize, rows, out.nbytes, np.ascontiguousarray(trits),
            np.ascontiguousarray(scales, np.float32), out)
    return out
