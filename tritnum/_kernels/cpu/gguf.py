"""CPU kernels for the GGUF block formats (semantics: :mod:`..reference.gguf`).

One task per block of 256 values (TQ1_0, TQ2_0) or per 128-value block (I2_S).
Scales are written as float32; the caller stores them as float16 where the format
says so (numba's CPU target has no float16).
"""

from __future__ import annotations

import numpy as np

from ..._dispatch import register
from ._jit import jit
from ._parallel import run


@jit(inline="always")
def _roundf_code(v):
    """Code 1 + round_half_away(v) for |v| <= 1 (ggml's roundf), in float32."""
    a = abs(v)
    f = np.floor(a)
    r = f + np.floor(np.float32(2) * (a - f))
    if v < 0:
        r = -r
    return np.uint8(np.int8(r) + 1)


@jit(inline="always")
def _block_scale(x, b):
    """Max |x| of block b, NaN when it holds NaN or infinity (x * 0 is NaN there)."""
    m = np.float32(0)
    finite = np.float32(0)
    for j in range(256 * b, 256 * b + 256):
        m = max(m, abs(x[j]))
        finite += x[j] * np.float32(0)
    return m + finite


@jit()
def _tq2_encode(x, qs, d, t0, t1):
    for b in range(t0, t1):
        m = _block_scale(x, b)
        d[b] = m
        inv = np.float32(1) / m if m != 0 else np.float32(0)
        base = 256 * b
        for h in range(2):
            for k in range(32):
                byte = np.uint8(0)
                for n in range(4):
                    byte |= _roundf_code(x[base + 128 * h + 32 * n + k] * inv) << (2 * n)
                qs[b, 32 * h + k] = byte
    return 0


@jit(inline="always")
def _base3_byte(x, start, stride, digits, inv):
    q = np.uint32(0)
    for n in range(5):
        c = _roundf_code(x[start + stride * n] * inv) if n < digits else np.uint8(0)
        q = q * np.uint32(3) + np.uint32(c)
    return np.uint8((q * np.uint32(256) + np.uint32(242)) // np.uint32(243))


@jit()
def _tq1_encode(x, qs, d, t0, t1):
    for b in range(t0, t1):
        m = _block_scale(x, b)
        d[b] = m
        inv = np.float32(1) / m if m != 0 else np.float32(0)
        base = 256 * b
        for k in range(32):
            qs[b, k] = _base3_byte(x, base + k, 32, 5, inv)
        for k in range(16):
            qs[b, 32 + k] = _base3_byte(x, base + 160 + k, 16, 5, inv)
        for k in range(4):
            qs[b, 48 + k] = _base3_byte(x, base + 240 + k, 4, 4, inv)
    return 0


@jit()
def _i2s_encode(x, qs, maxima, t0, t1):
    """Codes by sign (|w| < 1e-6 is 0) into 32-byte blocks, and each block's max |w|."""
    for b in range(t0, t1):
        m = np.float32(0)
        finite = np.float32(0)
        for k in range(32):
            byte = np.uint8(0)
            for n in range(4):
                v = x[128 * b + 32 * n + k]
                m = max(m, abs(v))
                finite += v * np.float32(0)
                code = np.uint8(1) if abs(v) < np.float32(1e-6) else (
                    np.uint8(2) if v > 0 else np.uint8(0))
                byte |= code << (6 - 2 * n)
            qs[32 * b + k] = byte
        maxima[b] = m + finite
    return 0


@jit()
def _tq2_decode(qs, d, out, t0, t1):
    bad = 0
    for b in range(t0, t1):
        for h in range(2):
            for k in range(32):
                byte = qs[b, 32 * h + k]
                for n in range(4):
                    code = (byte >> (2 * n)) & 3
                    bad += code == 3
                    out[b, 128 * h + 32 * n + k] = d[b] * (np.float32(code) - np.float32(1))
    return bad


@jit(inline="always")
def _base3_digits(qs, b, byte_index, out, start, stride, digits, scale):
    v = np.uint32(qs[b, byte_index])
    for n in range(digits):
        code = (v * np.uint32(3)) >> 8
        v = (v * np.uint32(3)) & np.uint32(255)
        out[b, start + stride * n] = scale * (np.float32(code) - np.float32(1))


@jit()
def _tq1_decode(qs, d, out, t0, t1):
    for b in range(t0, t1):
        for k in range(32):
            _base3_digits(qs, b, k, out, k, 32, 5, d[b])
        for k in range(16):
            _base3_digits(qs, b, 32 + k, out, 160 + k, 16, 5, d[b])
        for k in range(4):
            _base3_digits(qs, b, 48 + k, out, 240 + k, 4, 4, d[b])
    return 0


@jit()
def _i2s_decode(qs, scale, out, t0, t1):
    bad = 0
    for b in range(t0, t1):
        for k in range(32):
            byte = qs[32 * b + k]
            for n in range(4):
                code = (byte >> (6 - 2 * n)) & 3
                bad += code == 3
                out[128 * b + 32 * n + k] = scale * (np.float32(code) - np.float32(1))
    return bad


@register("gguf_encode", "cpu")
def gguf_encode(x: np.ndarray, qtype: str) -> tuple[np.ndarray, np.ndarray]:
    if qtype == "I2_S":
        blocks = x.size // 128
        qs = np.empty(x.size // 4, np.uint8)
        maxima = np.empty(blocks, np.float32)
        run(_i2s_encode, blocks, x.nbytes, x, qs, maxima)
        return qs, np.array([maxima.max(initial=np.float32(0))], np.float32)
    blocks = x.size // 256
    qs = np.empty((blocks, 64 if qtype == "TQ2_0" else 52), np.uint8)
    d = np.empty(blocks, np.float32)
    run(_tq2_encode if qtype == "TQ2_0" else _tq1_encode, blocks, x.nbytes, x, qs, d)
    return qs, d


@register("gguf_decode", "cpu")
def gguf_decode(qs: np.ndarray, scales: np.ndarray, qtype: str) -> tuple[np.ndarray, bool]:
    if qtype == "I2_S":
        out = np.empty(qs.size * 4, np.float32)
        bad = run(_i2s_decode, qs.size // 32, out.nbytes, qs, scales[0], out)
        return out, bad == 0
    out = np.empty((qs.shape[0], 256), np.float32)
    kernel = _tq2_decode if qtype == "TQ2_0" else _tq1_decode
    bad = run(kernel, qs.shape[0], out.nbytes, qs, scales, out)
    return out.reshape(-1), bad == 0
