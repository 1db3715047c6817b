"""The int8 GEMV of weights in scale groups, on weight rows laid out side by side.

The GEMV of :mod:`.matmul` reads each weight row as it is packed: a SIMD block of one
row's codes, then its lanes merged into group sums, a few instructions a group that
one scale a row does not pay (groups of 128 inputs: 0.74x its speed at 4096 x 4096).
Here the weights are laid out once, as the int8 GEMM lays out a tile
(:mod:`.int8_gemm`): ``ROW_TILE.cols`` weight rows side by side, 4 bytes of each a
step, so each int32 lane of a ``vpdpbusd`` sums one weight row and a group's sums are
whole vectors: converted and scaled in float64 as they stand, in the order of every
int8 path (segment ``s`` into slot ``s % 8``), so the bits are the packed GEMV's.

The layout (:class:`GroupPanel`) is made on the first int8 call of few rows and kept
with the tensor: as many bytes as its packed codes and its scales (float32, widened in
the kernel: float64 scales read 1.5x the bytes at 8192 x 8192 in groups of 32, past
the caches, and took 0.38x the time of one scale against 0.58x the packed GEMV's). It
needs GFNI (the decode is not shared by several activation rows, see
:data:`._llvm.gemm.ROW_TILE`), VNNI, "2bit" codes and groups of whole 16-input steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..._formats import Format
from ._jit import jit_where
from ._llvm.gemm import ROW_TILE, row_tile
from ._llvm.pool import claim, leave
from ._parallel import MIN_PARALLEL_BYTES, alone, run
from .gemv_native import run_blocks, warm_blocks
from .int8_gemm import _activation_panel, _activation_rows, _weight_panel, column_tiles
from .quantize import _absmax_quantize_rows
from .rescale import add_bias


class GroupPanel:
    """Weights in scale groups, with their GEMV layout made on first use.

    ``packed`` is the packed data every other route reads; :meth:`panel` the layout.
    """

    __slots__ = ("_panel", "n", "packed", "scales")

    def __init__(self, packed: np.ndarray, scales: np.ndarray, n: int) -> None:
        self.packed, self.scales, self.n = packed, scales, n
        self._panel: tuple[np.ndarray, np.ndarray] | None = None

    def panel(self) -> tuple[np.ndarray, np.ndarray]:
        """The layout: ``(codes, scales)``, made once.

        ``(blocks, steps, cols, 4)`` uint8 and ``(blocks, groups, cols)`` float32.
        """
        panel = self._panel
        if panel is None:  # no lock (none to hold across a fork): threads that meet here
            # at once each make the same layout, and one of them is kept
            panel = self._panel = _lay_out(self.packed, self.scales, self.n)
        return panel


def applies(fmt: Format, n: int, groups: int) -> bool:
    """Whether weights of ``n`` inputs in ``groups`` groups take this GEMV."""
    size = n // groups if groups else 0
    return (ROW_TILE is not None and fmt.name == "2bit" and groups > 1 and n % groups == 0
            and size % 16 == 0)


ROW_COLS = ROW_TILE.cols if ROW_TILE is not None else 0  # weight rows of a block
_kernel = jit_where(ROW_TILE is not None)


@_kernel
def _panels(w, seg, words, nseg, out, t0, t1):
    """Blocks ``t0..t1`` of ``ROW_COLS`` weight rows of ``w`` in the panel layout."""
    _weight_panel(w, seg, words, nseg, ROW_COLS, t0, t1, out[t0:t1].reshape(-1))
    return 0


def _lay_out(w: np.ndarray, scales: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The panel of packed rows ``w`` of ``n`` inputs and of their ``(out, groups)`` scales."""
    groups = scales.shape[1]
    seg = n // groups // 4
    words = seg // 4
    blocks = -(-w.shape[0] // ROW_COLS)
    codes = np.empty((blocks, groups * words, ROW_COLS, 4), np.uint8)
    run(_panels, blocks, w.nbytes, w, seg, words, groups, codes)
    codes.flags.writeable = False
    laid = column_tiles(scales.astype(np.float32), ROW_COLS)
    laid.flags.writeable = False
    return codes, laid


@_kernel
def _gemv_blocks(a, xsum, codes, laid, xscale, y, ctl, t1):
    """The blocks of weight rows this thread claims: ``y[r, o]`` for every activation row ``r``.

    ``a`` is ``(m, steps, 1, 16)`` and ``xsum`` ``(m, groups, 1)`` (one row a tile).
    Blocks of ``[0, t1)`` are claimed (:func:`.run_claimed`).
    """
    m, out = y.shape
    steps, cols = codes.shape[1], codes.shape[2]
    nseg = laid.shape[1]
    words = steps // nseg
    c = np.empty(8 * cols)  # the micro-kernel's result, and its slots
    t0, end = claim(ctl, t1)
    while t0 < t1:
        for nb in range(t0, end):
            o0 = nb * cols
            for r in range(m):
                row_tile(a, r * steps * 16, codes, nb * steps * cols * 4, words, nseg, laid,
                         nb * nseg * cols, xsum, r * nseg, c)
                scale = np.float64(xscale[r])
                for j in range(min(cols, out - o0)):
                    y[r, o0 + j] = c[j] * scale
        t0, end = claim(ctl, t1)
    leave(ctl)
    return 0


@_kernel
def _quantized_rows(codes, laid, seg, x, bias, y):
    """Float32 rows ``x`` quantized and multiplied on this thread, in one call.

    :func:`gemv_int8` after ``quantize_activations`` (per row) in one compiled step:
    the same quantizer, layout and kernel (called as a call alone calls it), the bias
    added after as the packed routes add it: the same bits. Returns how many rows held
    NaN or infinity (a NaN scale, NaN outputs).
    """
    m, n = x.shape
    amax, xscale = np.empty(m, np.float32), np.empty(m, np.float32)
    q = np.empty((m, n), np.int8)
    # an intp 0, not a literal: numba compiled the callee again for Literal[int](0)
    _absmax_quantize_rows(x, x.view(np.uint32), amax, amax.view(np.uint32), q, np.intp(0), m)
    bad = 0
    for r in range(m):
        xscale[r] = amax[r] / np.float32(127)
        bad += not math.isfinite(xscale[r])
    a = np.zeros((m, codes.shape[1], 1, 16), np.int8)  # as _activation_panel's, one row a tile
    xsum = np.zeros((m, laid.shape[1], 1), np.int32)
    _activation_rows(q, seg, a, xsum, np.intp(0), m)  # groups of whole steps: no tails
    _gemv_blocks(a, xsum, codes, laid, xscale, y, alone(codes.shape[0]), codes.shape[0])
    add_bias(y, bias)
    return bad


def quantized_rows_alone(w: GroupPanel) -> Callable[..., int] | None:
    """``call(x, bias, y)``: :func:`_quantized_rows` on ``w``, or None.

    For weights of fewer than ``MIN_PARALLEL_BYTES`` (their GEMV runs alone), kept by a
    caller that calls it often (a small layer's route, :mod:`.small_linear`): at most
    ``GEMV_MAX_ROWS`` C-contiguous float32 rows, a float32 ``bias`` (empty: none).
    """
    if w.packed.nbytes >= MIN_PARALLEL_BYTES:
        return None
    seg = w.n // w.scales.shape[1] // 4

    def call(x: np.ndarray, bias: np.ndarray, y: np.ndarray) -> int:
        codes, laid = w.panel()
        return _quantized_rows(codes, laid, seg, x, bias, y)
    return call


def gemv_int8(q: np.ndarray, xscale: np.ndarray, w: GroupPanel) -> np.ndarray:
    """``xscale[r] * sum_g scales[o, g] * sum_{j in g} trits[o, j] * q[r, j]``, float32.

    On 2+ threads its helpers run the kernel from compiled code (:mod:`.gemv_native`).
    """
    args = _arguments(q, xscale, w)
    run_blocks(_gemv_blocks, args[2].shape[0], w.packed.nbytes, *args)
    return args[-1]


def _arguments(q: np.ndarray, xscale: np.ndarray, w: GroupPanel) -> tuple:
    """:func:`_gemv_blocks`' arrays for :func:`gemv_int8`, its result last."""
    codes, laid = w.panel()
    groups = laid.shape[1]
    seg = w.n // groups // 4
    a, xsum = _activation_panel(np.ascontiguousarray(q), seg, groups, seg // 4, rows=1)
    return a, xsum, codes, laid, xscale, np.empty((q.shape[0], w.packed.shape[0]), np.float32)


def warm_native() -> None:
    """The entry point and C function of the 2-thread calls compiled (or loaded): one block."""
    if ROW_TILE is not None:
        n = 128
        w = GroupPanel(np.zeros((ROW_COLS, n // 4), np.uint8),
                       np.ones((ROW_COLS, n // 32), np.float32), n)
        args = _arguments(np.zeros((1, n), np.int8), np.ones(1, np.float32), w)
        warm_blocks(_gemv_blocks, args[2].shape[0], *args)
