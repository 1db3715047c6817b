"""CPU ternary matmul (contract: :mod:`..reference.matmul`).

Three paths, picked by the number of activation rows ``m`` and the CPU:

- **GEMV** (``m <= GEMV_MAX_ROWS``, float ``x`` up to ``FLOAT_GEMV_ROWS`` on large
  weights; groups that fill whole bytes of "2bit", other formats transcoded to it for
  the call, "base3" on a row or two of long groups excepted: :data:`BASE3_GEMV_ROWS`):
  memory-bound, so the packed weights are read once, straight from their bytes, by the
  SIMD dot product of
  :mod:`._llvm.gemv` (float ``x``: each row of ``x`` meets ``FLOAT_ROWS`` weight rows
  at a time, in L1). The activations are laid out once per call to match the codes
  (:func:`layout`), which costs ``O(m * n)``.
- **GEMM** (everything else): compute-bound, so tiles of weight rows are decoded
  once to float32 trits and multiplied by BLAS ``sgemm``; the scales come after.
  On the int8 path (the portable level, or scale groups past ``INT32_EXACT``
  inputs) ``q`` is converted to float32: every product and partial sum is an
  integer below ``2**24``, so float32 BLAS returns the exact integer sums
  (``K_EXACT`` bounds the length of one sum).
- **integer GEMM** (int8 activations past the GEMV, from AVX2 on): the
  register-blocked integer kernel of :mod:`.int8_gemm` (VNNI ``vpdpbusd``, AVX2
  ``vpmaddubsw``) in place of the float32 GEMM: 2-6x BLAS per core, by level.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ..._dispatch import register
from ..._formats import Format
from ..shared import linear
from ..shared.linear import into
from ._jit import jit, specialized
from ._llvm.cache import prefetch_row, rows_ahead
from ._llvm.gemv import (
    INT8_LANES,
    SCALED_ROWS,
    SLOTS,
    SUB_BLOCK,
    WHOLE,
    dot_2bit,
    group_dot_2bit,
    grouped_dot_2bit,
    grouped_dot_2bit_in,
    lane_sums_2bit,
    scaled_dot_2bit,
    scaled_dot_2bit_rows,
)
from ._llvm.gemv_target import BLOCK_BYTES, lay_out_blocks
from ._llvm.pool import claim, leave
from ._parallel import MIN_PARALLEL_BYTES, alone, run, with_blas_limit
from .base3_gemv import gemv_base3
from .dequantize import decode_2bit_rows, dequantize_2bit_rows
from .gemv_native import run_gemv, warm_gemv
from .int8_gemm import INT32_EXACT, TWO_BIT, applies, gemm_int8
from .packing import convert, unpack
from .quantize import _absmax_quantize_rows
from .rescale import add_bias, slot_total

# Internal API (tests/test_architecture_seams.py): small_linear.py finishes the GEMV of
# group_gemv.py as these routes do.
_INTERNAL_API = ("_finish",)

GEMV_MAX_ROWS = 16
# float x on weights of a MiB or more: the GEMV (FLOAT_ROWS) up to 48 rows, where the decode
# and sgemm cost more (2 threads, GEMV / GEMM wall time at 24 and 48 rows: 2048^2 0.44,
# 0.82; 4096^2 0.60, 0.95; 8192 x 4096 0.55, 0.91; 4096 x 11008 0.54, 0.92; at 1024^2
# the GEMM wins from 24 rows on, 1.17)
FLOAT_GEMV_ROWS = 48
FLOAT_GEMV_BYTES = 1 << 20
K_EXACT = 1 << 17  # 128 * 2**17 = 2**24: float32 sums of trit * int8 products stay exact
TILE_ELEMENTS = 1 << 22  # decoded weights per GEMM tile (16 MiB of float32)
TRANSCODE_TRITS = 1 << 17  # GEMM tiles of other formats from this size: transcoded, not unpacked
# weight rows the float GEMV takes together: each row of x meets all of them while they
# are in L1 (one weight row at a time, x streamed from L2 from a few rows on)
FLOAT_ROWS = 16


@functools.lru_cache(maxsize=64)
def layout(n: int, segment: int) -> np.ndarray:
    """Where each laid-out activation comes from: indices into ``x`` padded by one zero.

    The row is cut into segments of ``segment`` weight bytes (a whole row, or
    one scale group), each into blocks of ``B = BLOCK_BYTES`` bytes (32 or 64, by
    the CPU's SIMD level), the last one zero-padded: in block k of a segment,
    position ``4Bk + Bc + m`` holds element ``4 * (Bk + m) + c`` of the segment
    (code c of byte m). Index ``n`` (the padding zero) fills positions past the
    segment or the row.
    """
    blocks = -(-segment // BLOCK_BYTES)
    segments = -(-n // (4 * segment))
    k, c, m = np.meshgrid(np.arange(blocks), np.arange(4), np.arange(BLOCK_BYTES),
                          indexing="ij")
    byte = BLOCK_BYTES * k + m
    within = np.where(byte < segment, 4 * byte + c, -1).reshape(-1)
    starts = 4 * segment * np.arange(segments)
    idx = np.where(within >= 0, starts[:, None] + within, n)
    return np.where(idx < n, idx, n).reshape(-1).astype(np.intp)


@jit(inline="always")
def _prefetch(w, o, step, end, prefetch):
    """With ``prefetch``, rows ``o + ahead`` .. ``o + step + ahead`` of ``w`` before ``end``."""
    ahead = rows_ahead(w)
    for i in range(step):
        if prefetch and o + i + ahead < end:
            prefetch_row(w, o + i + ahead)


@jit(inline="always")
def _next(ctl, t1, o, end):
    """Row ``o`` and its chunk's end, or the next chunk claimed once ``o`` reaches ``end``."""
    return (o, end) if o < end else claim(ctl, t1)


# The GEMV's paths, a kernel each, picked by :func:`_gemv_kernel` before the call
# (numba compiles every branch of a kernel: a call compiles only the path it takes).
# Each computes rows of ``y`` over the chunks it claims (:func:`.run_claimed`): per
# segment, the SIMD dot of its codes with the laid-out x. ``prefetch`` says ``x`` is
# int8: each weight row is then prefetched ``rows_ahead`` rows early (on the
# memory-bound int8 path 15-20% faster beyond the cache, 16384 x 8192; the float path
# is compute-bound and loses 2-4% to it). ``xneg`` is minus each group's sum of ``x``
# (int8 ``x``, whose dot sums ``code * q = (trit + 1) * q``) or zeros.


def _gemv_scaled_rows(xl, xneg, xscale, w, scales, segment, prefetch, y, ctl, t1):
    """The GEMV kernel of one scale a row, for int8 (``INT8``) or float ``x``.

    int8 ``x`` takes ``SCALED_ROWS`` rows at a time, sharing each load of ``x`` (float
    ``x``: the 8 accumulators a row fill the registers); a chunk's last few rows take
    one at a time. ``INT8`` is a constant of each copy (:func:`._jit.specialized`),
    which numba prunes on, so a kernel compiles its own dots only: as one kernel with a
    run-time branch, the float signature compiled the int8 path's four-row dot too,
    never run (the first float GEMV at 256 x 256 then took 0.3-0.4 s; the kernel alone
    now runs 2.9 µs a call there, against 3.6).
    """
    units, groups, full = w.shape[1], scales.shape[1], segment // BLOCK_BYTES
    o, end = claim(ctl, t1)
    while o < t1:
        if INT8:  # noqa: F821
            step = SCALED_ROWS if prefetch and o + SCALED_ROWS <= end else 1
        else:
            step = min(FLOAT_ROWS, end - o)
        _prefetch(w, o, step, end, prefetch)
        for r in range(xl.shape[0]):
            xo = r * xl.shape[1]
            if INT8 and step == SCALED_ROWS:  # noqa: F821
                sums = scaled_dot_2bit_rows(w, o * units, units, xl, xo, full, groups, scales,
                                            o * groups, groups, xneg, r * groups)
                for i in range(SCALED_ROWS):
                    y[r, o + i] = xscale[r] * sums[i]
            else:
                for i in range(o, o + step):
                    y[r, i] = xscale[r] * scaled_dot_2bit(w, i * units, units, xl, xo, full,
                                                          groups, scales, i * groups, groups,
                                                          xneg, r * groups)
        o, end = _next(ctl, t1, o + step, end)
    leave(ctl)
    return 0


# by whether x is int8
_gemv_scaled = {int8: jit()(specialized(_gemv_scaled_rows, f"gemv_scaled_{int8}", INT8=int8))
                for int8 in (False, True)}


_GB = group_dot_2bit[WHOLE]


def _gemv_int8_group_rows(xl, xneg, xscale, w, scales, segment, prefetch, y, ctl, t1):
    """The GEMV kernel of int8 ``x`` for scale groups of ``DOT`` weight bytes.

    ``DOT``, a constant of each copy (:func:`._jit.specialized`), is a key of
    ``group_dot_2bit``: a size of ``SUB_BLOCK`` (groups inside a block), ``BLOCK_BYTES``
    (one block) or ``WHOLE`` (more whole blocks, one row a dot); ``ROWS_DOT`` is its dot
    (the last ``SUB_BLOCK``'s for ``WHOLE``: typed, not run). numba takes them as
    constants and compiles that dot only.
    Exact group sums, rescaled in the order every int8 path keeps
    (:func:`.make_group_dot`), for ``SCALED_ROWS`` weight rows at a time (a chunk's
    last few rows: the same row read ``SCALED_ROWS`` times).
    """
    units, groups = w.shape[1], scales.shape[1]
    size = units // groups  # weight bytes a group
    o, end = claim(ctl, t1)
    while o < t1:
        step = SCALED_ROWS if o + SCALED_ROWS <= end else 1
        ws = units if step == SCALED_ROWS else 0  # the rows' stride: 0 reads one row
        _prefetch(w, o, step, end, prefetch)
        for r in range(xl.shape[0]):
            wo, xo, so, ss, xno = o * units, r * xl.shape[1], o * groups, ws // size, r * groups
            if DOT == WHOLE:  # noqa: F821 (one row a dot, blocks in groups of bpg)
                bpg = size // BLOCK_BYTES
                sums = (_GB(w, wo, ws, xl, xo, bpg, groups, scales, so, ss, xneg, xno)[0],
                        _GB(w, wo + ws, ws, xl, xo, bpg, groups, scales, so + ss, ss, xneg,
                            xno)[0],
                        _GB(w, wo + 2 * ws, ws, xl, xo, bpg, groups, scales, so + 2 * ss, ss,
                            xneg, xno)[0],
                        _GB(w, wo + 3 * ws, ws, xl, xo, bpg, groups, scales, so + 3 * ss, ss,
                            xneg, xno)[0])
            else:
                sums = ROWS_DOT(w, wo, ws, xl, xo, 1, groups, scales, so, ss, xneg,  # noqa: F821
                                xno)
            for i in range(step):
                y[r, o + i] = xscale[r] * sums[i]
        o, end = _next(ctl, t1, o + step, end)
    leave(ctl)
    return 0


_F8, _F16 = grouped_dot_2bit_in[8], grouped_dot_2bit_in[16]
_F32 = grouped_dot_2bit_in[SUB_BLOCK[-1]]


def _gemv_float_group_rows(xl, xneg, xscale, w, scales, segment, prefetch, y, ctl, t1):
    """The GEMV kernel of float ``x`` for scale groups of ``DOT`` weight bytes: one dot a row.

    ``DOT`` as in :func:`_gemv_int8_group_rows`: its trits times their groups' scales,
    a scale per run of whole blocks, or the dot for groups of that ``SUB_BLOCK`` size.
    """
    units, groups, full = w.shape[1], scales.shape[1], segment // BLOCK_BYTES
    size = units // groups  # weight bytes a group
    o, end = claim(ctl, t1)
    while o < t1:
        step = min(FLOAT_ROWS, end - o)
        _prefetch(w, o, step, end, prefetch)
        for r in range(xl.shape[0]):
            xo, xno = r * xl.shape[1], r * groups
            for i in range(o, o + step):
                wo, so = i * units, i * groups
                if DOT >= BLOCK_BYTES:  # noqa: F821
                    total = grouped_dot_2bit(w, wo, units, xl, xo, size // BLOCK_BYTES,
                                             groups, scales, so, groups, xneg, xno)
                elif DOT == 8:  # noqa: F821
                    total = _F8(w, wo, 0, xl, xo, full, 1, scales, so, 0, xneg, xno)
                elif DOT == 16:  # noqa: F821
                    total = _F16(w, wo, 0, xl, xo, full, 1, scales, so, 0, xneg, xno)
                else:
                    total = _F32(w, wo, 0, xl, xo, full, 1, scales, so, 0, xneg, xno)
                y[r, i] = xscale[r] * total
        o, end = _next(ctl, t1, o + step, end)
    leave(ctl)
    return 0


# by the weight bytes of a dot: the sizes of SUB_BLOCK, BLOCK_BYTES for whole blocks (int8:
# the keys of group_dot_2bit)
_gemv_int8_groups = {
    b: jit()(specialized(_gemv_int8_group_rows, f"gemv_int8_groups_{b}", DOT=b,
                         ROWS_DOT=group_dot_2bit[SUB_BLOCK[-1] if b == WHOLE else b]))
    for b in group_dot_2bit}
_gemv_float_groups = {b: jit()(specialized(_gemv_float_group_rows, f"gemv_float_groups_{b}",
                                           DOT=b))
                      for b in (*SUB_BLOCK, BLOCK_BYTES)}


@jit()
def _gemv_lanes(xl, xneg, xscale, w, scales, segment, prefetch, y, ctl, t1):
    """Other groups of whole lanes: each block's lane sums, then each group's.

    int8 ``x`` (``prefetch``): exact group sums from the int32 lanes, rescaled in
    the order of the other int8 paths; float ``x``: each byte's 4 products summed,
    then each group's bytes.
    """
    units, groups = w.shape[1], scales.shape[1]
    size = units // groups  # weight bytes a group
    per = size * INT8_LANES // BLOCK_BYTES  # int32 lanes a group
    slots = np.zeros(SLOTS)
    lane_i = np.empty(units // BLOCK_BYTES * INT8_LANES if prefetch else 0, np.int32)
    lane_f = np.empty(0 if prefetch else units, np.float32)
    o, end = claim(ctl, t1)
    while o < t1:
        _prefetch(w, o, 1, end, prefetch)
        for r in range(xl.shape[0]):
            xo = r * xl.shape[1]
            if prefetch:
                lane_sums_2bit(w, o * units, xl, xo, units // BLOCK_BYTES, lane_i, 0)
                slots[:] = 0.0
                for g in range(groups):
                    total = xneg[r, g]
                    for i in range(g * per, g * per + per):
                        total += lane_i[i]
                    slots[g % SLOTS] += np.float64(scales[o, g]) * total
                y[r, o] = xscale[r] * slot_total(slots)
            else:
                lane_sums_2bit(w, o * units, xl, xo, units // BLOCK_BYTES, lane_f, 0)
                acc = 0.0
                for g in range(groups):
                    part = np.float32(0.0)
                    for i in range(g * size, g * size + size):
                        part += lane_f[i]
                    acc += np.float64(scales[o, g]) * part
                y[r, o] = xscale[r] * acc
        o, end = _next(ctl, t1, o + 1, end)
    leave(ctl)
    return 0


@jit()
def _gemv_segments(xl, xneg, xscale, w, scales, segment, prefetch, y, ctl, t1):
    """Segments that are not whole blocks (groups of other sizes), any ``x``.

    A dot per segment plus one for its last, partial block (copied to ``tail``),
    rescaled in the order of the int8 paths.
    """
    units, groups = w.shape[1], scales.shape[1]
    full = segment // BLOCK_BYTES
    rest = segment - BLOCK_BYTES * full
    per_segment = 4 * BLOCK_BYTES * (full + 1)
    tail = np.zeros(BLOCK_BYTES, np.uint8)  # the last, partial block: zeros meet x's zeros
    slots = np.zeros(SLOTS)
    o, end = claim(ctl, t1)
    while o < t1:
        _prefetch(w, o, 1, end, prefetch)
        for r in range(xl.shape[0]):
            xo = r * xl.shape[1]
            slots[:] = 0.0
            for g in range(groups):
                start = g * segment
                part = dot_2bit(w, o * units + start, xl, xo + g * per_segment, full)
                for i in range(rest):
                    tail[i] = w[o, start + BLOCK_BYTES * full + i]
                part += dot_2bit(tail, 0, xl, xo + g * per_segment + 4 * BLOCK_BYTES * full,
                                 1)
                slots[g % SLOTS] += np.float64(scales[o, g]) * (part + xneg[r, g])
            y[r, o] = xscale[r] * slot_total(slots)
        o, end = _next(ctl, t1, o + 1, end)
    leave(ctl)
    return 0


def _gemv_kernel(segment: int, units: int, groups: int, int8: bool) -> Any:
    """The GEMV kernel of the path a call takes, the only one it then compiles.

    For segments of ``segment`` weight bytes, rows of ``units`` bytes in ``groups``
    scale groups, int8 (``int8``) or float activations.
    """
    if segment % BLOCK_BYTES:
        return _gemv_segments
    if groups == 1:
        return _gemv_scaled[int8]
    size = units // groups  # weight bytes a group (whole rows of whole blocks)
    if size % BLOCK_BYTES and BLOCK_BYTES % size:  # neither whole blocks nor inside one
        return _gemv_lanes
    if not int8:
        return _gemv_float_groups[min(size, BLOCK_BYTES)]
    return _gemv_int8_groups[size if size <= BLOCK_BYTES else WHOLE]


def _float_rows_alone(w, scales, segment, x, bias, y):
    """Float32 rows ``x`` through the GEMV kernel ``KERNEL`` on this thread, in one call.

    :func:`linear_float`'s GEMV route for rows of whole blocks in one compiled step:
    ``x`` laid out here (the transpose of :func:`_laid_out`), the kernel called as a
    call alone calls it, the bias added after as :func:`_finish` adds it: the same bits.
    """
    m, n = x.shape
    xl = np.empty((m, n), np.float32)
    for r in range(m):
        for k in range(n // (4 * BLOCK_BYTES)):
            at = 4 * BLOCK_BYTES * k
            for c in range(4):
                for j in range(BLOCK_BYTES):
                    xl[r, at + BLOCK_BYTES * c + j] = x[r, at + 4 * j + c]
    KERNEL(xl, np.zeros((m, scales.shape[1]), np.int32), np.ones(m, np.float32), w,  # noqa: F821
           scales, segment, False, y, alone(w.shape[0]), w.shape[0])
    add_bias(y, bias)
    return 0


@functools.cache
def _alone_float(kernel: Any) -> Any:
    """:func:`_float_rows_alone` calling ``kernel`` (a copy of its own, made once)."""
    return jit()(specialized(_float_rows_alone, f"alone_{kernel.py_func.__name__}",
                             KERNEL=kernel))


def float_rows_alone(w: np.ndarray, fmt: Format, n: int,
                     scales: np.ndarray) -> Callable[..., Any] | None:
    """``call(x, bias, y)``: :func:`linear_float`'s GEMV of a few float32 rows in one step (0).

    For weights of fewer than ``MIN_PARALLEL_BYTES`` (a GEMV then runs alone) in "2bit"
    rows of whole blocks, kept by a caller that calls it often (a small layer's route,
    :mod:`.small_linear`): C-contiguous float32 ``x`` of at most ``GEMV_MAX_ROWS`` rows,
    a float32 ``bias`` (empty: none), ``y`` the result. None for other weights.
    """
    segment = _gemv_segment(fmt, n, scales.shape[1])
    if (not segment or segment % BLOCK_BYTES or n % (4 * segment)
            or w.nbytes >= MIN_PARALLEL_BYTES):
        return None
    call = _alone_float(_gemv_kernel(segment, w.shape[1], scales.shape[1], False))
    return functools.partial(call, w, scales, segment)


def warm_native() -> None:
    """The one-scale GEMVs' entry point and C functions (int8, float) compiled or loaded.

    For the 2-thread calls (:func:`.gemv_native.run_gemv`): one SIMD block of 8 rows.
    """
    w, scales = np.zeros((8, BLOCK_BYTES), np.uint8), np.ones((8, 1), np.float32)
    for int8 in (True, False):
        xl = np.zeros((1, 4 * BLOCK_BYTES), np.int8 if int8 else np.float32)
        warm_gemv(_gemv_kernel(BLOCK_BYTES, BLOCK_BYTES, 1, int8), 8, xl,
                  np.zeros((1, 1), np.int32), np.ones(1, np.float32), w, scales, BLOCK_BYTES,
                  int8, np.empty((1, 8), np.float32))


def _gemv_segment(fmt: Format, n: int, groups: int) -> int:
    """Weight bytes per layout segment, or 0 when the GEMV kernel does not apply.

    The whole row when it has one scale, or when it is whole blocks and its groups
    are whole lanes of the dots (multiples of 32 inputs: the groups' codes stay in
    place); else one segment a group, padded to whole blocks.
    """
    size = n // groups
    if fmt.name != "2bit" or n == 0 or size > INT32_EXACT:
        return 0
    units = fmt.units(n)
    if groups == 1 or (size % 32 == 0 and units % BLOCK_BYTES == 0):
        return units
    return size // 4 if size % 4 == 0 else 0


def _gemv(x, xscale, w, fmt, n, scales, segment):
    rows = x.shape[0]
    xl = _laid_out(x, n, segment)
    groups = scales.shape[1]
    # the int8 dot sums code * q = (trit + 1) * q; the float dot sums trit * x
    xneg = (-x.reshape(rows, groups, -1).sum(axis=-1, dtype=np.int32) if x.dtype == np.int8
            else np.zeros((rows, groups), np.int32))
    y = np.empty((rows, w.shape[0]), np.float32)
    int8 = x.dtype == np.int8
    run_gemv(_gemv_kernel(segment, w.shape[1], groups, int8), w.shape[0], w.nbytes, xl, xneg,
             xscale, w, scales, segment, int8, y)
    return y


def _laid_out(x: np.ndarray, n: int, segment: int) -> np.ndarray:
    """Rows of ``x`` in the layout of :func:`layout` (zeros in its padding)."""
    if segment % BLOCK_BYTES == 0 and n % (4 * segment) == 0:  # whole blocks: a transpose
        blocks = x.reshape(x.shape[0], -1, BLOCK_BYTES, 4).swapaxes(2, 3)
        return np.ascontiguousarray(blocks).reshape(x.shape[0], -1)
    padded = np.zeros((x.shape[0], n + 1), x.dtype)
    padded[:, :n] = x
    # np.take: 0.07 ms at 256 x 64 in groups of 32, where padded[:, index] took 0.5 ms
    return np.take(padded, layout(n, segment), axis=1)


@with_blas_limit
def _gemm(x, w, fmt, n, scales, xscale, exact=True):
    """``xscale[r] * sum_g scales[o, g] * (x_g @ trits_g.T)``, a tile of weight rows at a time.

    With ``exact``, ``x`` is float32 holding int8 activations (converted exactly), with
    their row scales ``xscale``: BLAS multiplies it by bare trits, in chunks of at most
    ``K_EXACT`` inputs, so the integer group sums are exact; the scales come after, in
    float64. Float ``x`` (not ``exact``, no ``xscale``) meets tiles already scaled
    (``trit * scale`` is exact in float32): one ``sgemm`` per tile whatever the groups
    (groups of 256 took 2.2x the time of one scale as a batched product per group,
    4096 x 4096, 256 rows), each row scaled by the decoding thread while it is in cache
    (a NumPy pass over each tile after the decode, on one thread, took 10 of 33 ms on 2
    threads at 4096 x 4096 in groups of 256).
    Tiles are decoded by the SIMD decoder in the trits' own order, so ``x`` is taken as
    it is (laid out to the GEMV's order, 256 x 256 took 16 of its 192 µs); other formats
    are transcoded to "2bit" first, or unpacked in tiles of fewer than ``TRANSCODE_TRITS``
    (256 rows, 2 threads, groups of 256, "base3": 4096 x 4096 35.4 -> 27.2 ms, 512 x 512
    999 -> 430 µs; 256 x 256 120 µs unpacked, 136 transcoded).
    """
    m, out_rows = x.shape[0], w.shape[0]
    groups = scales.shape[1]
    k = n
    size = k // groups

    def decode(rows, out, by_group=None):
        """``rows`` as float32 trits into ``out``, times their ``by_group`` scales if given."""
        if fmt.name != "2bit" and out.size < TRANSCODE_TRITS:  # a small tile: unpacked
            out[...] = unpack(rows, fmt, n)[0]
            if by_group is not None:
                out.reshape(out.shape[0], groups, size)[...] *= by_group[:, :, None]
            return out
        rows = _two_bit(rows, fmt, n)
        if by_group is None:
            run(decode_2bit_rows, rows.shape[0], out.nbytes, rows, n, out)
        else:  # trit * scale is exact: the bits of a product after the decode
            run(dequantize_2bit_rows, rows.shape[0], out.nbytes, rows, n, by_group, out)
        return out

    if (groups == 1 and k <= K_EXACT) or not exact:  # the common case: one sgemm per tile
        rows = max(1, min(out_rows, TILE_ELEMENTS // k))
        tile = np.empty((rows, k), np.float32)
        sums = np.empty((m, out_rows), np.float32)
        for o0 in range(0, out_rows, rows):
            t = decode(w[o0:o0 + rows], tile[:min(rows, out_rows - o0)],
                       scales[o0:o0 + rows] if groups > 1 else None)
            np.matmul(x, t.T, out=sums[:, o0:o0 + rows])
        if exact:  # int8: scale * sum is exact in float64, as in the GEMV
            return ((sums * scales[:, :1].T.astype(np.float64))
                    * xscale[:, None].astype(np.float64)).astype(np.float32)
        if groups == 1:
            sums *= scales[:, 0]  # float32: one rounding each, well inside the 1e-6 contract
        return sums
    # per-group sums, (m, rows, groups) float64, stay within a tile's size too
    rows = max(1, min(out_rows, TILE_ELEMENTS // k, TILE_ELEMENTS // (m * groups)))
    tile = np.empty((rows, k), np.float32)
    y = np.empty((m, out_rows))
    xg = x.reshape(m, groups, size)
    for o0 in range(0, out_rows, rows):
        t = decode(w[o0:o0 + rows], tile[:min(rows, out_rows - o0)])
        t = t.reshape(t.shape[0], groups, size)
        sums = np.zeros((m, t.shape[0], groups))
        for k0 in range(0, size, K_EXACT):
            a = xg[:, :, k0:k0 + K_EXACT].transpose(1, 0, 2)  # (groups, m, k)
            b = t[:, :, k0:k0 + K_EXACT].transpose(1, 2, 0)  # (groups, k, rows)
            sums += np.matmul(a, b).transpose(1, 2, 0)
        y[:, o0:o0 + t.shape[0]] = rescale(sums, scales[o0:o0 + t.shape[0]])
    return (y * xscale[:, None]).astype(np.float32)


def rescale(sums: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """``sum_g scales[o, g] * sums[r, o, g]`` in the int8 kernels' order, float64 ``(m, out)``.

    The products are exact; group g adds into slot ``g % SLOTS``, the slots are summed
    by halves (:func:`.make_group_dot`): the same bits as the GEMV and the integer GEMM.
    """
    prods = sums * scales.astype(np.float64)
    slots = np.zeros((*prods.shape[:-1], SLOTS))
    for g0 in range(0, prods.shape[-1], SLOTS):
        part = prods[..., g0:g0 + SLOTS]
        slots[..., :part.shape[-1]] += part
    while slots.shape[-1] > 1:
        half = slots.shape[-1] // 2
        slots = slots[..., :half] + slots[..., half:]
    return slots[..., 0]


# Where the "base3" GEMV beats the other routes: one or two rows of long scale groups (its
# dots run a group and digit plane at a time) on weights past the caches; elsewhere a call
# transcodes the rows to "2bit" (``packing.convert``) for the 2bit GEMV (or the integer
# GEMM). Rows by int8 x, on groups of at least BASE3_GEMV_SIZE inputs. Measured per tensor,
# ms GEMV / transcode, rows 1, 2, 4, on 1 and 2 threads: 4096 x 4096 float 0.94 / 1.09,
# 1.51 / 1.40, 2.80 / 2.08 and 0.49 / 0.74, 0.77 / 0.95, 1.45 / 1.31; int8 0.81 / 0.83,
# 1.27 / 0.87, 2.24 / 1.02 and 0.44 / 0.65, 0.68 / 0.74, 1.18 / 0.75; 11008 x 4096 float
# 2 threads 1.29 / 2.40, 2.13 / 2.97 (the GEMV scales, the transcode less). Groups of 1024
# and 256, 1 row, 1 thread: 1.38 and 2.63 against 1.1. At 2048 x 2048 (4M trits) the
# transcode takes 0.25 ms and the routes tie on 1 row.
BASE3_GEMV_ROWS = {False: 2, True: 1}
BASE3_GEMV_SIZE = 4096
BASE3_GEMV_TRITS = 1 << 22


def _base3_gemv_pays(rows: int, size: int, trits: int, int8: bool) -> bool:
    """Whether ``rows`` rows, groups of ``size`` inputs, ``trits`` weights take the base3 GEMV."""
    return (trits > BASE3_GEMV_TRITS and size >= BASE3_GEMV_SIZE
            and rows <= BASE3_GEMV_ROWS[int8])


def _two_bit(w: np.ndarray, fmt: Format, n: int) -> np.ndarray:
    """The rows ``w`` as "2bit" bytes: as they are, or transcoded.

    By the fast kernels, in blocks (the codes were checked on first use). 4096 x 4096,
    1 thread: "base3" 0.7-0.8 ms, "bitplane" 0.55 ms; the float GEMV's former route from
    "bitplane" (decode and BLAS) took 3.6-7 ms, the int8 GEMV's (the GEMM's repack) 4.2 ms.
    """
    return w if fmt.name == "2bit" else convert(w, fmt, TWO_BIT, n)[0]


def _finish(y, bias):
    if bias is not None:
        y += bias
    return y


def _float_gemv_pays(m: int, w: np.ndarray) -> bool:
    """Whether ``m`` rows of float ``x`` take the GEMV.

    Up to ``FLOAT_GEMV_ROWS`` for weights of ``FLOAT_GEMV_BYTES`` or more, whose decode
    for ``sgemm`` leaves the caches.
    """
    return m <= GEMV_MAX_ROWS or (m <= FLOAT_GEMV_ROWS and w.nbytes >= FLOAT_GEMV_BYTES)


def linear_float(x, w, fmt, n, scales, bias, out=None):
    m, groups = x.shape[0], scales.shape[1]
    segment = _gemv_segment(TWO_BIT, n, groups)
    if fmt.name == "base3" and _base3_gemv_pays(m, n // groups, w.shape[0] * n, False):
        y = gemv_base3(x, np.ones(m, np.float32), w, n, scales)
    elif segment and _float_gemv_pays(m, w):
        y = _gemv(x, np.ones(m, np.float32), _two_bit(w, fmt, n), TWO_BIT, n, scales, segment)
    else:
        y = _gemm(x, w, fmt, n, scales, None, exact=False)
    return into(_finish(y, bias), out)


def linear_int8(q, xscale, w, fmt, n, scales, bias, out=None):
    m, groups = q.shape[0], scales.shape[1]
    segment = _gemv_segment(TWO_BIT, n, groups)
    if fmt.name == "base3" and _base3_gemv_pays(m, n // groups, w.shape[0] * n, True):
        y = gemv_base3(q, xscale, w, n, scales)
    elif segment and m <= GEMV_MAX_ROWS:
        y = _gemv(q, xscale, _two_bit(w, fmt, n), TWO_BIT, n, scales, segment)
    elif applies(n, groups):
        y = gemm_int8(q, xscale, w, fmt, n, scales)
    else:
        y = _gemm(q.astype(np.float32), w, fmt, n, scales, xscale)
    return into(_finish(y, bias), out)


@jit()
def _quantized_laid_out(x, bits, amax, amax_bits, q, laid, xneg, xscale):
    """float32 rows quantized per row (as ``quantize_activations``) into the GEMV layout.

    For whole blocks (``_laid_out``'s transpose): ``laid`` (the GEMV's activations) gets
    the quants of each block of ``4 * BLOCK_BYTES`` in the dot's order and ``xneg``
    minus each scale group's sum of them (:func:`.lay_out_blocks`; groups of any multiple
    of 32), ``xscale`` each row's scale, ``amax / 127``; ``q`` is scratch. The views come
    from the caller (made here, they doubled the kernel's compile time, 0.3 -> 0.6 s).
    """
    # an intp 0, not a literal: numba compiled the callee again for Literal[int](0)
    _absmax_quantize_rows(x, bits, amax, amax_bits, q, np.intp(0), x.shape[0])
    m, n = x.shape
    groups = xneg.shape[1]
    for r in range(m):
        xscale[r] = amax[r] / np.float32(127)
        lay_out_blocks(q, r * n, laid, r * n, n // (4 * BLOCK_BYTES), xneg, r * groups,
                       n // groups // 32)
    return 0


_int8_fused = linear.int8_fused("cpu")
class _Scratch(threading.local):
    held: tuple[tuple, tuple[np.ndarray, ...]] | None = None  # (specs, arrays) kept
    busy = False  # a call on this thread uses them (a nested call, a signal handler's, may not)


_SCRATCH = _Scratch()


def _scratch(*specs: tuple[tuple[int, ...], type]) -> tuple[tuple[np.ndarray, ...], bool]:
    """Arrays of the ``(shape, dtype)`` ``specs``, and whether they are this thread's kept ones.

    For the GEMV's activation buffers, which the kernel overwrites whole. Fresh ones each
    call came from memory another thread had just written (the freed result of the last
    2-thread call), and the caller's writes then pulled those lines from the other core:
    int8 ``tn.linear`` at 4096 x 4096 on 2 threads took 84-85 µs with fresh buffers and
    63-65 µs with these (1 thread 89-90 µs either way; Zen 5, medians of 1,000 calls).

    The kept arrays are marked busy until the caller gives them back (:func:`_release`,
    in a ``finally``): a call nested in it on the same thread (from a signal handler, or
    from a callback) gets fresh arrays instead of overwriting the ones the outer call,
    and the helper threads working for it, are still reading. They never leave the
    kernel: what it returns is copied out of them.
    """
    local = _SCRATCH
    if local.busy:
        return tuple(np.empty(shape, dtype) for shape, dtype in specs), False
    local.busy = True  # a handler running before this line ends before the outer call goes on
    held = local.held
    if held is None or held[0] != specs:
        held = local.held = (specs, tuple(np.empty(shape, dtype) for shape, dtype in specs))
    return held[1], True


def _release(kept: bool) -> None:
    """Give back this thread's kept scratch (``kept``: :func:`_scratch` handed it out)."""
    if kept:
        _SCRATCH.busy = False


def linear_int8_fused(x, w, fmt, n, scales, bias, out=None):
    """``quantize_activations`` then ``linear_int8``, as one step for the GEMV.

    For a few float32 rows whose segments are whole blocks, the quantizer writes the
    GEMV's layout and segment sums itself: one kernel call for three steps.
    """
    m = x.shape[0]
    segment = _gemv_segment(fmt, n, scales.shape[1])
    if (x.dtype != np.float32 or m > GEMV_MAX_ROWS or not segment
            or segment % BLOCK_BYTES or n % (4 * segment)):
        return _int8_fused(x, w, fmt, n, scales, bias, out)
    scratch, kept = _scratch(((2, m), np.float32), ((2, m, n), np.int8),
                             ((m, scales.shape[1]), np.int32))
    try:
        (amax, xscale), (xl, q), xneg = scratch
        _quantized_laid_out(x, x.view(np.uint32), amax, amax.view(np.uint32), q, xl, xneg,
                            xscale)
        y = np.empty((m, w.shape[0]), np.float32)
        # a row with NaN or infinity: NaN scale, NaN outputs (quietly: numba sets no NumPy flags)
        run_gemv(_gemv_kernel(segment, w.shape[1], scales.shape[1], True), w.shape[0],
                 w.nbytes, xl, xneg, xscale, w, scales, segment, True, y)
        xscale = xscale.copy()  # out of the scratch before it is given back
    finally:
        _release(kept)
    return into(_finish(y, bias), out), xscale


register("keep", "cpu")(linear.keep)
