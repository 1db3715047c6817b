"""Memory-speed CUDA GEMV for BitNet's batch-1 case: one row of x, "2bit" weights, row scales.

Layout. The weights are read as a flat uint32 array of code words (16 codes of
2 bits per word, code = trit + 1, little-endian: code ``i`` of a word in bits
``2i, 2i+1``); a row has ``nw = n // 16`` words. One **warp per output row**
(grid-stride over rows, ``WARPS`` warps per block): lane ``l`` takes the
128-bit chunks ``4 l, 4 l + 128, ...`` (64 trits each) of its row, keeps a
private sum, and the warp adds its 32 sums with a shuffle tree. All index
arithmetic in the inner loop is unsigned 32-bit (numba types ``int(...)`` and
mixed arithmetic as int64: every index here is re-cast to ``uint32``), so the
launchers require ``out * nw < 2**32`` words.

Two kernels, each built twice from one body by :func:`_float_kernel` /
:func:`_int8_kernel` with a set of device operations:

- **fast** (real GPUs): ``ld.global.nc.v4`` 128-bit loads, ``dp4a`` and ``prmt``
  through inline PTX (:mod:`._ptx`), numba's warp shuffles. Needs ``nw % 4 == 0``
  (``n % 64 == 0``) and 16-byte aligned rows (checked by the launchers).
- **portable** (the CUDA simulator, which runs none of the intrinsics): the
  same loops with four scalar loads, a byte loop for ``dp4a`` and a
  shared-memory tree per warp (``syncthreads``).

Float path (:data:`gemv_float`): one ``prmt`` looks four codes up at once in
a 4-byte table (:data:`HALF_LUT`) whose bytes are the top bytes of the float32
values -0.5, 0, 0.5; a second ``prmt`` per trit moves its byte to the top of a
zeroed word, which *is* the half trit as float32 (no int->float convert, which
runs at a quarter rate). Each half trit times its ``x`` by FMA, 64 products
summed in float32 per chunk, chunks in float64 per lane; the row sum times
``2 * scale`` (exact) plus the bias in float64. The portable twin computes the
same half trits arithmetically: both give the same sums.

int8 path (:data:`gemv_int8`): ``x`` comes as the int8 quants of one row,
*permuted once per call* by the fused quantizer
(:func:`.quantize.quantize_act_permuted`) so that word ``4 k + s`` of ``xp``
holds ``q[16 k + s], q[16 k + 4 + s], q[16 k + 8 + s], q[16 k + 12 + s]``:
then ``(word >> 2 s) & 0x03030303`` are the matching four codes and one
``dp4a`` adds ``Σ code · q`` for four trits. The exact row sum is
``Σ code · q - Σ q`` (``Σ q`` from the quantizer), in int32: exact for
``n < 2**22`` (``|Σ code·q| <= 256 n``; launchers check it).

Expected floors (H100 SXM: 3.35 TB/s HBM, 132 SMs at ~1.75 GHz, 4 x 32 lanes
issued per SM and clock). None of this is measured yet: no GPU was lent.

- Bytes: ``n / 4`` per weight row, read once; at 16384 x 8192, 32 MiB: about
  10 µs at HBM speed (50 % of HBM, the issue's target: 20 µs). ``x`` (32 KiB
  float32 or 8 KiB int8) is re-read by every warp from L1/L2, not HBM.
- int8 inner loop, from the PTX (sm_80 and sm_90 alike; checked in
  ``tests/test_cuda_ptx.py``): 61 instructions per lane per 64 trits, 0.95 per
  trit: 5 ``ld.global.nc.v4.u32`` (1 weights, 4 x), 16 ``dp4a``, 16 ``and``,
  12 ``shr``, 2 ``mul.wide.u32`` + 5 ``add.s64`` (addresses; the constant
  offsets fold into the loads in SASS), 3 ``add.s32`` + compare + branch.
  That is ~15 issue cycles per SM per 2,048 trits, ~7 TB/s of weights: under
  the instruction budget, so memory-bound.
- float inner loop: 287 PTX instructions per 64 trits of which 70 are register
  moves (bitcasts): about 217, 3.4 per trit: 17 128-bit loads (1 weights,
  16 x), 80 ``prmt``, 64 ``fma``, 16 ``and``, 12 ``shr``, addresses and loop.
  About 54 issue cycles per SM per 2,048 trits, ~2 TB/s of weights: roughly
  60 % of HBM, instruction-bound (the 80 ``prmt`` share the integer pipe,
  half rate on sm_90).
- Launch: one kernel (float) or two (int8: quantizer + GEMV), no copy, no
  synchronization with ``out=`` and ``check_finite=False``.
"""

from __future__ import annotations

