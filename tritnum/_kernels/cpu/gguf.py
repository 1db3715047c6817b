"""CPU kernels for the GGUF block formats: the shared per-block codecs over blocks.

Scales come back as float32; the caller stores them as float16 where the format
says so (numba's CPU target has no float16).
"""

from __future__ import annotations

import numpy as np

from ..._dispatch import register
from ..shared import floatbits
from ..shared import gguf as codecs
from ._jit import jit
from ._llvm.cache import store_fence, stream_floats
from ._llvm.gguf import absmax_bits, encode_tq1, encode_tq2
from ._parallel import run

# Internal API: the private names other modules use (tests/test_architecture_seams.py):
# cpu/compress.py (float16 gradients widened a run at a time).
_INTERNAL_API = ("_widen",)

STREAM_BYTES = 32 << 20  # a given out= this large (beyond the L3 cache) is written streaming

_absmax_bits = jit(inline="always")(floatbits.block_absmax_bits)
_half_shifted = jit(inline="always")(floatbits.half_shifted_bits)
_half_finish = jit(inline="always")(floatbits.half_finish_bits)
_HALF_REBIAS = floatbits.HALF_REBIAS
_float16_bits = jit(inline="always")(floatbits.float16_bits)
_block_inverse = jit(inline="always")(codecs.block_inverse)
_encode_i2s = jit(inline="always")(codecs.encode_i2s_block)
_decode_tq2 = jit(inline="always")(codecs.decode_tq2_block)
_decode_tq1 = jit(inline="always")(codecs.decode_tq1_block)
_decode_i2s = jit(inline="always")(codecs.decode_i2s_block)


@jit(inline="always")
def _encode_tq_block(x, bits, base, tq2, qs, d, dbits, b):
    """Block b of ``qs`` (C-contiguous) from ``x[base:base + 256]``.

    The float16 scale, then the codes (SIMD, :mod:`._llvm.gguf`).
    """
    at = 64 if tq2 else 52  # where the scale goes
    dbits[b] = absmax_bits(bits, base)
    half = _float16_bits(dbits[b])
    qs[b, at] = half & 0xFF
    qs[b, at + 1] = half >> 8
    inv = _block_inverse(d[b])
    if tq2:
        encode_tq2(x, base, inv, qs, b * qs.shape[1])
    else:
        encode_tq1(x, base, inv, qs, b * qs.shape[1])


@jit(inline="always")
def _widen(h, base, count, out, bits):
    """float32 values of the half bits ``h[base:base + count]`` into ``out``, exactly.

    ``bits`` is ``out``'s uint32 view; three plain loops over the block, each vectorizing.
    """
    hb = h[base:base + count]
    for i in range(count):
        bits[i] = _half_shifted(hb[i])
    for i in range(count):
        out[i] *= _HALF_REBIAS
    for i in range(count):
        bits[i] = _half_finish(bits[i], hb[i])


@jit()
def _encode_tq(x, bits, tq2, qs, d, dbits, t0, t1):
    """Whole blocks into the rows of ``qs``: codes, then the float16 scale.

    ``bits`` and ``dbits`` are uint32 views of ``x`` and ``d``; ``d`` gets the
    float32 scales.
    """
    for b in range(t0, t1):
        _encode_tq_block(x, bits, 256 * b, tq2, qs, d, dbits, b)
    return 0


@jit()
def _encode_tq_halves(h, tq2, qs, d, dbits, t0, t1):
    """As :func:`_encode_tq`, from float16 bits ``h``.

    Each block is widened in the L1 cache: 2.6x faster than widening the whole
    input first.
    """
    scratch = np.empty(256, np.float32)
    sbits = scratch.view(np.uint32)
    for b in range(t0, t1):
        _widen(h, 256 * b, 256, scratch, sbits)
        _encode_tq_block(scratch, sbits, 0, tq2, qs, d, dbits, b)
    return 0


@jit()
def _encode_i2s_blocks(x, bits, qs, maxima_bits, t0, t1):
    for b in range(t0, t1):
        maxima_bits[b] = _absmax_bits(bits, 128 * b, 128)
        _encode_i2s(x, 128 * b, qs, b)
    return 0


@jit()
def _encode_i2s_halves(h, qs, maxima_bits, t0, t1):
    scratch = np.empty(128, np.float32)
    sbits = scratch.view(np.uint32)
    for b in range(t0, t1):
        _widen(h, 128 * b, 128, scratch, sbits)
        maxima_bits[b] = _absmax_bits(sbits, 0, 128)
        _encode_i2s(scratch, 0, qs, b)
    return 0


