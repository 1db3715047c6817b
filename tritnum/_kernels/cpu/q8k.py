"""CPU kernels of llama.cpp's Q8_K path (contract: :mod:`..reference.q8k`).

The activations are quantized by the shared block quantizer, laid out once per
call in the order of :data:`._llvm.gemv.Q8K_BYTE_ORDER`, and each output comes
from :func:`._llvm.gemv.dot_q8k`: the int8 GEMV's ``vpmaddubsw`` integer sums,
kept as ggml's eight lanes per 256-value block and accumulated in float32 in
ggml's order. On VNNI levels one row of ``x`` (the GEMV) goes through
:func:`._llvm.gemv.dot_q8k_vnni` instead, in its own layout (:func:`laid_out_vnni`):
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

import numpy as np

from ..._dispatch import register
from ..._formats import FORMATS, Format
from ..shared.q8k import BSUM, QK_K, quantize_q8k_block
from ._jit import jit
from ._llvm.cache import prefetch_row, rows_ahead
from ._llvm.gemv import (
    Q8K_ROWS,
    Q8K_VNNI_ROWS,
    dot_q8k,
    dot_q8k_rows,
    dot_q8k_vnni,
    dot_q8k_vnni_rows,
)
from ._parallel import run
from .matmul import GEMV_MAX_ROWS
from .packing import convert
from .q8k_gemm import applies as gemm_applies
from .q8k_gemm import gemm_q8k

# rows of laid-out x that each weight row meets in turn (32 KiB at K = 4096: they stay in the
# L1 cache; 16 ran 20-30 % slower); a multiple of Q8K_ROWS
TILE_ROWS = 8

_quantize_block = jit(inline="always")(quantize_q8k_block)


@jit()
def _quantize_rows(x, q, d, bsums, t0, t1):
    for r in range(t0, t1):
        for b in range(d.shape[1]):
            d[r, b] = _quantize_block(x[r], QK_K * b, q[r], bsums[r], QK_K // BSUM * b)
    return 0


@jit()
def _q8k_rows(xl, csum, xd, w, scales, y, t0, t1):
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
                sums = dot_q8k_rows(w, o, xl, r, csum, xd, scales)
                for i in range(Q8K_ROWS):
                    y[r + i, o] = sums[i]
            for r in range(whole, r1):
                y[r, o] = dot_q8k(w, o, xl, r, csum, xd, scales)
    return 0


@jit()
def _q8k_gemv(xl, csum, xd, w, scales, y, t0, t1):
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
            sums = dot_q8k_vnni_rows(w, o, xl, 0, csum, xd, scales)
            for i in range(Q8K_VNNI_ROWS):
                y[0, o + i] = sums[i]
        else:
            y[0, o] = dot_q8k_vnni(w, o, xl, 0, csum, xd, scales)
        o += step
    return 0


def laid_out_vnni(q: np.ndarray) -> np.ndarray:
    """Rows of Q8_K quants in the VNNI dot's order (:data:`._llvm.gemv.Q8K_VNNI_ORDER`).

    Value ``128 h + 32 k + 4 L + n`` of a block (code n of weight byte ``8 (k + 4 h) + L``)
    goes to position ``64 n + 32 h + 4 L + k``.
    """
    m, k = q.shape
    blocks = q.reshape(m, k // QK_K, 2, 4, 8, 4)  # (r, b, h, k, L, n)
    return np.ascontiguousarray(blocks.transpose(0, 1, 5, 2, 4, 3)).reshape(m, k)


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
        run(_quantize_rows, m, x.nbytes, x, q, d, bsums)
    return q, d, bsums


@register("linear_q8k", "cpu")
def linear_q8k(q: np.ndarray, d: np.ndarray, bsums: np.ndarray, w: np.ndarray, fmt: Format,
               n: int, scales: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    m = q.shape[0]
    if fmt.name != "2bit":
        w = convert(w, fmt, FORMATS["2bit"], n)[0]
    w = np.ascontiguousarray(w)
    # lane L's chunk sums: values 32 L .. 32 L + 31 (a strided add: 13x faster than .sum)
    csum = bsums[:, 0::2].astype(np.int32) + bsums[:, 1::2]
    if m > GEMV_MAX_ROWS and w.shape[0] and gemm_applies():
        y = gemm_q8k(q, d, csum, w, scales)
    else:
        y = np.empty((m, w.shape[0]), np.float32)
        if y.size and m == 1 and dot_q8k_vnni is not None:  # ggml's lanes straight from VNNI
            run(_q8k_gemv, w.shape[0], w.nbytes, laid_out_vnni(q), -csum, d, w, scales, y)
        elif y.size:
            run(_q8k_rows, w.shape[0], w.nbytes * max(1, m // TILE_ROWS), laid_out(q), csum, d,
                w, scales, y)
    if bias is not None:
        y += bias
    return y
