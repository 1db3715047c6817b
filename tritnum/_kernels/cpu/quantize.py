"""CPU quantization kernels (precision contract: :mod:`..reference.quantize`)."""

from __future__ import annotations

import numpy as np

from ..._dispatch import register
from ..._formats import FORMATS, Format
from ..shared.floatbits import block_absmax_bits
from ..shared.packing import byte_rows
from ..shared.quantize import EPS, kept_amax
from . import packing
from ._jit import jit, specialized
from ._llvm.packing import BLOCK_TRITS, pack_2bit
from ._parallel import run

# Internal API: the private names other modules use (tests/test_architecture_seams.py):
# cpu/matmul.py (activations).
_INTERNAL_API = ("_absmax_quantize_rows",)

_absmax_bits = jit(inline="always")(block_absmax_bits)
SCRATCH_TRITS = 1 << 14  # trits the fused quantizer ternarizes before each packer call (L1)


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


@jit(inline="always")
def _ternarize_row(w, scales, r, out, by_halves):
    """int8 trits ``(q > 0.5) - (q < -0.5)`` of ``q = w / scale`` (float64) for row r.

    With ``by_halves`` (float32 or float16 weights) it compares ``w`` with ``s / 2``
    instead of dividing: for 24-bit w and s the float64 quotient is never rounded
    onto 0.5 (w - s/2 is 0 or at least 2**-25 s away), so the result is the same.
    """
    groups = scales.shape[1]
    g = w.shape[1] // groups
    for k in range(groups):
        # on the group's slices, indexed from 0: indexing w[r, j] ran 6x slower (not vectorized)
        wg = w[r, k * g:k * g + g]
        og = out[k * g:k * g + g]
        if by_halves:
            half = np.float32(scales[r, k]) * np.float32(0.5)
            for j in range(g):
                og[j] = np.int8(wg[j] > half) - np.int8(wg[j] < -half)
        else:
            s = np.float64(scales[r, k])
            for j in range(g):
                q = np.float64(wg[j]) / s
                og[j] = np.int8(q > 0.5) - np.int8(q < -0.5)