from numba import cuda, float32, float64, int32, uint32

from . import _ptx

WARPS = 4  # warps (output rows) per block
THREADS = 32 * WARPS
CHUNK = 4  # uint32 words per lane per step: one 128-bit load, 64 trits
MASK2 = 0x03030303  # the low two bits of each byte


# ------------------------------------------------------------ portable operations
@cuda.jit(device=True, inline="always")
def _load4_portable(a, i, k):
    """``a[i + k : i + k + 4]`` as a tuple, four scalar loads."""
    j = uint32(i + k)
    return a[j], a[uint32(j + 1)], a[uint32(j + 2)], a[uint32(j + 3)]


@cuda.jit(device=True, inline="always")
def _dp4a_portable(codes, q, acc):
    """``acc + Σ_b byte_b(codes) * int8(byte_b(q))``: codes unsigned, q signed."""
    for b in range(4):
        c = int32((codes >> uint32(8 * b)) & uint32(0xFF))
        v = int32(q << uint32(24 - 8 * b)) >> int32(24)  # the signed byte b
        acc = int32(acc + c * v)
    return acc


@cuda.jit(device=True, inline="always")
def _warp_sum_portable(v, red, tid):
    """The sum of ``v`` over the warp of ``tid`` in every lane (the whole block calls it)."""
    red[tid] = v
    cuda.syncthreads()
    lane = uint32(tid & 31)
    step = uint32(16)
    while step > uint32(0):
        if lane < step:
            red[tid] += red[uint32(tid + step)]
        cuda.syncthreads()
        step = uint32(step >> 1)
    s = red[uint32(tid - lane)]
    cuda.syncthreads()  # red[] is rewritten by the next call
    return s


# ------------------------------------------------------------ fast operations
@cuda.jit(device=True, inline="always")
def _warp_sum_shfl(v, red, tid):
    """The sum of ``v`` over the warp in lane 0 (shuffle tree; ``red`` unused)."""
    off = 16
    while off > 0:
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, off)
        off >>= 1
    return v


HALF_LUT = 0x003F00BF  # bytes by code: 0xBF, 0x00, 0x3F: the top bytes of -0.5, 0, 0.5
PAIRS = 0x3333  # the low two bits of nibbles 0-3


@cuda.jit(device=True, inline="always")
def _group_portable(word, shift):
    """Codes ``shift/2 + 2k`` (k = 0..3) of ``word`` in nibbles ``k`` (see :func:`_group_prmt`)."""
    return uint32(word >> shift)


@cuda.jit(device=True, inline="always")
def _take_portable(g, k):
    """Half the trit in nibble ``k`` of a group, as float32."""
    return float32(0.5) * float32(int32((g >> uint32(4 * k)) & uint32(3)) - int32(1))


@cuda.jit(device=True, inline="always")
def _group_prmt(word, shift):
    """Four codes of ``word`` looked up at once, by one ``prmt``.

    The codes ``shift/2 + 2k`` (nibble ``k`` of the selector) become byte ``k``: the
    top byte of ``(code - 1) / 2`` in float32.
    """
    return _ptx.prmt(uint32(HALF_LUT), uint32(0), uint32((word >> shift) & uint32(PAIRS)))


@cuda.jit(device=True, inline="always")
def _take_prmt(g, k):
    """Half the trit of byte ``k`` of a group: that byte moved to the top, zeros below."""
    return _ptx.as_float(_ptx.prmt(g, uint32(0), uint32((k << 12) | 0x444)))


