"""CPU ``dequantize``: float32 ``trit * scale`` of int8 trit rows in one pass, or of packed ones.

The NumPy version (the numpy backend's) converts the trits to a fresh float32 array,
then multiplies it in place: two passes over the output, the first one faulting its
pages in. Here each value is written once, from the rows' trits and their group's
scale, on the pool's threads for large tensors (4096 x 4096, the sweep on a quiet
machine: 3.5 ms against 7.0 ms for NumPy's one-pass ``trits * scale``, where the
two-pass route took 1.2-2.1x that). ``trit * scale`` is exact (0 or +-scale), so the
bits are NumPy's.

"2bit" rows (``dequantize_packed``) skip the int8 trits: the SIMD decoder of the float
GEMM's tiles (:func:`decode_2bit_rows`) writes each row's float32 trits, times the row's
scale as it goes, or scaled per group in a pass while the row is in cache (one thread,
one scale: 256 x 256 14.2 -> 5.9 µs, 1024 x 1024 100 -> 54 µs, against 8.4 and 145 µs for
NumPy's ``trits * scale`` on int8 trits already unpacked). Other formats unpack first
(:func:`..shared.dequantize.from_packed`).
"""

from __future__ import annotations

import numpy as np

from ..._dispatch import register
from ..._formats import Format
from ..shared.dequantize import from_packed
from ._jit import jit
from ._llvm.gemv import decode_2bit, decode_2bit_scaled
from ._llvm.gemv_target import BLOCK_BYTES
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


@jit(inline="always")
def _tail(w, o, n, done, out, scale):
    """Trits ``done..n`` of row ``o`` of "2bit" ``w`` times ``scale``, a trit at a time."""
    for j in range(done, n):
        out[o, j] = np.float32(np.int32((w[o, j >> 2] >> ((j & 3) * 2)) & 3) - 1) * scale


@jit()
def decode_2bit_rows(w, n, out, t0, t1):
    """Rows t0..t1 of "2bit" ``w`` as float32 trits in their order (``out`` is ``(rows, n)``).

    Whole blocks by the SIMD decoder, the bytes past them a trit at a time.
    """
    units = w.shape[1]
    full = min(units, n // 4) // BLOCK_BYTES
    for o in range(t0, t1):
        if full:
            decode_2bit(w, o * units, out, o * n, full)
        _tail(w, o, n, 4 * BLOCK_BYTES * full, out, np.float32(1))
    return 0


@jit()
def dequantize_2bit_rows(w, n, scales, out, t0, t1):
    """Rows ``t0..t1`` of ``out`` = the trits of "2bit" ``w`` times ``scales``, row by row.

    One scale a row: the decoder multiplies; groups: a pass over the decoded row.
    """
    units = w.shape[1]
    groups = scales.shape[1]
    size = n // groups
    shared = scales.shape[0] == 1
    full = min(units, n // 4) // BLOCK_BYTES
    for r in range(t0, t1):
        sr = 0 if shared else r
        if groups == 1:
            s = scales[sr, 0]
            if full:
                decode_2bit_scaled(w, r * units, out, r * n, full, s)
            _tail(w, r, n, 4 * BLOCK_BYTES * full, out, s)
            continue
        decode_2bit_rows(w, n, out, r, r + 1)
        for g in range(groups):
            s = scales[sr, g]
            part = out[r, g * size:(g + 1) * size]
            for j in range(size):
                part[j] = part[j] * s
    return 0


_unpacked = from_packed("cpu")


@register("dequantize_packed", "cpu")
def dequantize_packed(rows: np.ndarray, fmt: Format, n: int, scales: np.ndarray) -> np.ndarray:
    """float32 ``trits * scale`` of packed ``rows`` ``(R, units)`` (codes checked by the caller)."""
    if fmt.name != "2bit":
        return _unpacked(rows, fmt, n, scales)
    out = np.empty((rows.shape[0], n), np.float32)
    if out.size:
        run(dequantize_2bit_rows, rows.shape[0], out.nbytes, np.ascontiguousarray(rows), n,
            np.ascontiguousarray(scales, np.float32), out)
    return out
