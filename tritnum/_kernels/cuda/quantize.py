"""CUDA quantization kernels (precision contract: :mod:`..reference.quantize`)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda, float32, float64, int8, int32

from ..._dispatch import register
from ..._formats import Format
from ..shared import packing as codecs
from ..shared.dequantize import from_packed
from ..shared.packing import byte_rows
from ..shared.quantize import kept_amax
from ._launch import THREADS, blocks

_encode_unit = cuda.jit(device=True, inline="always")(codecs.encode_unit)
_store_unit = cuda.jit(device=True, inline="always")(codecs.store_unit)
_UNIT_TRITS = codecs.UNIT_TRITS


@cuda.jit
def abs_sums_rows(w, groups, out):
    """One thread per (row, group): the float64 sum of |w| over the group."""
    rows, n = w.shape
    g = n // groups
    for i in range(cuda.grid(1), rows * groups, cuda.gridsize(1)):
        r = i // groups
        k = i - r * groups
        s = float64(0)
        for j in range(k * g, k * g + g):
            s += abs(float64(w[r, j]))
        out[r, k] = s


@cuda.jit
def quantize_pack_rows(w, scales, fmt, out, half, units):
    """One thread per storage unit: trits of w / scale, encoded with the codecs."""
    rows, n = w.shape
    g = n // scales.shape[1]
    per = _UNIT_TRITS[fmt]
    scratch = cuda.local.array(8, int8)
    for i in range(cuda.grid(1), rows * units, cuda.gridsize(1)):
        r = i // units
        u = i - r * units
        count = max(min(per, n - u * per), 0)
        for k in range(count):
            j = u * per + k
            q = float64(w[r, j]) / float64(scales[r, j // g])
            scratch[k] = int8(q > 0.5) - int8(q < -0.5)
        _store_unit(fmt, out[r], u, half, _encode_unit(fmt, scratch, 0, count))


@cuda.jit
def row_amax(x, out):
    """One thread per row: max |x| in float32, NaN when the row holds NaN or infinity."""
    for r in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        m = float32(0)
        finite = float32(0)
        for j in range(x.shape[1]):
            v = float32(x[r, j])
            m = max(m, abs(v))
            finite += v * float32(0)
        out[r] = m + finite


@cuda.jit(device=True, inline="always")
def _quant(v, inv):
    """``rint(v * inv)`` in float32 (half to even, as ``np.rint``), clipped to int8's range."""
    v = min(max(v * inv, float32(-128)), float32(127))
    f = float32(int32(v))  # trunc toward zero; |v| <= 128 fits
    d = v - f
    odd = int32(f) % 2 != 0
    if d > 0.5 or (d == 0.5 and odd):
        f += 1
    elif d < -0.5 or (d == -0.5 and odd):
        f -= 1
    return int32(f)


@cuda.jit
def quantize_act_rows(x, amax, q):
    """One thread per element: rint(x * (127 / amax)) in float32, clipped to int8."""
    rows, n = x.shape
    for i in range(cuda.grid(1), rows * n, cuda.gridsize(1)):
        r = i // n
        j = i - r * n
        q[r, j] = int8(_quant(float32(x[r, j]), float32(127) / amax[r]))


ACT_THREADS = 128  # threads per row of :func:`quantize_act_permuted` (a power of two)


@cuda.jit(device=True, inline="always")
def _block_reduce(red, tid, take_max):
    """``red[0]`` becomes the sum (or max) of ``red[:ACT_THREADS]`` (whole block)."""
    cuda.syncthreads()
    step = ACT_THREADS // 2
    while step > 0:
        if tid < step:
            if take_max:
                red[tid] = max(red[tid], red[tid + step])
            else:
                red[tid] += red[tid + step]
        cuda.syncthreads()
        step //= 2