def _float_kernel(load4, group, take, warp_sum):
    """The float32 GEMV kernel over the device operations given (see the module notes)."""

    @cuda.jit(device=True, inline="always")
    def quarter(word, shift, a, b, c, d, s):
        """``s`` plus half the trits ``shift/2 + 2k`` of ``word`` times ``a, b, c, d``."""
        g = group(word, shift)
        s = cuda.fma(take(g, 0), a, s)
        s = cuda.fma(take(g, 1), b, s)
        s = cuda.fma(take(g, 2), c, s)
        return cuda.fma(take(g, 3), d, s)

    @cuda.jit(device=True, inline="always")
    def word_dot(word, x, xi, k, s):
        """``s`` plus half the 16 trits of ``word`` times ``x[xi + k : xi + k + 16]``."""
        p = load4(x, xi, k)
        q = load4(x, xi, k + 4)
        s = quarter(word, 0, p[0], p[2], q[0], q[2], s)
        s = quarter(word, 2, p[1], p[3], q[1], q[3], s)
        p = load4(x, xi, k + 8)
        q = load4(x, xi, k + 12)
        s = quarter(word, 16, p[0], p[2], q[0], q[2], s)
        return quarter(word, 18, p[1], p[3], q[1], q[3], s)

    @cuda.jit
    def kernel(x, w, nw, scale, bias, y):
        """``y[o] = (Σ trit · x) · scale[o] + bias[o]``: x float32 ``(n,)``, w uint32 flat.

        ``nw`` words per row; ``scale`` ``(out,)``; ``bias`` ``(out,)`` or empty; y ``(out,)``.
        """
        red = cuda.shared.array(THREADS, float64)
        tid = uint32(cuda.threadIdx.x)
        lane = uint32(tid & 31)
        words = uint32(nw)
        out = uint32(y.shape[0])
        step = uint32(cuda.gridDim.x * WARPS)
        o0 = uint32(cuda.blockIdx.x * WARPS)
        while o0 < out:
            o = uint32(o0 + (tid >> 5))
            acc = float64(0)
            if o < out:
                row = uint32(o * words)
                c = uint32(lane * CHUNK)
                while c < words:
                    wq = load4(w, uint32(row + c), 0)
                    xi = uint32(c * 16)
                    s = float32(0)
                    s = word_dot(wq[0], x, xi, 0, s)
                    s = word_dot(wq[1], x, xi, 16, s)
                    s = word_dot(wq[2], x, xi, 32, s)
                    s = word_dot(wq[3], x, xi, 48, s)
                    acc += float64(s)
                    c = uint32(c + 32 * CHUNK)
            total = warp_sum(acc, red, tid)
            if o < out and lane == uint32(0):
                total *= 2 * float64(scale[o])  # the sums were of half trits
                if bias.shape[0] != 0:
                    total += float64(bias[o])
                y[o] = float32(total)
            o0 = uint32(o0 + step)

    return kernel


def _int8_kernel(load4, dp4a, warp_sum):
    """The int8 (dp4a) GEMV kernel over the device operations given (see the module notes)."""

    @cuda.jit(device=True, inline="always")
    def word_dot(word, xp, xi, k, acc):
        """``acc`` plus ``Σ code · q`` over the 16 codes of ``word`` (x words from ``xi + k``)."""
        xq = load4(xp, xi, k)
        m = uint32(MASK2)
        acc = dp4a(uint32(word & m), xq[0], acc)
        acc = dp4a(uint32((word >> 2) & m), xq[1], acc)
        acc = dp4a(uint32((word >> 4) & m), xq[2], acc)
        return dp4a(uint32((word >> 6) & m), xq[3], acc)

    @cuda.jit
    def kernel(xp, qsum, xscale, w, nw, scale, bias, y):
        """``y[o] = (Σ code · q - Σ q) · scale[o] · xscale + bias[o]``.

        ``xp``: the permuted quants as uint32 words ``(n // 4,)``; ``qsum`` int32 ``(1,)``
        and ``xscale`` float32 ``(1,)`` from the quantizer; the rest as the float kernel.
        """
        red = cuda.shared.array(THREADS, int32)
        tid = uint32(cuda.threadIdx.x)
        lane = uint32(tid & 31)
        words = uint32(nw)
        out = uint32(y.shape[0])
        step = uint32(cuda.gridDim.x * WARPS)
        o0 = uint32(cuda.blockIdx.x * WARPS)
        while o0 < out:
            o = uint32(o0 + (tid >> 5))
            acc = int32(0)
            if o < out:
                row = uint32(o * words)
                c = uint32(lane * CHUNK)
                while c < words:
                    wq = load4(w, uint32(row + c), 0)
                    xi = uint32(c * 4)
                    acc = word_dot(wq[0], xp, xi, 0, acc)
                    acc = word_dot(wq[1], xp, xi, 4, acc)
                    acc = word_dot(wq[2], xp, xi, 8, acc)
                    acc = word_dot(wq[3], xp, xi, 12, acc)
                    c = uint32(c + 32 * CHUNK)
            total = warp_sum(acc, red, tid)
            if o < out and lane == uint32(0):
                r = float64(int32(total - qsum[0])) * float64(scale[o]) * float64(xscale[0])
                if bias.shape[0] != 0:
                    r += float64(bias[o])
                y[o] = float32(r)
            o0 = uint32(o0 + step)

    return kernel


gemv_float = _float_kernel(_ptx.load4, _group_prmt, _take_prmt, _warp_sum_shfl)
gemv_int8 = _int8_kernel(_ptx.load4, _ptx.dp4a, _warp_sum_shfl)
gemv_float_portable = _float_kernel(_load4_portable, _group_portable, _take_portable,
                                    _warp_sum_portable)
gemv_int8_portable = _int8_kernel(_load4_portable, _dp4a_portable, _warp_sum_portable)