@jit(inline="always")
def _decode_tq_block(qs, b, d, tq2, out, row):
    if tq2:
        return _decode_tq2(qs, b, d[b], out, row)
    return _decode_tq1(qs, b, d[b], out, row)


@jit()
def _decode_tq(qs, d, tq2, stream, out, t0, t1):
    """Blocks t0..t1 into ``out``.

    With ``stream`` each block is decoded into a 1 KiB scratch row and copied out
    with non-temporal stores (no read of the destination lines, nothing of them
    left in the cache).
    """
    bad = 0
    if stream:
        scratch = np.empty((1, 256), np.float32)
        for b in range(t0, t1):
            bad += _decode_tq_block(qs, b, d, tq2, scratch, 0)
            stream_floats(out, 256 * b, scratch, 0, 256)
        store_fence()
    else:
        for b in range(t0, t1):
            bad += _decode_tq_block(qs, b, d, tq2, out, b)
    return bad


@jit()
def _trits_tq(qs, tq2, out, t0, t1):
    """The int8 trits of blocks t0..t1 into ``out`` (the decoders with scale 1)."""
    one = np.float32(1)
    bad = 0
    for b in range(t0, t1):
        if tq2:
            bad += _decode_tq2(qs, b, one, out, b)
        else:
            bad += _decode_tq1(qs, b, one, out, b)
    return bad


@jit()
def _decode_i2s_blocks(qs, scale, out, t0, t1):
    bad = 0
    for b in range(t0, t1):
        bad += _decode_i2s(qs, b, scale, out)
    return bad


@register("gguf_encode", "cpu")
def gguf_encode(x: np.ndarray, qtype: str, qs: np.ndarray) -> np.ndarray:
    halves = x.dtype == np.uint16  # float16 bits, widened block by block
    if qtype == "I2_S":
        blocks = x.size // 128
        maxima = np.empty(blocks, np.float32)
        if halves:
            run(_encode_i2s_halves, blocks, 2 * x.nbytes, x, qs.reshape(blocks, 32),
                maxima.view(np.uint32))
        else:
            run(_encode_i2s_blocks, blocks, x.nbytes, x, x.view(np.uint32),
                qs.reshape(blocks, 32), maxima.view(np.uint32))
        return np.array([maxima.max(initial=np.float32(0))], np.float32)
    blocks = x.size // 256
    d = np.empty(blocks, np.float32)
    if halves:
        run(_encode_tq_halves, blocks, 2 * x.nbytes, x, qtype == "TQ2_0", qs, d,
            d.view(np.uint32))
    else:
        run(_encode_tq, blocks, x.nbytes, x, x.view(np.uint32), qtype == "TQ2_0", qs, d,
            d.view(np.uint32))
    return d


def _block_count(qs: np.ndarray, qtype: str) -> tuple[int, int]:
    """Blocks in ``qs`` and values per block."""
    if qtype == "I2_S":
        return qs.size // 32, 128
    return qs.shape[0], 256


@register("gguf_decode", "cpu")
def gguf_decode(qs: np.ndarray, scales: np.ndarray, qtype: str,
                out: np.ndarray | None = None) -> tuple[np.ndarray, bool]:
    # streaming stores pay off on a large, reused ``out`` (3.7 instead of 4.2-4.5 ms for
    # 64 MiB); into fresh pages the page faults dominate and they gain nothing
    stream = out is not None and out.nbytes >= STREAM_BYTES
    blocks, per_block = _block_count(qs, qtype)
    out = (np.empty(blocks * per_block, np.float32) if out is None else out).reshape(
        blocks, per_block)
    if qtype == "I2_S":
        bad = run(_decode_i2s_blocks, blocks, out.nbytes, qs.reshape(-1, 32), scales[0], out)
    else:
        bad = run(_decode_tq, blocks, out.nbytes, qs, scales, qtype == "TQ2_0", stream, out)
    return out.reshape(-1), bad == 0


@register("gguf_trits", "cpu")
def gguf_trits(qs: np.ndarray, qtype: str) -> tuple[np.ndarray, bool]:
    blocks, per_block = _block_count(qs, qtype)
    out = np.empty((blocks, per_block), np.int8)
    if qtype == "I2_S":
        bad = run(_decode_i2s_blocks, blocks, out.nbytes, qs.reshape(-1, 32), np.float32(1), out)
    else:
        bad = run(_trits_tq, blocks, out.nbytes, qs, qtype == "TQ2_0", out)
    return out.reshape(-1), bad == 0
