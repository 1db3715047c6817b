"""CPU integer GEMM for int8 activations (contract: ``linear_int8``), from AVX2 on.

Integer multiply-adds are what VNNI is for: one 512-bit ``vpdpbusd`` does 64
where a float32 FMA does 16, so the int8 GEMM runs on the register-blocked
micro-kernel of :mod:`._llvm.gemm` rather than on BLAS ``sgemm`` (measured on
Zen 5, 256 x 4096 x 4096, one core: 370-420 G multiply-adds/s with AVX-512
VNNI, 190 with 256-bit AVX-VNNI, 115 with AVX2's ``vpmaddubsw``; NumPy's
OpenBLAS 58). The portable level keeps BLAS.

- the weights' 2bit bytes stay packed: each tile of ``TILE.cols * tile_blocks``
  weight rows is copied, 4 bytes at a time, into the panel layout (``[step][row][4]``,
  at most ``PANEL_BYTES``) by the thread that multiplies it, where it stays in
  cache while every activation row passes it;
- the activations, padded to whole blocks of ``TILE.rows`` rows, are laid out once
  per call (``[step][row][16]``, the 4 bytes meeting each code of a byte together),
  with their int32 sums per segment (the code is ``trit + 1``);
- a row of weights is cut into segments, one per scale group (or pieces of at
  most ``INT32_EXACT`` inputs when the whole row shares a scale), each padded to
  whole 16-input steps with zero activations: exact int32 sums per segment,
  scaled and added in float64 by the micro-kernel in the GEMV's order (segment s
  into slot ``s % 8``, the slots summed by halves: :func:`._llvm.gemv.make_group_dot`),
  times the row's activation scale at the end: a row's output has the same bits
  whatever the batch.

Scale groups cost one flush per segment: per 16 int32 lanes of ``g / 4`` ``vpdpbusd``
each, two float64 FMAs, two conversions and an extract. On Zen 5 the FMAs share
the ``vpdpbusd`` pipes, so the floor is about ``1 + 8 / g`` times the per-tensor
time (``1 + 16 / g`` if the conversions do too): measured by CPU time on one core,
256 x 4096 x 4096, 1.07-1.10x for g = 256, 1.13-1.18x for 128, 1.3x for 64, 1.7x
for 32. Where the g = 32 excess goes (thread CPU time, 1 thread, the flush cut down
step by step): about a third each to the segment's restart (accumulators from its sums,
a loop of two steps), the 32 int32-to-float64 conversions and 16 extracts of a tile,
and its 32 FMAs with their slot loads and stores. No help, measured: accumulators
restarted by broadcast loads of sums negated beforehand; g = 32's two steps unrolled.

Threads split the weight rows (:func:`._parallel.run`). Other formats, and groups
that do not fill whole bytes, are first re-packed as 2bit with each group padded
to a multiple of 4 trits.
"""

from __future__ import annotations

import numpy as np

from ..._formats import FORMATS, Format
from ._jit import jit
from ._llvm.gemm import TILE, gemm_tile, lay_out, transpose_words
from ._llvm.gemv import SLOTS
from ._llvm.unaligned import load_u32_head, store_u32
from ._parallel import run
from .packing import convert, pack, unpack

# Internal API (tests/test_architecture_seams.py): the GEMV of group_gemv.py lays out its
# weights and activations as this GEMM does.
_INTERNAL_API = ("_activation_panel", "_activation_rows", "_weight_panel")

INT32_EXACT = 1 << 23  # 256 * 2**23 = 2**31: int32 sums of code * int8 products fit
PANEL_BYTES = 1 << 18  # packed weight bytes of one tile: well inside L2 with the activations
REPACK_ELEMENTS = 1 << 22  # int8 trits held at once while re-packing other formats
TWO_BIT = FORMATS["2bit"]
COLS = TILE.cols if TILE is not None else 0  # weight rows of a tile (a constant to numba)
LANES = TILE.lanes if TILE is not None else 1  # words a row of a panel transpose


