"""CPU kernels of llama.cpp's Q8_K path (contract: :mod:`..reference.q8k`).

The activations are quantized a row at a time in vectorized passes, which give
the shared block quantizer's values and hand it the blocks they cannot do
(all-zero, non-finite, overflowing scale); they are laid out once per
call in the order of :data:`._llvm.dot_q8k.Q8K_BYTE_ORDER`, and each output comes
from :func:`._llvm.dot_q8k.dot_q8k`: the int8 GEMV's ``vpmaddubsw`` integer sums,
kept as ggml's eight lanes per 256-value block and accumulated in float32 in
ggml's order, each lane update fused into one FMA or not as the caller asks
(``fused``). On VNNI levels one row of ``x`` (the GEMV) goes through
:func:`._llvm.dot_q8k.dot_q8k_vnni` instead, in its own layout (:func:`laid_out_vnni`):
``vpdpbusd`` sums fall in ggml's lanes without the int16 step, four weight rows
sharing each load of ``x`` (4096 x 4096 with a scale per 256-block, 1 thread, AVX-512:
0.20 ms before, 0.10 ms with it; the int8 GEMV on the same weights 0.09 ms). Up to
``GEMV_MAX_ROWS`` rows (and any number on the portable level) go through one dot,
``Q8K_ROWS`` rows per decode of a weight row (:func:`dot_q8k_rows`), one tile of
``TILE_ROWS`` rows at a time so that the tile stays in the L1 cache while each weight
row meets all its rows; more rows take the integer GEMM's register tile
(:mod:`.q8k_gemm`), with the same lanes and float32 combine. Weights in other formats
are converted to "2bit" first.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from ..._dispatch import register
from ..._formats import FORMATS, Format
from ..shared.q8k import BSUM, QK_K, quantize_q8k_block
from ._jit import jit, jit_where
from ._llvm.cache import prefetch_row, rows_ahead
from ._llvm.dot_q8k import (
    Q8K_ROWS,
    Q8K_VNNI_ROWS,
    dot_q8k,
    dot_q8k_rows,
    dot_q8k_vnni,
    dot_q8k_vnni_rows,
)
from ._llvm.pool import claim, leave
from ._parallel import MIN_PARALLEL_BYTES, alone, run
from .gemv_native import run_q8k, warm_q8k
from .matmul import GEMV_MAX_ROWS
from .packing import convert
from .q8k_gemm import applies as gemm_applies
from .q8k_gemm import gemm_q8k
from .rescale import add_bias

# rows of laid-out x that each weight row meets in turn (32 KiB at K = 4096: they stay in the
# L1 cache; 16 ran 20-30 % slower); a multiple of Q8K_ROWS
TILE_ROWS = 8

_quantize_block = jit(inline="always")(quantize_q8k_block)

ABS_BITS = np.uint32(0x7FFFFFFF)  # a float32's bits less its sign
INF_BITS = np.uint32(0x7F800000)  # infinity's bits; NaNs' are above
MAGIC = np.float32(12582912)  # 1.5 * 2**23: adding it rounds |v| < 2**22 to an integer, as rint
LOW_BYTES = np.uint64(0x00FF00FF00FF00FF)
FLIP = np.uint64(0x8080808080808080)  # int8 bytes + 128 as uint8


@jit(inline="always")
def _byte_sum16(u, i):
    """Sum of the 16 int8 held by ``u[i]`` and ``u[i + 1]`` (uint64 words), in SWAR.

    Each byte is offset to uint8 (+128), adjacent bytes are added into 16-bit
    fields (at most 1020 after the two words), and the four fields are summed
    by one multiply into the top 16 bits; a loop over 16 bytes per sum does not
    vectorize (9x slower).
    """
    a = u[i] ^ FLIP
    b = u[i + 1] ^ FLIP
    eight = np.uint64(8)
    fields = (a & LOW_BYTES) + ((a >> eight) & LOW_BYTES)
    fields += (b & LOW_BYTES) + ((b >> eight) & LOW_BYTES)
    return np.int32((fields * np.uint64(0x0001000100010001)) >> np.uint64(48)) - np.int32(2048)


@jit(inline="always")
def _quantize_row(x, bits, q, q64, d, bsums):
    """:func:`..shared.q8k.quantize_q8k_block` on every block of one row, in passes that vectorize.

    The same values bit for bit. Each pass goes over the whole row, so that the
    blocks' horizontal reductions and divisions overlap (per block the passes
    took 1.6x longer). The first value of largest |x| is the max of the int64
    keys ``|x|'s bits << 8 | 255 - j`` (``bits`` is x's uint32 view: without the
    sign, float32 bits order like the values, NaN above infinity), which gives
    ``iscale``, kept in ``d``; the quants are rounded as ggml's ``nearest_int``
    (adding ``MAGIC`` rounds half to even; |iscale * x| <= 127 here) and clamped
    to 127; the ``bsums`` come from ``q64``, q's uint64 view, 16 bytes at a time;
    then ``d = 1 / iscale``. A block that is all zero, holds NaN or infinity, or
    whose ``iscale`` overflows gets ``iscale = 0`` in the passes (its products
    could be NaN or infinite, whose conversion to int32 LLVM leaves undefined),
    and then the shared function.
    """
    blocks = d.shape[0]
    for b in range(blocks):
        key = np.int64(0)
        for j in range(QK_K):
            at = np.int64(bits[QK_K * b + j] & ABS_BITS) << 8 | np.int64(QK_K - 1 - j)
            key = at if at > key else key
        top = np.uint32(key >> 8)
        iscale = np.float32(0)
        if top != np.uint32(0) and top < INF_BITS:
            iscale = np.float32(-127) / x[QK_K * b + QK_K - 1 - (key & 255)]
        d[b] = iscale if abs(iscale) != np.float32(np.inf) else np.float32(0)
    for b in range(blocks):
        iscale = d[b]
        if iscale != np.float32(0):
            for j in range(QK_K):
                v = np.int32(iscale * x[QK_K * b + j] + MAGIC) - np.int32(MAGIC)
                q[QK_K * b + j] = v if v < np.int32(127) else np.int32(127)
    for k in range(bsums.shape[0]):
        bsums[k] = _byte_sum16(q64, 2 * k)
    for b in range(blocks):
        if d[b] == np.float32(0):
            d[b] = _quantize_block(x, QK_K * b, q, bsums, QK_K // BSUM * b)
        else:
            d[b] = np.float32(1) / d[b]


@jit()
def _quantize_rows(x, bits, q, q64, d, bsums, t0, t1):
    for r in range(t0, t1):
        _quantize_row(x[r], bits[r], q[r], q64[r], d[r], bsums[r])
    return 0


@jit()
def _q8k_rows(xl, csum, xd, w, scales, fused, y, t0, t1):
    """Outputs ``t0 .. t1`` of every row of ``y``: ``Q8K_ROWS`` rows per :func:`dot_q8k_rows`.

    With a single tile (the GEMV) each weight row is prefetched ``rows_ahead`` rows
    early, as the int8 GEMV does.
    """
    m = xl.shape[0]
    ahead = rows_ahead(w)
    for r0 in range(0, m, TILE_ROWS):
        r1 = min(m, r0 + TILE_ROWS)
        for o in range(t0, t1):
            if m <= TILE_ROWS and o + ahead < t1:
                prefetch_row(w, o + ahead)
            whole = r0 + (r1 - r0) // Q8K_ROWS * Q8K_ROWS
            for r in range(r0, whole, Q8K_ROWS):
                sums = dot_q8k_rows(w, o, xl, r, csum, xd, scales, fused)
                for i in range(Q8K_ROWS):
                    y[r + i, o] = sums[i]
            for r in range(whole, r1):
                y[r, o] = dot_q8k(w, o, xl, r, csum, xd, scales, fused)
    return 0


_vnni_kernel = jit_where(dot_q8k_vnni is not None)  # the VNNI GEMV's kernels


@_vnni_kernel
def _q8k_gemv(xl, csum, xd, w, scales, fused, y, ctl, t1):
    """:func:`_q8k_gemv_rows` over the chunks of outputs this thread claims (``run_claimed``)."""
    o, end = claim(ctl, t1)
    while o < t1:
        _q8k_gemv_rows(xl, csum, xd, w, scales, fused, y, o, end)
        o, end = claim(ctl, t1)
    leave(ctl)
    return 0


@_vnni_kernel
def _q8k_gemv_rows(xl, csum, xd, w, scales, fused, y, t0, t1):
    """Outputs ``t0 .. t1`` of one row of ``x``: ``Q8K_VNNI_ROWS`` weight rows a dot.

    ``csum`` holds minus the chunk sums; prefetched as :func:`_q8k_rows` does.
    """
    ahead = rows_ahead(w)
    o = t0
    while o < t1:
        step = Q8K_VNNI_ROWS if o + Q8K_VNNI_ROWS <= t1 else 1
        for i in range(step):
            if o + i + ahead < t1:
                prefetch_row(w, o + i + ahead)
        if step == Q8K_VNNI_ROWS:  # the rows share each load of x
            sums = dot_q8k_vnni_rows(w, o, xl, 0, csum, xd, scales, fused)
            for i in range(Q8K_VNNI_ROWS):
                y[0, o + i] = sums[i]
        else:
            y[0, o] = dot_q8k_vnni(w, o, xl, 0, csum, xd, scales, fused)
        o += step
    return 0


# position 64 n + 32 h + 4 L + k of a block in the VNNI dot's order takes value 128 h + 32 k +
# 4 L + n (code n of weight byte 8 (k + 4 h) + L): Q8K_VNNI_ORDER read as a gather
VNNI_SOURCE = np.arange(QK_K, dtype=np.int32).reshape(2, 4, 8, 4).transpose(3, 0, 2, 1).ravel()


@_vnni_kernel
def _vnni_operands(q, bsums, source, xl, ncsum):
    """Q8_K rows in the VNNI dot's order, and minus each lane's chunk sum.

    The order is :data:`._llvm.dot_q8k.Q8K_VNNI_ORDER`'s; lane L's chunk sum covers values
    ``32 L .. 32 L + 31`` (two ``BSUM`` sums). One call for what two NumPy steps took
    (5.1 -> 1.8 µs a row of 4096 here).
    """
    m, k = q.shape
    for r in range(m):
        for base in range(0, k, QK_K):
            for p in range(QK_K):
                xl[r, base + p] = q[r, base + source[p]]
        for c in range(ncsum.shape[1]):
            ncsum[r, c] = -(np.int32(bsums[r, 2 * c]) + np.int32(bsums[r, 2 * c + 1]))
    return 0


@_vnni_kernel
def _vnni_row_alone(w, scales, fused, x, bias, y):
    """One float32 row through the VNNI GEMV on this thread, in one call; 1 for non-finite x.

    :func:`quantize_q8k`, :func:`laid_out_vnni` and the GEMV of :func:`linear_q8k` in one
    compiled step: the same kernels (the GEMV called as a call alone calls it), the bias
    added after: the same bits. A block of ``x`` holding NaN or infinity stops the call
    before the GEMV (``y`` untouched): the caller raises.
    """
    k = x.shape[1]
    q = np.empty((1, k), np.int8)
    d = np.empty((1, k // QK_K), np.float32)
    bsums = np.empty((1, k // BSUM), np.int16)
    _quantize_rows(x, x.view(np.uint32), q, q.view(np.uint64), d, bsums, np.intp(0), np.intp(1))
    for b in range(d.shape[1]):
        if not math.isfinite(d[0, b]):
            return 1
    xl = np.empty((1, k), np.int8)
    ncsum = np.empty((1, k // (2 * BSUM)), np.int32)
    _vnni_operands(q, bsums, VNNI_SOURCE, xl, ncsum)
    _q8k_gemv(xl, ncsum, d, w, scales, fused, y, alone(w.shape[0]), w.shape[0])
    add_bias(y, bias)
    return 0


def row_alone(w: np.ndarray, scales: np.ndarray) -> Callable[..., int] | None:
    """``call(fused, x, bias, y)``: :func:`_vnni_row_alone` on "2bit" rows ``w``, or None.

    For weights of fewer than ``MIN_PARALLEL_BYTES`` (their GEMV runs alone) on a CPU
    with the VNNI GEMV, kept by a caller that calls it often (a small layer's route,
    :mod:`.small_linear`): one C-contiguous float32 row ``x`` of whole Q8_K blocks, a
    float32 ``bias`` (empty: none).
    """
    if dot_q8k_vnni is None or not w.shape[0] or w.nbytes >= MIN_PARALLEL_BYTES:
        return None
    return functools.partial(_vnni_row_alone, w, scales)


def laid_out_vnni(q: np.ndarray, bsums: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_vnni_operands`: the GEMV's activations and minus its chunk sums."""
    xl = np.empty_like(q)
    ncsum = np.empty((q.shape[0], bsums.shape[1] // 2), np.int32)
    _vnni_operands(q, bsums, VNNI_SOURCE, xl, ncsum)
    return xl, ncsum


def warm_native() -> None:
    """The VNNI GEMV's entry point and C function for 2-thread calls compiled (or loaded).

    One block of 8 weight rows, on CPUs that have the kernel.
    """
    if dot_q8k_vnni is not None:
        xl, csum = laid_out_vnni(np.zeros((1, QK_K), np.int8), np.zeros((1, QK_K // BSUM),
                                                                        np.int16))
        warm_q8k(_q8k_gemv, 8, xl, csum, np.ones((1, 1), np.float32),
                 np.zeros((8, QK_K // 4), np.uint8), np.ones((8, 1), np.float32), False,
                 np.empty((1, 8), np.float32))


def laid_out(q: np.ndarray) -> np.ndarray:
    """Rows of Q8_K quants in the dot's order: per 32-byte weight block, code run n, position p.

    Value ``128 h + 4 (16 a + 8 j + i) + n`` of a block (code n of weight byte
    ``16 a + 8 j + i`` of half h) goes to position ``128 h + 32 n + 16 a + 2 i + j``.
    """
    m, k = q.shape
    blocks = q.reshape(m, k // QK_K, 2, 2, 2, 8, 4)  # (r, b, h, a, j, i, n)
    return np.ascontiguousarray(blocks.transpose(0, 1, 2, 6, 3, 5, 4)).reshape(m, k)


@register("quantize_q8k", "cpu")
def quantize_q8k(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    m, k = x.shape
    q = np.empty((m, k), np.int8)
    d = np.empty((m, k // QK_K), np.float32)
    bsums = np.empty((m, k // BSUM), np.int16)
    if d.size:
        run(_quantize_rows, m, x.nbytes, x, x.view(np.uint32), q, q.view(np.uint64), d, bsums)
    return q, d, bsums


def linear_q8k(q: np.ndarray, d: np.ndarray, bsums: np.ndarray, w: np.ndarray, fmt: Format,
               n: int, scales: np.ndarray, bias: np.ndarray | None, fused: bool) -> np.ndarray:
    m = q.shape[0]
    if fmt.name != "2bit":
        w = convert(w, fmt, FORMATS["2bit"], n)[0]
    w = np.ascontiguousarray(w)
    if m == 1 and w.shape[0] and dot_q8k_vnni is not None:  # ggml's lanes straight from VNNI
        y = np.empty((m, w.shape[0]), np.float32)
        run_q8k(_q8k_gemv, w.shape[0], w.nbytes, *laid_out_vnni(q, bsums), d, w, scales,
                fused, y)
    else:
        # lane L's chunk sums: values 32 L .. 32 L + 31 (a strided add: 13x faster than .sum)
        csum = bsums[:, 0::2].astype(np.int32) + bsums[:, 1::2]
        if m > GEMV_MAX_ROWS and w.shape[0] and gemm_applies():
            y = gemm_q8k(q, d, csum, w, scales, fused)
        else:
            y = np.empty((m, w.shape[0]), np.float32)
            if y.size:
                run(_q8k_rows, w.shape[0], w.nbytes * max(1, m // TILE_ROWS), laid_out(q), csum,
                    d, w, scales, fused, y)
    if bias is not None:
        y += bias
    return y
