"""CPU kernels of llama.cpp's Q8_K path (contract: :mod:`..reference.q8k`).

The activations are quantized by the shared block quantizer, laid out once per
call in the order of :data:`._llvm.gemv.Q8K_BYTE_ORDER`, and each output is one
call of :func:`._llvm.gemv.dot_q8k`: the int8 GEMV's ``vpmaddubsw`` integer sums,
kept as ggml's eight lanes per 256-value block and accumulated in float32 in
ggml's order. Every row of ``x`` goes through the same dot, one tile of
``TILE_ROWS`` rows at a time so that a tile of laid-out ``x`` stays in the cache
while each weight row meets all its rows. Weights in other formats are
converted to "2bit" first.
"""

from __future__ import annotations

import numpy as np

from ..._dispatch import register
from ..._formats import FORMATS, Format
from ..shared.q8k import BSUM, LANES, QK_K, quantize_q8k_block
from ._jit import jit
from ._llvm.cache import prefetch_row, rows_ahead
from ._llvm.gemv import dot_q8k
from ._parallel import run
from .packing import convert

TILE_ROWS = 16  # rows of laid-out x (64 KiB at K = 4096) that each weight row meets in turn

_quantize_block = jit(inline="always")(quantize_q8k_block)


@jit()
def _quantize_rows(x, q, d, bsums, t0, t1):
    for r in range(t0, t1):
        for b in range(d.shape[1]):
            d[r, b] = _quantize_block(x[r], QK_K * b, q[r], bsums[r], QK_K // BSUM * b)
    return 0


@jit()
def _q8k_rows(xl, csum, xd, w, scales, y, t0, t1):
    """Outputs ``t0 .. t1`` of every row of ``y``: one :func:`dot_q8k` each.

    With a single tile (the GEMV) each weight row is prefetched ``rows_ahead`` rows
    early, as the int8 GEMV does.
    """
    m, k = xl.shape
    units = w.shape[1]
    blocks = xd.shape[1]
    groups = scales.shape[1]
    per_scale = max(1, blocks // groups)  # blocks per weight scale (a divisor of the dot)
    ahead = rows_ahead(w)
    for r0 in range(0, m, TILE_ROWS):
        r1 = min(m, r0 + TILE_ROWS)
        for o in range(t0, t1):
            if m <= TILE_ROWS and o + ahead < t1:
                prefetch_row(w, o + ahead)
            for r in range(r0, r1):
                y[r, o] = dot_q8k(w, o * units, xl, r * k, csum, r * LANES * blocks, xd,
                                  r * blocks, scales, o * groups, per_scale, blocks)
    return 0


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
    y = np.empty((m, w.shape[0]), np.float32)
    if y.size:
        blocks = n // QK_K
        csum = bsums.reshape(m, blocks * LANES, 2).sum(axis=-1, dtype=np.int32)
        run(_q8k_rows, w.shape[0], w.nbytes * max(1, m // TILE_ROWS), laid_out(q), csum, d,
            np.ascontiguousarray(w), scales, y)
    if bias is not None:
        y += bias
    return y