@cuda.jit
def quantize_act_permuted(x, scale_in, permute, q, qsum, xscale):
    """Fused int8 activations for the GEMV: one block per row, no host round trip.

    Float ``x`` ``(m, n)``: ``amax = max(max|x|, 1e-5)`` by a block reduction, the
    quants ``rint(x * 127 / amax)`` (as :func:`quantize_act_rows`) and
    ``xscale[r] = amax / 127``; a row holding NaN or infinity gets ``xscale[r] = NaN``
    and zero quants: the on-device flag (every output of the row is then NaN;
    ``linear`` checks it unless told not to). int8 ``x`` with its ``scale_in`` (a
    non-empty ``(m,)``) is taken as the quants. Either way ``qsum[r] = Σ q`` and, with
    ``permute``, quant ``16 k + 4 b + s`` is stored at byte ``16 k + 4 s + b`` of the
    row (see :mod:`.gemv`), else at its own place.
    """
    redf = cuda.shared.array(ACT_THREADS, float32)
    redm = cuda.shared.array(ACT_THREADS, float32)
    redi = cuda.shared.array(ACT_THREADS, int32)
    m, n = x.shape
    tid = cuda.threadIdx.x
    given = scale_in.shape[0] != 0
    for r in range(cuda.blockIdx.x, m, cuda.gridDim.x):
        amax = float32(1)
        if not given:
            big = float32(0)
            bad = float32(0)
            for j in range(tid, n, ACT_THREADS):
                v = float32(x[r, j])
                big = max(big, abs(v))
                bad += v * float32(0)  # NaN once a value is NaN or infinite
            redm[tid] = big
            redf[tid] = bad
            _block_reduce(redm, tid, True)
            _block_reduce(redf, tid, False)
            amax = max(redm[0], float32(1e-5)) + redf[0]
        ok = given or (amax - amax == 0)
        inv = float32(127) / amax
        s = int32(0)
        for j in range(tid, n, ACT_THREADS):
            v = int32(0)
            if given:
                v = int32(x[r, j])
            elif ok:
                v = _quant(float32(x[r, j]), inv)
            k = j
            if permute:
                k = (j & ~15) | ((j & 3) << 2) | ((j >> 2) & 3)
            q[r, k] = int8(v)
            s += v
        redi[tid] = s
        _block_reduce(redi, tid, False)
        if tid == 0:
            qsum[r] = redi[0]
            xscale[r] = scale_in[r] if given else amax / float32(127)
        cuda.syncthreads()  # the shared sums are rewritten for the next row


@register("abs_sums", "cuda")
def abs_sums(w: Any, groups: int) -> Any:
    out = cuda.device_array((w.shape[0], groups), np.float64)
    if out.size:
        abs_sums_rows[blocks(out.size), THREADS](w, groups, out)
    return out


@register("quantize_pack", "cuda")
def quantize_pack(w: Any, scales: Any, fmt: Format) -> Any:
    rows, n = w.shape
    out = cuda.device_array(fmt.data_shape((rows, n)), fmt.dtype)
    dst, half = byte_rows(out, fmt)
    units = half or dst.shape[1]
    if rows * units:
        quantize_pack_rows[blocks(rows * units), THREADS](w, scales, fmt.code, dst, half, units)
    return out


@register("quantize_activations", "cuda")
def quantize_activations(x: Any, per_tensor: bool) -> tuple[Any, Any]:
    rows = x.shape[0]
    amax = cuda.device_array(rows, np.float32)
    if rows:
        row_amax[blocks(rows), THREADS](x, amax)
    host = amax.copy_to_host()
    if per_tensor:
        host = np.full(rows, host.max(initial=np.float32(0)), np.float32)
    host = np.maximum(host, np.float32(1e-5))  # NaN stays NaN
    q = cuda.device_array(x.shape, np.int8)
    if x.size and np.isfinite(host).all():  # else the caller raises on the NaN amax
        quantize_act_rows[blocks(x.size), THREADS](x, cuda.to_device(host), q)
    return q, kept_amax(host, per_tensor)


@cuda.jit
def dequantize_kernel(trits, scales, out):
    """``out[r, j] = trits[r, j] * scale``: the row's (or the tensor's) scale of j's group."""
    n = out.shape[1]
    per = n // scales.shape[1]
    one = scales.shape[0] == 1
    for f in range(cuda.grid(1), out.shape[0] * n, cuda.gridsize(1)):
        r = f // n
        j = f - r * n
        out[r, j] = float32(trits[r, j]) * scales[0 if one else r, j // per]


@register("dequantize", "cuda")
def dequantize_rows(trits: Any, scales: Any) -> Any:
    """float32 ``trits * scale`` of int8 rows ``(R, n)`` on the GPU (scales as the host's)."""
    out = cuda.device_array(tuple(trits.shape), np.float32)
    if out.size:
        dequantize_kernel[blocks(out.size), THREADS](trits, scales, out)
    return out


register("dequantize_packed", "cuda")(from_packed("cuda"))