def _quantize_pack_rows_of(w, scales, out, half, t0, t1):
    """The fused quantizer for format code ``FMT``: rows ternarized into a scratch, packed.

    ``FMT``, ``BY_HALVES`` (float32 weights: :func:`_ternarize_row`) and ``PACK`` (the
    format's packer, inlined) are constants of each copy (:func:`._jit.specialized`)
    that numba prunes on, so a kernel compiles its own format's packer and its own dtype's
    ternarizer only: with the three packers as branches taken at run time, the first
    quantize of a process compiled all three (3.0 s of its 4 s, empty cache).

    "2bit" rows are ternarized into a row of whole SIMD blocks (zero trits past the
    row's end, which the format's padding is), packed by the block packer alone and
    the row's bytes copied out: the general packer's word loop and per-unit codecs for
    a row's last bytes took 0.5 s of this kernel's 0.8 s of compiling. Other formats
    fill a scratch of about :data:`SCRATCH_TRITS` trits (whole rows, at least one),
    packed by one call of the format's packer (its body inlined): called a row at a
    time, the 2bit packer took 62-69 µs for 256 rows of 256, in blocks of 64 rows
    20-21 µs (Zen 5, load 6).
    """
    n = w.shape[1]
    if FMT == 0:  # noqa: F821
        blocks = -(-n // BLOCK_TRITS)
        trits = np.empty(blocks * BLOCK_TRITS, np.int8)
        for j in range(n, trits.size):  # zero trits past the row (np.zeros: 0.07 s more)
            trits[j] = 0
        codes = np.empty(blocks * BLOCK_TRITS // 4, np.uint8)
        for r in range(t0, t1):
            _ternarize_row(w, scales, r, trits, BY_HALVES)  # noqa: F821
            pack_2bit(trits, 0, codes, 0, blocks)
            for j in range(out.shape[1]):
                out[r, j] = codes[j]
        return 0
    block = max(1, min(t1 - t0, SCRATCH_TRITS // max(n, 1)))
    scratch = np.empty((block, n), np.int8)
    tasks = ((half or out.shape[1]) + packing.CHUNK - 1) // packing.CHUNK  # a row's
    for r0 in range(t0, t1, block):
        rows = min(block, t1 - r0)
        for i in range(rows):
            _ternarize_row(w, scales, r0 + i, scratch[i], BY_HALVES)  # noqa: F821
        PACK(scratch, out[r0:r0 + rows], half, 0, rows * tasks)  # noqa: F821
    return 0


# by format code and whether the weights are float32 (compared with half their scale)
_PACKERS = (packing._pack2, packing._pack3, packing._packbp)  # by format code
_quantize_pack_rows = {
    (f.code, by_halves): jit()(specialized(
        _quantize_pack_rows_of, f"quantize_pack_rows_{f.name}_{by_halves}", FMT=f.code,
        BY_HALVES=by_halves, PACK=jit(inline="always")(_PACKERS[f.code].py_func)))
    for f in FORMATS.values() for by_halves in (False, True)}


@jit()
def _row_amax_bits(bits, out, t0, t1):
    """Bits of max |x| per row of float32 ``x``, from its uint32 view ``bits``.

    Integer maxima vectorize (4x faster than float max); a row holding a NaN
    gets a NaN's bits, one holding an infinity infinity's.
    """
    for r in range(t0, t1):
        out[r] = _absmax_bits(bits[r], 0, bits.shape[1])
    return 0


@jit()
def _row_amax(x, out, t0, t1):
    """Max |x| per row in float32 (float64 x); NaN when the row holds NaN or infinity."""
    for r in range(t0, t1):
        m = np.float32(0)
        finite = np.float32(0)  # x * 0 is NaN exactly for NaN and infinities
        for j in range(x.shape[1]):
            v = np.float32(x[r, j])
            m = max(m, abs(v))
            finite += v * np.float32(0)
        out[r] = m + finite
    return 0


@jit(inline="always")
def _quantize_row(x, amax, q, r):
    """bitnet.cpp's quantize_row_i8_s in float32 on row r: rint(x * (127 / amax)), clipped."""
    iscale = np.float32(127) / amax[r]
    for j in range(x.shape[1]):
        v = np.rint(np.float32(x[r, j]) * iscale)
        # min(max(v, -128), 127) as numba computes them (the same selects; NaN passes),
        # without compiling its float32 min and max apart (0.07 s of the first GEMV)
        v = np.float32(-128) if np.float32(-128) > v else v
        q[r, j] = np.int8(np.float32(127) if np.float32(127) < v else v)


@jit()
def _quantize_rows(x, amax, q, t0, t1):
    for r in range(t0, t1):
        _quantize_row(x, amax, q, r)
    return 0


@jit()
def _absmax_quantize_rows(x, bits, amax, amax_bits, q, t0, t1):
    """Per float32 row: its max |x| (floored at ``EPS``; NaN stays NaN), then the row quantized.

    One visit per row while it is in cache, and one kernel call for the whole job:
    quantizing one row of 1024 values took 2.7 µs of CPU time in two passes (two
    kernel calls and NumPy's floor between them), 1.8 µs here (Zen 5).
    """
    for r in range(t0, t1):
        amax_bits[r] = _absmax_bits(bits[r], 0, bits.shape[1])
        if amax[r] < np.float32(EPS):
            amax[r] = np.float32(EPS)
        _quantize_row(x, amax, q, r)
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
    out = packing.empty_packed(fmt.data_shape((rows, n)), fmt.dtype)
    dst, half = byte_rows(out, fmt)
    if out.size:
        run(_quantize_pack_rows[fmt.code, w.dtype == np.float32], rows, w.nbytes, w, scales,
            dst, half)
    return out


@register("quantize_activations", "cpu")
def quantize_activations(x: np.ndarray, per_tensor: bool) -> tuple[np.ndarray, np.ndarray]:
    x = _widened(x)
    rows = x.shape[0]
    amax = np.empty(rows, np.float32)
    q = np.empty(x.shape, np.int8)
    if x.dtype == np.float32 and not per_tensor:
        run(_absmax_quantize_rows, rows, x.nbytes, x, x.view(np.uint32), amax,
            amax.view(np.uint32), q)
        return q, amax
    if x.dtype == np.float32:
        run(_row_amax_bits, rows, x.nbytes, x.view(np.uint32), amax.view(np.uint32))
    else:
        run(_row_amax, rows, x.nbytes, x, amax)
    if per_tensor:
        amax = np.full(rows, amax.max(initial=np.float32(0)), np.float32)
    amax = np.maximum(amax, np.float32(EPS))  # NaN stays NaN
    run(_quantize_rows, rows, x.nbytes, x, amax, q)
    return q, kept_amax(amax, per_tensor)
