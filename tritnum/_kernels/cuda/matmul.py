"""CUDA ternary matmul (contract: :mod:`..reference.matmul`).

Three kernels, each compiled for float32 and int8 activations, picked by the
number of activation rows ``m`` and the weights:

- **2bit GEMV** (:func:`gemv_2bit_words`, ``m == 1``, "2bit" weights with one
  scale per row and ``n % 16 == 0``: BitNet's batch-1 case): a warp per few
  output rows reads the weights as uint32 words and ``x`` once per word column.

- **GEMV** (:func:`gemv_rows`, ``m <= GEMV_MAX_ROWS``): memory-bound. One
  block per output row; its threads stride over the row's packed units,
  decode the trits in registers with the shared :func:`..codecs.read_code`
  and multiply them with all ``m`` rows of ``x`` at once; a shared-memory
  tree sums the threads' partials (no warp intrinsics, so the simulator runs
  it faithfully).
- **GEMM** (:func:`gemm_tiles`, more rows): compute-bound. A 2-D grid of
  ``TILE x TILE`` output tiles; per step along ``n`` a tile of weights is
  decoded once into shared memory as float32 trits, beside a tile of ``x``.
  With ``TRITNUM_CUDA_GEMM=torch`` the weights are decoded once instead and
  PyTorch's cuBLAS runs the GEMM on the tensor cores (:mod:`.gemm`).

Exactness. Products and per-tile sums are float32 on the GEMM path: a trit
times an int8 value is an integer of at most 128 in magnitude and ``TILE``
of them sum below ``2**24``, so on the int8 path every tile sum is the exact
integer. Tile sums and the GEMV's products go into float64 partial sums per
scale group, exact for integers below ``2**53``: the int8 path gets exact
integer group sums, as the contract asks, without a separate integer
kernel. Each group sum is multiplied by its float64 scale when the group
ends, then the row by ``xscale`` (int8 path only) and ``bias`` is added in
float64 before rounding to float32. Groups may have any size (group
boundaries fall anywhere inside a packed unit or a tile).

A missing ``xscale`` or ``bias`` reaches the kernels as an empty float32
array, never as None: the simulator takes None arguments, but a real GPU
launch refuses them (numba-cuda 0.30: ``NotImplementedError: (none, None)``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda, float32, float64

from ..._dispatch import register
from ..._formats import Format
from ..shared import packing as codecs
from ..shared.packing import byte_rows
from ._launch import MAX_BLOCKS

_read_code = cuda.jit(device=True, inline="always")(codecs.read_code)
_UNIT_TRITS = codecs.UNIT_TRITS

GEMV_MAX_ROWS = 4  # activation rows the GEMV kernel takes; more go to the GEMM kernel
GEMV_THREADS = 128  # threads per GEMV block (a power of two: tree reduction)
TILE = 16  # GEMM tile edge: TILE x TILE threads per block, one output each


@cuda.jit(device=True, inline="always")
def _finish(acc, xscale, r, bias, o):
    """The float32 output from a row's float64 sum: times ``xscale[r]``, plus ``bias[o]``.

    An empty ``xscale`` or ``bias`` is absent.
    """
    if xscale.shape[0] != 0:
        acc *= float64(xscale[r])
    if bias.shape[0] != 0:
        acc += float64(bias[o])
    return float32(acc)


@cuda.jit(device=True, inline="always")
def _flush(part, acc, rows, scale):
    """Add each row's group sum times the group's ``scale`` to ``acc``; clear the sums."""
    s = float64(scale)
    for r in range(rows):
        acc[r] += s * part[r]
        part[r] = 0.0


@cuda.jit(device=True, inline="always")
def _block_sum(sums, rows, tid):
    """Tree-sum ``sums[r, :GEMV_THREADS]`` into ``sums[r, 0]`` for ``r < rows`` (whole block)."""
    step = GEMV_THREADS // 2
    while step > 0:
        if tid < step:
            for r in range(rows):
                sums[r, tid] += sums[r, tid + step]
        cuda.syncthreads()
        step //= 2


@cuda.jit
def gemv_rows(x, xscale, w, fmt, half, n, scales, bias, y):
    """GEMV: one block per output row ``o`` (grid-stride), all ``m <= GEMV_MAX_ROWS`` rows of x.

    Parameters
    ----------
    x : (m, n) float32 or int8
    xscale : (m,) or (0,) float32
        Per-row activation scale (int8 path); empty on the float path.
    w : (out, bytes) uint8
        Packed rows seen as bytes (:func:`..shared.packing.byte_rows`).
    fmt, half : int
        Format code and minus-plane byte offset (bitplane).
    n : int
        Trits per row.
    scales : (out, groups) float32
    bias : (out,) or (0,) float32
        Empty without a bias.
    y : (m, out) float32
        The result.
    """
    sums = cuda.shared.array((GEMV_MAX_ROWS, GEMV_THREADS), float64)
    part = cuda.local.array(GEMV_MAX_ROWS, float64)
    acc = cuda.local.array(GEMV_MAX_ROWS, float64)
    m = x.shape[0]
    tid = cuda.threadIdx.x
    per = _UNIT_TRITS[fmt]
    units = (n + per - 1) // per  # units holding trits (bitplane rows pad to whole words)
    g = n // scales.shape[1]
    for o in range(cuda.blockIdx.x, w.shape[0], cuda.gridDim.x):
        wrow = w[o]
        for r in range(m):
            part[r] = 0.0
            acc[r] = 0.0
        gi = 0  # the group part[] sums
        for u in range(tid, units, GEMV_THREADS):
            j0 = u * per
            first = j0 // g
            if first != gi:
                _flush(part, acc, m, scales[o, gi])
                gi = first
            edge = (gi + 1) * g  # where the next group starts
            for j in range(j0, min(j0 + per, n)):
                if j == edge:
                    _flush(part, acc, m, scales[o, gi])
                    gi += 1
                    edge += g
                t = float64(_read_code(fmt, wrow, j, half) - 1)
                for r in range(m):  # zeros too: 0 * NaN is NaN, as in BLAS
                    part[r] += t * float64(x[r, j])
        _flush(part, acc, m, scales[o, gi])
        for r in range(m):
            sums[r, tid] = acc[r]
        cuda.syncthreads()
        _block_sum(sums, m, tid)
        if tid < m:
            y[tid, o] = _finish(sums[tid, 0], xscale, tid, bias, o)
        cuda.syncthreads()  # sums[] is rewritten for the next row


@cuda.jit
def gemm_tiles(x, xscale, w, fmt, half, n, scales, bias, y):
    """GEMM: ``TILE x TILE`` output tiles on a 2-D grid (grid-stride), one output per thread.

    ``threadIdx.x`` runs along the outputs, ``threadIdx.y`` along the rows of x.
    Per step of ``TILE`` along ``n``, thread ``(ty, tx)`` decodes trit ``k0 + tx``
    of weight row ``o0 + ty`` into shared memory and loads ``x[r0 + ty, k0 + tx]``
    beside it; then each thread sums its row times its output's weights over
    the tile. Arguments are those of :func:`gemv_rows`.
    """
    xs = cuda.shared.array((TILE, TILE), float32)  # xs[row, k]
    ws = cuda.shared.array((TILE, TILE), float32)  # ws[k, output]: the sums read along a row
    m = x.shape[0]
    out = w.shape[0]
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    g = n // scales.shape[1]
    for rb in range(cuda.blockIdx.y, (m + TILE - 1) // TILE, cuda.gridDim.y):
        r = rb * TILE + ty
        rl = min(rb * TILE + ty, m - 1)  # rows and outputs past the end load in bounds
        for ob in range(cuda.blockIdx.x, (out + TILE - 1) // TILE, cuda.gridDim.x):
            o = ob * TILE + tx
            oc = min(o, out - 1)
            ol = min(ob * TILE + ty, out - 1)
            acc = float64(0)
            part = float64(0)  # the sum of group gi so far
            gi = 0
            edge = g  # where group gi + 1 starts
            for k0 in range(0, n, TILE):
                j = k0 + tx
                xv = float32(0)
                wv = float32(0)
                if j < n:
                    xv = float32(x[rl, j])
                    wv = float32(_read_code(fmt, w[ol], j, half) - 1)
                xs[ty, tx] = xv
                ws[tx, ty] = wv
                cuda.syncthreads()
                s = float32(0)
                for k in range(min(TILE, n - k0)):
                    if k0 + k == edge:
                        acc += float64(scales[oc, gi]) * (part + s)
                        part = 0.0
                        s = float32(0)
                        gi += 1
                        edge += g
                    s += xs[ty, k] * ws[k, tx]
                part += s
                cuda.syncthreads()
            acc += float64(scales[oc, gi]) * part
            if r < m and o < out:
                y[r, o] = _finish(acc, xscale, r, bias, o)


ROWS_PER_WARP = 4  # output rows each warp of the 2bit GEMV takes
WORD_WARPS = 8  # warps per block of the 2bit GEMV
WORD_THREADS = 32 * WORD_WARPS  # its block size (a literal for the shared array's shape)


@cuda.jit
def gemv_2bit_words(x, xscale, w, scale, bias, y):
    """The common GEMV: one row of x, "2bit" weights, one scale per output row.

    ``w`` is ``(out, n // 16)`` uint32 words (16 codes each, little-endian). Each
    warp takes ``ROWS_PER_WARP`` output rows; its lanes stride over the word
    columns, load the 16 values of ``x`` a column meets once into registers and
    use them for every row (one 4-byte weight load per 16 trits). Float ``x``
    sums in float32 per lane (per word first), int8 ``x`` in exact int32; a
    shared-memory tree sums the lanes (no warp shuffles: the simulator has none),
    and ``_finish`` applies ``scale``, ``xscale`` and ``bias`` in float64.
    Arguments as :func:`gemv_rows` (``scale``: ``(out, 1)``).
    """
    sums = cuda.shared.array((ROWS_PER_WARP, WORD_THREADS), float64)
    xv = cuda.local.array(16, float32)
    acc = cuda.local.array(ROWS_PER_WARP, float64)
    tid = cuda.threadIdx.x
    lane = tid % 32
    base = tid - lane  # the warp's first thread
    per_block = (cuda.blockDim.x // 32) * ROWS_PER_WARP
    int8 = xscale.shape[0] != 0  # the float path has no xscale
    nw = w.shape[1]
    out = w.shape[0]
    for o0 in range(cuda.blockIdx.x * per_block, out, cuda.gridDim.x * per_block):
        first = o0 + (tid // 32) * ROWS_PER_WARP
        for r in range(ROWS_PER_WARP):
            acc[r] = 0.0
        for c in range(lane, nw, 32):
            for i in range(16):
                xv[i] = float32(x[0, 16 * c + i])
            for r in range(ROWS_PER_WARP):
                if first + r < out:
                    word = w[first + r, c]
                    if int8:
                        isum = 0
                        for i in range(16):
                            isum += (int((word >> (2 * i)) & 3) - 1) * int(xv[i])
                        acc[r] += float64(isum)
                    else:
                        fsum = float32(0)
                        for i in range(16):
                            fsum += float32(int((word >> (2 * i)) & 3) - 1) * xv[i]
                        acc[r] += float64(fsum)
        for r in range(ROWS_PER_WARP):
            sums[r, tid] = acc[r]
        cuda.syncthreads()
        step = 16
        while step > 0:
            if lane < step:
                for r in range(ROWS_PER_WARP):
                    sums[r, tid] += sums[r, tid + step]
            cuda.syncthreads()
            step //= 2
        o = first + lane
        if lane < ROWS_PER_WARP and o < out:
            y[0, o] = _finish(sums[lane, base] * float64(scale[o, 0]), xscale, 0, bias, o)
        cuda.syncthreads()  # sums[] is rewritten for the next rows


def _linear(x: Any, xscale: Any, w: Any, fmt: Format, n: int, scales: Any, bias: Any) -> Any:
    """Launch the GEMV or GEMM kernel for ``m`` rows of ``x``; ``(m, out)`` float32 on the GPU."""
    m = x.shape[0]
    rows, half = byte_rows(w, fmt)
    out = rows.shape[0]
    none = cuda.device_array(0, np.float32)  # stands for a missing xscale or bias
    xscale = none if xscale is None else xscale
    bias = none if bias is None else bias
    y = cuda.device_array((m, out), np.float32)
    if m == 0 or out == 0:
        return y
    if m == 1 and fmt.name == "2bit" and scales.shape[1] == 1 and n % 16 == 0:
        rows_per_block = WORD_WARPS * ROWS_PER_WARP
        gemv_2bit_words[min(-(-out // rows_per_block), MAX_BLOCKS), 32 * WORD_WARPS](
            x, xscale, rows.view(np.uint32), scales, bias, y)
    elif m <= GEMV_MAX_ROWS:
        gemv_rows[min(out, MAX_BLOCKS), GEMV_THREADS](
            x, xscale, rows, fmt.code, half, n, scales, bias, y)
    else:
        from . import gemm  # decoded weights and torch's cuBLAS, opt-in; it imports _finish

        if gemm.use_torch(m, n, out, scales.shape[1], xscale.shape[0] != 0):
            gemm.linear(x, xscale, w, fmt, n, scales, bias, y)
        else:
            grid = (min(-(-out // TILE), MAX_BLOCKS), min(-(-m // TILE), MAX_BLOCKS))
            gemm_tiles[grid, (TILE, TILE)](x, xscale, rows, fmt.code, half, n, scales, bias, y)
    return y


@register("linear_float", "cuda")
def linear_float(x: Any, w: Any, fmt: Format, n: int, scales: Any, bias: Any) -> Any:
    return _linear(x, None, w, fmt, n, scales, bias)


@register("linear_int8", "cuda")
def linear_int8(q: Any, xscale: Any, w: Any, fmt: Format, n: int, scales: Any,
                bias: Any) -> Any:
    return _linear(q, xscale, w, fmt, n, scales, bias)
