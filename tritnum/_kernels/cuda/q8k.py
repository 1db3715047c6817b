"""CUDA kernels of llama.cpp's Q8_K path (contract: :mod:`..reference.q8k`).

- :func:`quantize_q8k_blocks`: one thread per (row, 256-value block), the shared
  block quantizer (``round`` lowers to ``llrint``: half to even).
- :func:`q8k_lanes`: one thread per (output, lane) of one activation row,
  ``LANE_OUTPUTS`` outputs per block. A thread sums its lane's 32 products of
  each block exactly (int), takes off the lane's chunk sum and adds the block's
  rescaled lane to its float32 sum; lane 0 then adds the eight lanes in
  ``hsum_float_8``'s order. Fused (a GCC build of ggml): the lane update is
  ``cuda.fma(lane, scale, acc)``, one rounding. Unfused: the rescaling is
  ``cuda.fma(lane, scale, -0.0)``, the float32 product rounded once, as a product
  the compiler may not contract with the addition that follows (NVVM fuses a
  plain multiply and add into an FMA). The simulator's ``cuda.fma`` rounds twice
  (``a * b + c`` in float32): there the fused update is
  :func:`..shared.q8k.fma32`. Any packed format: the codes are read with the
  shared :func:`..shared.packing.read_code`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda, float32

from ..._dispatch import register
from ..._formats import Format
from ..shared import packing as codecs
from ..shared import q8k as shared
from ..shared.packing import byte_rows
from ._launch import MAX_BLOCKS, SIMULATOR, THREADS, blocks

_device = cuda.jit(device=True, inline="always")
_quantize_block = _device(shared.quantize_q8k_block)
_hsum8 = _device(shared.hsum8)
_read_code = _device(codecs.read_code)
QK_K = shared.QK_K
LANES = shared.LANES
LANE_OUTPUTS = 32  # outputs per thread block of q8k_lanes: 8 lanes each, 256 threads


if SIMULATOR:  # its cuda.fma is a * b + c, two roundings

    def _fma(a, b, c):
        return float32(shared.fma32(a, b, c))
else:

    @_device
    def _fma(a, b, c):
        return cuda.fma(a, b, c)


@cuda.jit
def quantize_q8k_blocks(x, q, d, bsums):
    """One thread per (row, block): quants, bsums and the scale (NaN for a non-finite block)."""
    per_row = d.shape[1]
    for i in range(cuda.grid(1), x.shape[0] * per_row, cuda.gridsize(1)):
        r = i // per_row
        b = i - r * per_row
        d[r, b] = _quantize_block(x[r], QK_K * b, q[r], bsums[r], QK_K // shared.BSUM * b)


@cuda.jit
def q8k_lanes(q, d, bsums, w, fmt, half, scales, per_scale, bias, fused, y):
    """Thread ``(slot, lane)`` of a block: lane ``lane`` of output ``o0 + slot`` of row ``r``.

    Parameters
    ----------
    q : (m, n) int8
    d : (m, n / 256) float32
    bsums : (m, n / 16) int16
        Lane L's chunk sum (values ``32 L .. 32 L + 31`` of a block) is two of them.
    w : (out, bytes) uint8
        Packed rows seen as bytes (:func:`..shared.packing.byte_rows`).
    fmt, half : int
        Format code and minus-plane byte offset (bitplane).
    scales : (out, groups) float32
    per_scale : int
        Blocks per weight scale.
    bias : (out,) or (0,) float32
        Empty without a bias.
    fused : bool
        Each lane update one FMA (else a product, then a sum).
    y : (m, out) float32
    """
    sums = cuda.shared.array((LANE_OUTPUTS, LANES), float32)
    tid = cuda.threadIdx.x
    lane = tid % LANES
    slot = tid // LANES
    m = q.shape[0]
    out = w.shape[0]
    nblocks = d.shape[1]
    per_row = (out + LANE_OUTPUTS - 1) // LANE_OUTPUTS
    for task in range(cuda.blockIdx.x, m * per_row, cuda.gridDim.x):
        r = task // per_row
        o = (task - r * per_row) * LANE_OUTPUTS + slot
        acc = float32(0)
        if o < out:
            wrow = w[o]
            for b in range(nblocks):
                s = 0
                for c in range(LANES):  # the 32-value chunks of the block
                    base = QK_K * b + 32 * c + 4 * lane
                    for a in range(4):
                        s += (_read_code(fmt, wrow, base + a, half) * int(q[r, base + a]))
                s -= int(bsums[r, 16 * b + 2 * lane]) + int(bsums[r, 16 * b + 2 * lane + 1])
                scale = d[r, b] * scales[o, b // per_scale]
                if fused:
                    acc = _fma(float32(s), scale, acc)
                else:
                    acc += cuda.fma(float32(s), scale, float32(-0.0))
        sums[slot, lane] = acc
        cuda.syncthreads()
        if lane == 0 and o < out:
            total = _hsum8(sums[slot, 0], sums[slot, 1], sums[slot, 2], sums[slot, 3],
                           sums[slot, 4], sums[slot, 5], sums[slot, 6], sums[slot, 7])
            if bias.shape[0] != 0:
                total += bias[o]
            y[r, o] = total
        cuda.syncthreads()  # sums[] is rewritten for the next task


@register("quantize_q8k", "cuda")
def quantize_q8k(x: Any) -> tuple[Any, Any, Any]:
    m, k = x.shape
    q = cuda.device_array((m, k), np.int8)
    d = cuda.device_array((m, k // QK_K), np.float32)
    bsums = cuda.device_array((m, k // shared.BSUM), np.int16)
    if d.size:
        quantize_q8k_blocks[blocks(d.size), THREADS](x, q, d, bsums)
    return q, d, bsums


@register("linear_q8k", "cuda")
def linear_q8k(q: Any, d: Any, bsums: Any, w: Any, fmt: Format, n: int, scales: Any,
               bias: Any, fused: bool) -> Any:
    m = q.shape[0]
    rows, half = byte_rows(w, fmt)
    out = rows.shape[0]
    y = cuda.device_array((m, out), np.float32)
    if m == 0 or out == 0:
        return y
    nblocks = n // QK_K
    bias = cuda.device_array(0, np.float32) if bias is None else bias
    tasks = m * -(-out // LANE_OUTPUTS)
    q8k_lanes[min(tasks, MAX_BLOCKS), LANE_OUTPUTS * LANES](
        q, d, bsums, rows, fmt.code, half, scales,
        max(1, nblocks // scales.shape[1]), bias, fused, y)
    return y