def applies(n: int, groups: int) -> bool:
    """Whether :func:`gemm_int8` takes weights of ``n`` inputs in ``groups`` scale groups."""
    return TILE is not None and n > 0 and (groups == 1 or n // groups <= INT32_EXACT)


@jit(inline="always")
def _weight_panel(w, seg, words, nseg, cols, b0, b1, panel):
    """Weight rows of blocks ``b0..b1`` (of ``cols`` rows) in the panel layout.

    ``words`` steps per segment; bytes past a segment's or a row's end, and rows past
    the last, are 0. Where the segments are whole words and fill the rows, a block's
    panel is its rows' words transposed: ``LANES x LANES`` words at a time
    (:func:`.transpose_words`; 4096 x 4096, one thread: 0.38 ms word by word, 0.92 ms
    in groups of 32); the steps past them, and all of other blocks, word by word, the
    bytes past a segment and rows past the last read as 0 (:func:`.load_u32_head`: one
    loop for every layout, where a byte loop for the ends took 0.1 s more of the
    first integer GEMM's compile). Inlined into
    :func:`_gemm_blocks`, its only caller: numba compiled it apart too (0.15-0.2 s of
    the first integer GEMM), then again in the caller.
    """
    out, units = w.shape
    steps = nseg * words
    whole = 4 * words == seg and nseg * seg == units  # step t is bytes 4t..4t+3 of a row
    first = steps - steps % LANES if whole else 0  # steps that the transposes take
    for nb in range(b0, b1):
        at = (nb - b0) * steps * cols * 4  # the block's panel
        full = whole and (nb + 1) * cols <= out
        if full:
            for h in range(0, cols, LANES):
                for t in range(0, first, LANES):
                    transpose_words(w, (nb * cols + h) * units + 4 * t, units, panel,
                                    at + (t * cols + h) * 4, cols * 4)
        done = first if full else 0  # steps written
        for j in range(cols):
            o = nb * cols + j
            for s in range(done // words, nseg):
                lo = s * seg
                size = min(seg, units - lo) if o < out else 0  # the segment's bytes
                for t in range(done - s * words if done > s * words else 0, words):
                    store_u32(panel, at + ((s * words + t) * cols + j) * 4,
                              load_u32_head(w, o * units + lo + 4 * t, size - 4 * t))


@jit()
def _gemm_blocks(a, xsum, w, seg, scales, xscale, tile_blocks, y, t0, t1):
    """Blocks ``t0..t1`` of ``TILE.cols`` weight rows: ``y[r, o]`` for every activation row.

    ``a`` is ``(blocks, steps, TILE.rows, 16)``, ``scales`` ``(out, segments)``: each
    tile's go to float64 in the micro-kernel's order, ``(segments, TILE.cols)``, beside its
    panel (one pass over all of them before the call was serial: 1.7-1.9 ms of a 256-row
    GEMM at 4096 x 4096 in groups of 32, 0.7 ms in groups of 128).
    """
    m, out = y.shape
    steps, rows, cols = a.shape[1], a.shape[2], COLS
    nseg = scales.shape[1]
    words = steps // nseg
    panel = np.empty(tile_blocks * steps * cols * 4, np.uint8)
    laid = np.empty(tile_blocks * nseg * cols)  # the tiles' scales, float64
    c = np.empty(SLOTS * rows * cols)  # the micro-kernel's result, and its slots
    for b0 in range(t0, t1, tile_blocks):
        b1 = min(t1, b0 + tile_blocks)
        _weight_panel(w, seg, words, nseg, cols, b0, b1, panel)
        for nb in range(b0, b1):
            for j in range(cols):
                o = nb * cols + j
                for s in range(nseg):
                    laid[((nb - b0) * nseg + s) * cols + j] = scales[o, s] if o < out else 0.0
        for mb in range(a.shape[0]):
            for nb in range(b0, b1):
                gemm_tile(a, mb * steps * rows * 16, panel, (nb - b0) * steps * cols * 4,
                          words, nseg, laid, (nb - b0) * nseg * cols, xsum, mb * nseg * rows, c)
                o0 = nb * cols
                for r in range(min(rows, m - mb * rows)):
                    scale = np.float64(xscale[mb * rows + r])
                    yr = y[mb * rows + r]
                    for j in range(min(cols, out - o0)):
                        yr[o0 + j] = c[r * cols + j] * scale
    return 0


def column_tiles(v: np.ndarray, size: int) -> np.ndarray:
    """``v`` ``(n, ...)`` zero-padded to whole tiles of ``size`` rows, ``(tiles, ..., size)``.

    (A copy in one pass: gathering the padded rows first took 10x longer.)
    """
    tiles = -(-v.shape[0] // size)
    padded = np.zeros((tiles * size, *v.shape[1:]), v.dtype)
    padded[:v.shape[0]] = v
    return np.ascontiguousarray(np.moveaxis(padded.reshape(tiles, size, *v.shape[1:]), 1, -1))


def _padded_groups(a: np.ndarray, groups: int, size: int) -> np.ndarray:
    """Rows of ``a`` with each of its ``groups`` groups zero-padded to ``size`` elements."""
    out = np.zeros((a.shape[0], groups, size), a.dtype)
    out[:, :, :a.shape[1] // groups] = a.reshape(a.shape[0], groups, -1)
    return out.reshape(a.shape[0], -1)


def _as_2bit(w: np.ndarray, fmt: Format, n: int, groups: int,
             size: int) -> np.ndarray:
    """The rows as 2bit bytes, each group padded with zero trits to ``size``."""
    if groups * size == n:  # no padding: the converter (4096 x 4096 from "base3", 1 thread,
        return convert(w, fmt, TWO_BIT, n)[0]  # 0.7-0.8 ms; unpacked and packed here, 2-4)
    out = np.empty((w.shape[0], TWO_BIT.units(groups * size)), np.uint8)
    step = max(1, REPACK_ELEMENTS // n)
    for r0 in range(0, w.shape[0], step):
        trits = unpack(w[r0:r0 + step], fmt, n)[0]
        out[r0:r0 + step] = pack(_padded_groups(trits, groups, size), TWO_BIT)[0]
    return out


@jit(inline="always")
def _segment_steps(n, seg, s, row, rows, steps, words):
    """Segment ``s`` of activation row ``row``: ``(first input, steps, rest, at)``.

    Its whole steps of 16 inputs, the inputs left past them (fewer than 16) and where
    its first step goes in the layout.
    """
    lo = s * 4 * seg
    inputs = min(lo + 4 * seg, n) - lo
    first = (((row // rows) * steps + s * words) * rows + row % rows) * 16
    return lo, inputs // 16, inputs % 16, first


@jit()
def _activation_rows(q, seg, a, xsum, t0, t1):
    """Rows ``t0..t1`` of ``q`` into ``a``, their segments' sums into ``xsum``: whole steps.

    Both come zeroed: padding stays 0. A segment's last, partial step is
    :func:`_activation_tails`' (a kernel of its own: its slice of ``q`` took 2-4 s of
    the first call's compile when it was a branch here, for the calls that never need it).
    """
    n = q.shape[1]
    steps, rows = a.shape[1], a.shape[2]
    nseg = xsum.shape[1]
    words = steps // nseg
    for row in range(t0, t1):
        for s in range(nseg):
            lo, whole, _, first = _segment_steps(n, seg, s, row, rows, steps, words)
            xsum[row // rows, s, row % rows] = lay_out(q, row * n + lo, a, first, whole,
                                                       rows * 16)
    return 0


@jit()
def _activation_tails(q, seg, a, xsum, t0, t1):
    """The last, partial step of each segment of rows ``t0..t1``, after :func:`_activation_rows`.

    Its inputs, zero-padded to 16, go into ``a`` and their sum is added to ``xsum``.
    """
    n = q.shape[1]
    steps, rows = a.shape[1], a.shape[2]
    nseg = xsum.shape[1]
    words = steps // nseg
    part = np.zeros(16, np.int8)
    for row in range(t0, t1):
        for s in range(nseg):
            lo, whole, rest, first = _segment_steps(n, seg, s, row, rows, steps, words)
            if rest:
                for i in range(16):
                    part[i] = q[row, lo + 16 * whole + i] if i < rest else 0
                xsum[row // rows, s, row % rows] += lay_out(part, 0, a,
                                                            first + whole * rows * 16, 1, 0)
    return 0


def _activation_panel(q: np.ndarray, seg: int, nseg: int, words: int,
                      rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``q`` in the micro-kernel's layout, and its int32 sums per segment.

    Shapes ``(blocks, steps, rows, 16)`` and ``(blocks, segments, rows)``, ``rows`` those
    of a tile (``TILE.rows`` unless given).
    """
    rows = rows or TILE.rows
    blocks = -(-q.shape[0] // rows)
    a = np.zeros((blocks, nseg * words, rows, 16), np.int8)
    xsum = np.zeros((blocks, nseg, rows), np.int32)
    run(_activation_rows, q.shape[0], q.nbytes, q, seg, a, xsum)
    if seg % 4 or q.shape[1] % 16:  # a segment ends inside a step of 16 inputs
        run(_activation_tails, q.shape[0], q.nbytes, q, seg, a, xsum)
    return a, xsum


def gemm_int8(q: np.ndarray, xscale: np.ndarray, w: np.ndarray, fmt: Format, n: int,
              scales: np.ndarray) -> np.ndarray:
    """``xscale[r] * sum_g scales[o, g] * sum_{j in g} trits[o, j] * q[r, j]``, float32.

    ``(m, out)`` for int8 ``q`` ``(m, n)``; needs :func:`applies`.
    """
    out, groups = scales.shape
    size = n // groups
    q = np.ascontiguousarray(q)  # the layout reads rows at flat offsets
    if fmt.name != "2bit" or (groups > 1 and size % 4):
        padded = -(-size // 4) * 4
        w = _as_2bit(w, fmt, n, groups, padded)
        q = _padded_groups(q, groups, padded)
        n, size = groups * padded, padded
    units = TWO_BIT.units(n)
    seg = size // 4 if groups > 1 else min(units, INT32_EXACT // 4)
    nseg = -(-units // seg)
    words = -(-seg // 4)
    a, xsum = _activation_panel(q, seg, nseg, words)
    cols = TILE.cols
    per_segment = scales if nseg == groups else scales[:, np.arange(nseg) * groups // nseg]
    tile_blocks = max(1, PANEL_BYTES // (cols * nseg * words * 4))
    y = np.empty((q.shape[0], out), np.float32)
    run(_gemm_blocks, -(-out // cols), w.nbytes, a, xsum, w, seg,
        np.ascontiguousarray(per_segment), xscale, tile_blocks, y)
    return y
