"""CUDA kernels for the GGUF block formats: one thread per block, the shared codecs."""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from ..._dispatch import register
from ..shared import floatbits
from ..shared import gguf as codecs
from ._launch import THREADS, blocks, flag, is_set

_device = cuda.jit(device=True, inline="always")
_absmax_bits = _device(floatbits.block_absmax_bits)
_half_shifted = _device(floatbits.half_shifted_bits)
_half_finish = _device(floatbits.half_finish_bits)
_HALF_REBIAS = floatbits.HALF_REBIAS
_float16_bits = _device(floatbits.float16_bits)
_block_inverse = _device(codecs.block_inverse)
_encode_tq2 = _device(codecs.encode_tq2_block)
_encode_tq1 = _device(codecs.encode_tq1_block)
_encode_i2s = _device(codecs.encode_i2s_block)
_decode_tq2 = _device(codecs.decode_tq2_block)
_decode_tq1 = _device(codecs.decode_tq1_block)
_decode_i2s = _device(codecs.decode_i2s_block)


@cuda.jit
def encode_tq_blocks(x, bits, tq2, qs, d, dbits):
    """Whole blocks (codes, float16 scale); ``bits``, ``dbits``: uint32 views of ``x``, ``d``."""
    at = 64 if tq2 else 52
    for b in range(cuda.grid(1), qs.shape[0], cuda.gridsize(1)):
        dbits[b] = _absmax_bits(bits, 256 * b, 256)
        half = _float16_bits(dbits[b])
        qs[b, at] = half & 0xFF
        qs[b, at + 1] = half >> 8
        inv = _block_inverse(d[b])
        if tq2:
            _encode_tq2(x, 256 * b, inv, qs, b)
        else:
            _encode_tq1(x, 256 * b, inv, qs, b)


@cuda.jit
def encode_i2s_blocks(x, bits, qs, maxima_bits):
    for b in range(cuda.grid(1), maxima_bits.shape[0], cuda.gridsize(1)):
        maxima_bits[b] = _absmax_bits(bits, 128 * b, 128)
        _encode_i2s(x, 128 * b, qs, b)


@cuda.jit
def decode_tq_blocks(qs, d, tq2, out, bad):
    for b in range(cuda.grid(1), qs.shape[0], cuda.gridsize(1)):
        if tq2:
            if _decode_tq2(qs, b, d[b], out, b):
                bad[0] = 1
        else:
            _decode_tq1(qs, b, d[b], out, b)


@cuda.jit
def decode_i2s_blocks(qs, scale, out, bad):
    for b in range(cuda.grid(1), qs.shape[0], cuda.gridsize(1)):
        if _decode_i2s(qs, b, scale, out):
            bad[0] = 1


@cuda.jit
def widen_float16(h, out, bits):
    """float32 values of half bits ``h`` into ``out`` (``bits``: its uint32 view)."""
    for i in range(cuda.grid(1), h.shape[0], cuda.gridsize(1)):
        bits[i] = _half_shifted(h[i])
        out[i] = out[i] * _HALF_REBIAS
        bits[i] = _half_finish(bits[i], h[i])


def _widened(h: Any) -> Any:
    """float16 bits ``h`` as float32 values on the GPU."""
    values = cuda.device_array(h.shape[0], np.float32)
    if h.shape[0]:
        widen_float16[blocks(h.shape[0]), THREADS](h, values, values.view(np.uint32))
    return values


@register("gguf_encode", "cuda")
def gguf_encode(x: Any, qtype: str, qs: np.ndarray) -> np.ndarray:
    """Encode on the GPU into the host rows ``qs`` (as the CPU kernel); the scales returned.

    float16 bits (uint16 ``x``) are widened first, on the GPU.
    """
    if x.dtype == np.uint16:
        x = _widened(x)
    if qtype == "I2_S":
        n = x.shape[0] // 128
        codes = cuda.device_array((n, 32), np.uint8)
        maxima = cuda.device_array(n, np.float32)
        if n:
            encode_i2s_blocks[blocks(n), THREADS](x, x.view(np.uint32), codes,
                                                  maxima.view(np.uint32))
        qs[...] = codes.copy_to_host().reshape(qs.shape)
        return np.array([maxima.copy_to_host().max(initial=np.float32(0))], np.float32)
    n = x.shape[0] // 256
    codes = cuda.device_array(qs.shape, np.uint8)
    d = cuda.device_array(n, np.float32)
    if n:
        encode_tq_blocks[blocks(n), THREADS](x, x.view(np.uint32), qtype == "TQ2_0", codes, d,
                                             d.view(np.uint32))
    codes.copy_to_host(qs)
    return d.copy_to_host()


def _decode(qs: Any, scales: Any, qtype: str, dtype: Any) -> tuple[Any, bool]:
    """The flat values ``scale * (code - 1)`` as ``dtype`` on the GPU; whether all were trits."""
    bad = flag()
    if qtype == "I2_S":
        n = qs.shape[0] // 32
        values = cuda.device_array((n, 128), dtype)
        if n:
            decode_i2s_blocks[blocks(n), THREADS](qs.reshape(n, 32), float(scales[0]), values,
                                                  bad)
    else:
        values = cuda.device_array((qs.shape[0], 256), dtype)
        if qs.shape[0]:
            decode_tq_blocks[blocks(qs.shape[0]), THREADS](qs, scales, qtype == "TQ2_0", values,
                                                           bad)
    return values.reshape(values.size), not is_set(bad)


@register("gguf_decode", "cuda")
def gguf_decode(qs: Any, scales: Any, qtype: str,
                out: np.ndarray | None = None) -> tuple[Any, bool]:
    """The flat float32 values on the GPU, or copied into the host array ``out``."""
    values, ok = _decode(qs, scales, qtype, np.float32)
    if out is not None:
        values.copy_to_host(out)
        values = out
    return values, ok


@register("gguf_trits", "cuda")
def gguf_trits(qs: Any, qtype: str) -> tuple[Any, bool]:
    """The flat int8 trits on the GPU (the decoders with scale 1)."""
    n = qs.shape[0] // 32 if qtype == "I2_S" else qs.shape[0]
    return _decode(qs, cuda.to_device(np.ones(max(n, 1), np.float32)), qtype, np.int8)
