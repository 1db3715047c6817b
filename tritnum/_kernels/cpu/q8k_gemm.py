"""CPU Q8_K GEMM (many activation rows; contract: :mod:`..reference.q8k`), from AVX2 on.

The integer GEMM's register tile (:mod:`._llvm.gemm`) with ggml's partition of
each block's sum into eight lanes and their float32 combine
(:mod:`._llvm.q8k_gemm`), organised as :mod:`.int8_gemm`: the activations are
laid out once per call, padded to whole tiles of ``TILE.rows`` rows (zero
values, chunk sums and scales); each thread takes tiles of ``TILE.cols`` weight
rows, copies ``tile_blocks`` of them into the panel layout, where they stay in
cache while every activation tile passes them. Weights are "2bit" (converted by
the caller) and the scales one per (row, block).

Measured on Zen 5, 256 x 4096 x 4096, TQ2_0 block scales, 2 threads, quiet host:
6.0-6.2 ms against the int8 path's 5.2-6.0 ms in three bench runs (0.86-0.96x its
speed), 0.895x the median of 18 alternating processes with the 5-row tile (0.86x
with 6 rows); the floor against the int8 micro-kernel is 0.89x (one ``fmul`` per 8
``vpdpbusd`` on the same pipes). Before this GEMM, the GEMV's dot product per row
took 4x the int8 path's time.
"""

from __future__ import annotations

import numpy as np

from ..shared.q8k import QK_K
from ._jit import jit
from ._llvm.q8k_gemm import LANES, MAGIC, STEPS, TILE, lay_out_q8k, q8k_panel, q8k_tile
from ._parallel import run
from .int8_gemm import PANEL_BYTES, column_tiles

WEIGHT_BYTES = QK_K // 4  # 2bit bytes of one block of a weight row


def applies() -> bool:
    """Whether the CPU level has the integer tile (the portable one keeps the dot products)."""
    return TILE is not None


@jit()
def _weight_panel(w, cols, b0, b1, panel):
    """Weight rows of tiles ``b0..b1`` (of ``cols`` rows) in the panel layout; 0 past the last.

    Step ``(L * blocks + b) * 2 + h`` holds lane ``L``'s half ``h`` of block ``b``.
    """
    out, units = w.shape
    blocks = units // WEIGHT_BYTES
    steps = blocks * STEPS
    for nb in range(b0, b1):
        for j in range(cols):
            o = nb * cols + j
            p = ((nb - b0) * steps * cols + j) * 4
            if o >= out:
                for t in range(steps):
                    for i in range(4):
                        panel[p + t * cols * 4 + i] = 0
                continue
            for blk in range(blocks):
                q8k_panel(w, o * units + blk * WEIGHT_BYTES, panel, p + 2 * blk * cols * 4,
                          cols * 4, 2 * blocks * cols * 4)


@jit()
def _activation_rows(q, a, t0, t1):
    """Rows ``t0..t1`` of ``q`` into ``a`` ``(tiles, steps, TILE.rows, 16)``, as the panel."""
    rows = a.shape[2]
    blocks = q.shape[1] // QK_K
    for row in range(t0, t1):
        mb, r = divmod(row, rows)
        for blk in range(blocks):
            lay_out_q8k(q, row * q.shape[1] + blk * QK_K, a,
                        ((mb * a.shape[1] + 2 * blk) * rows + r) * 16, rows * 16,
                        2 * blocks * rows * 16)
    return 0


@jit()
def _gemm_tiles(a, csum, dx, w, dw, tile_blocks, fused, y, t0, t1):
    """Tiles ``t0..t1`` of ``TILE.cols`` weight rows: ``y[r, o]`` for every activation row."""
    m, out = y.shape
    steps, rows, cols = a.shape[1], a.shape[2], dw.shape[2]
    blocks = steps // STEPS
    panel = np.empty(tile_blocks * steps * cols * 4, np.uint8)
    c = np.empty((LANES + blocks) * rows * cols, np.float32)
    for b0 in range(t0, t1, tile_blocks):
        b1 = min(t1, b0 + tile_blocks)
        _weight_panel(w, cols, b0, b1, panel)
        for mb in range(a.shape[0]):
            for nb in range(b0, b1):
                q8k_tile(a, mb * steps * rows * 16, panel, (nb - b0) * steps * cols * 4, blocks,
                         csum, mb * blocks * LANES * rows, dx, mb * blocks * rows,
                         dw, nb * blocks * cols, c, fused)
                o0 = nb * cols
                for r in range(min(rows, m - mb * rows)):
                    yr = y[mb * rows + r]
                    for j in range(min(cols, out - o0)):
                        yr[o0 + j] = c[r * cols + j]
    return 0


def gemm_q8k(q: np.ndarray, d: np.ndarray, csum: np.ndarray, w: np.ndarray,
             scales: np.ndarray, fused: bool) -> np.ndarray:
    """float32 ``(m, out)``: ``linear_q8k`` without the bias, :func:`applies` levels only.

    For Q8_K rows ``q``, ``d``, their chunk sums ``csum`` ``(m, K / 32)`` and "2bit"
    weights ``w`` with ``scales`` ``(out, groups)``; ``fused``: each lane update one FMA.
    """
    m, k = q.shape
    blocks = k // QK_K
    rows, cols = TILE.rows, TILE.cols
    a = np.zeros((-(-m // rows), blocks * STEPS, rows, 16), np.int8)
    run(_activation_rows, m, q.nbytes, np.ascontiguousarray(q), a)
    starts = column_tiles(MAGIC - csum.reshape(m, blocks, LANES), rows)
    dw = column_tiles(np.repeat(scales, blocks // scales.shape[1], axis=1), cols)
    tile_blocks = max(1, PANEL_BYTES // (cols * blocks * STEPS * 4))
    y = np.empty((m, w.shape[0]), np.float32)
    run(_gemm_tiles, dw.shape[0], w.nbytes, a, starts, column_tiles(d, rows), w, dw,
        tile_blocks, fused, y)
    return y
