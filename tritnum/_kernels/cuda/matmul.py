"""CUDA ternary matmul (contract: :mod:`..reference.matmul`).

Three kernels, each compiled for float32 and int8 activations, picked by the
number of activation rows ``m`` and the weights:

- **2bit GEMV** (:mod:`.gemv`, ``m == 1``, "2bit" weights with one scale per
  row and ``n % 64 == 0``: BitNet's batch-1 case): a warp per output row,
  128-bit loads, ``dp4a`` on the int8 path. int8 activations (quantized here
  from float ``x``, or given) are first permuted and summed by one launch of
  :func:`.quantize.quantize_act_permuted`.

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

Steady state (weights, scales and bias already on the device, ``out=`` given):
the 2bit GEMV path launches one kernel (float) or two (int8), through
pre-bound launches (:func:`._launch.launch`) into scratch buffers
(:func:`._launch.scratch`, busy while the call's launches are queued: a nested call
gets fresh ones), with no allocation, no copy and no synchronization.
The int8 row scales come back on the device; a NaN scale marks a row that held
NaN or infinity (its outputs are NaN), for ``linear`` to check or not.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numba import cuda, float32, float64

from ..._dispatch import register
from ..._formats import Format
from ..._interop import to_gpu
from ..shared import packing as codecs
from ..shared.linear import no_small_rows
from ..shared.packing import byte_rows
from . import gemv
from ._launch import (
    MAX_BLOCKS,
    SIMULATOR,
    aligned,
    current_device,
    held,
    launch,
    none,
    scratch,
)
from .epilogue import finish as _finish
from .quantize import ACT_THREADS, quantize_act_permuted

_read_code = cuda.jit(device=True, inline="always")(codecs.read_code)
_UNIT_TRITS = codecs.UNIT_TRITS

GEMV_MAX_ROWS = 4  # activation rows the GEMV kernel takes; more go to the GEMM kernel
GEMV_THREADS = 128  # threads per GEMV block (a power of two: tree reduction)
TILE = 16  # GEMM tile edge: TILE x TILE threads per block, one output each


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


class Weights(NamedTuple):
    """Weights laid out for the kernels once (see ``linear``'s per-tensor cache)."""

    packed: Any  # the packed data as given (the torch GEMM decodes it, see .gemm)
    rows: Any  # (out, bytes) uint8
    half: int  # minus-plane byte offset (bitplane)
    scales: Any  # (out, groups) float32
    words: Any  # flat uint32 code words for :mod:`.gemv`, or None where it does not apply
    row_scales: Any  # (out,) float32 scales for :mod:`.gemv`, or None


def prepare(w: Any, scales: Any, fmt: Format, n: int) -> Weights:
    """The layouts of packed weights ``w`` with ``(out, groups)`` ``scales`` on the GPU.

    The word GEMV of :mod:`.gemv` takes "2bit" rows with one scale each when
    ``n % 64 == 0``, the rows start 16-byte aligned, word indices fit 32 bits and
    int32 sums are exact (``n < 2**22``). Views, no copies.
    """
    rows, half = byte_rows(w, fmt)
    if (fmt.name == "2bit" and scales.shape[1] == 1 and n % 64 == 0 and n < 1 << 22
            and rows.size // 4 < 1 << 32 and aligned(rows)):
        return Weights(w, rows, half, scales, rows.reshape(rows.size).view(np.uint32),
                       scales.reshape(scales.shape[0]))
    return Weights(w, rows, half, scales, None, None)


def _gemv_kernels() -> tuple[Any, Any]:
    """The float and int8 GEMV: inline-PTX kernels on a GPU, their twins in the simulator."""
    if SIMULATOR:
        return gemv.gemv_float_portable, gemv.gemv_int8_portable
    return gemv.gemv_float, gemv.gemv_int8


def _gemv_grid(out: int) -> int:
    return min(-(-out // gemv.WARPS), MAX_BLOCKS)


def _quantized(x: Any, xscale: Any, permute: bool, kept: bool) -> tuple[Any, Any, Any]:
    """int8 quants of ``x``, their row sums and scales, in scratch buffers.

    ``kept``: the thread's own (see :func:`._launch.held`) or fresh ones. ``x`` is
    float, or int8 with ``xscale``; one launch of :func:`.quantize.quantize_act_permuted`.
    """
    m, n = x.shape
    q = scratch("q", (m, n), np.int8, kept)
    qsum = scratch("qsum", (m,), np.int32, kept)
    xs = scratch("xscale", (m,), np.float32, kept)
    if m:
        launch(quantize_act_permuted,
               f"{x.dtype}-{x.is_c_contiguous()}-{xscale is None}-{permute}",
               min(m, MAX_BLOCKS), ACT_THREADS,
               x, none() if xscale is None else xscale, permute, q, qsum, xs)
    return q, qsum, xs


def _output(m: int, out: int, y: Any) -> Any:
    return cuda.device_array((m, out), np.float32) if y is None else y


def _linear(x: Any, xscale: Any, w: Any, fmt: Format, n: int, scales: Any, bias: Any,
            y: Any = None, quantize: bool = False) -> Any:
    """Launch the kernels for ``m`` rows of ``x``; ``(m, out)`` float32 on the GPU.

    Into ``y`` when given. ``quantize``: float ``x`` is quantized to int8 on the
    device first (then the row scales are returned too).
    """
    m = x.shape[0]
    if not isinstance(w, Weights):
        w = prepare(w, scales, fmt, n)
    rows, half = w.rows, w.half
    out = rows.shape[0]
    bias = none() if bias is None else bias
    y = _output(m, out, y)
    if m == 0 or out == 0:  # fresh row scales: nothing kept leaves with a result
        return (y, cuda.device_array((m,), np.float32)) if quantize else y
    int8 = quantize or xscale is not None
    # float x is read by 128-bit loads too (int8 x is re-laid out into a scratch buffer)
    words = ((w.words, w.row_scales)
             if m == 1 and w.words is not None and (int8 or aligned(x)) else None)
    with held() as kept:  # a nested call (a signal handler's) gets fresh scratch
        if quantize or (int8 and words is not None):
            q, qsum, xs = _quantized(x, None if quantize else xscale, words is not None,
                                    kept)
        if words is not None:
            gemv_float, gemv_int8 = _gemv_kernels()
            flat = y.reshape(out)
            if int8:
                launch(gemv_int8, "int8", _gemv_grid(out), gemv.THREADS,
                       q.reshape(n).view(np.uint32), qsum, xs, words[0], n // 16, words[1],
                       bias, flat)
            else:
                launch(gemv_float, "float32", _gemv_grid(out), gemv.THREADS,
                       x.reshape(n), words[0], n // 16, words[1], bias, flat)
        else:
            if quantize:
                x, xscale = q, xs
            elif xscale is None:
                xscale = none()
            if m <= GEMV_MAX_ROWS:
                gemv_rows[min(out, MAX_BLOCKS), GEMV_THREADS](
                    x, xscale, rows, fmt.code, half, n, scales, bias, y)
            else:
                from . import gemm  # decoded weights and torch's cuBLAS, opt-in

                if gemm.use_torch(m, n, out, scales.shape[1], xscale.shape[0] != 0):
                    gemm.linear(x, xscale, w.packed, fmt, n, scales, bias, y)
                else:
                    grid = (min(-(-out // TILE), MAX_BLOCKS), min(-(-m // TILE), MAX_BLOCKS))
                    gemm_tiles[grid, (TILE, TILE)](x, xscale, rows, fmt.code, half, n, scales,
                                                   bias, y)
    return (y, xs) if quantize else y


@register("linear_float", "cuda")
def linear_float(x: Any, w: Any, fmt: Format, n: int, scales: Any, bias: Any,
                 out: Any = None) -> Any:
    return _linear(x, None, w, fmt, n, scales, bias, out)


@register("linear_int8", "cuda")
def linear_int8(q: Any, xscale: Any, w: Any, fmt: Format, n: int, scales: Any,
                bias: Any, out: Any = None) -> Any:
    return _linear(q, xscale, w, fmt, n, scales, bias, out)


@register("keep", "cuda")
def keep(a: Any, cache: dict[Any, Any], name: Any) -> Any:
    """``a`` on the current GPU, copied once per device and kept in ``cache``.

    The copy is made again when ``a`` is another object than the one kept.
    """
    key = (name, "cuda", current_device())
    hit = cache.get(key)
    if hit is None or hit[0] is not a:
        hit = cache[key] = (a, to_gpu(a))
    return hit[1]


register("linear_small", "cuda")(no_small_rows)  # a GPU call is launches: no host route


@register("linear_weights", "cuda")
def resident(data: Any, scales: Any, fmt: Format, n: int,
             cache: dict[Any, Any]) -> tuple[Weights, Any]:
    """Weights on the current GPU in the kernels' layouts, made once and kept in ``cache``."""
    key = ("linear_weights", current_device())
    hit = cache.get(key)
    if hit is None:
        gpu_scales = to_gpu(scales)
        hit = cache[key] = (prepare(to_gpu(data), gpu_scales, fmt, n), gpu_scales)
    return hit


@register("linear_int8_fused", "cuda")
def linear_int8_fused(x: Any, w: Any, fmt: Format, n: int, scales: Any, bias: Any,
                      out: Any = None) -> tuple[Any, Any]:
    """int8 activations quantized on the device, fused: the result and the row scales.

    A row that held NaN or infinity has a NaN scale, and NaN outputs.
    """
    return _linear(x, None, w, fmt, n, scales, bias, out, quantize=True)
