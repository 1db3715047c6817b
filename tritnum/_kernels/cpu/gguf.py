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
def _code(v):
    """Code 1 + round_half_away(v), exactly ggml's roundf for |v| < 1.5 (here |v| <= 1)."""
    return np.uint8(1) + np.uint8(v >= np.float32(0.5)) - np.uint8(v <= np.float32(-0.5))


@jit(inline="always")
def _block_scale(x, base):
    """Max |x| over 256 values from ``base``, NaN when one is NaN or infinite."""
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = np.float32(0)
    bad = False
    for j in range(base, base + 256, 8):
        m0 = max(m0, abs(x[j]))
        m1 = max(m1, abs(x[j + 1]))
        m2 = max(m2, abs(x[j + 2]))
        m3 = max(m3, abs(x[j + 3]))
        m4 = max(m4, abs(x[j + 4]))
        m5 = max(m5, abs(x[j + 5]))
        m6 = max(m6, abs(x[j + 6]))
        m7 = max(m7, abs(x[j + 7]))
    m = max(max(max(m0, m1), max(m2, m3)), max(max(m4, m5), max(m6, m7)))
    for j in range(base, base + 256):
        bad |= not abs(x[j]) <= m  # only NaN fails; infinity makes m infinite
    return np.float32(np.nan) if bad else m


@jit()
def _tq2_encode(x, qs, d, t0, t1):
    for b in range(t0, t1):
        base = 256 * b
        m = _block_scale(x, base)
        d[b] = m
        inv = np.float32(1) / m if m != 0 else np.float32(0)
        for h in range(2):
            e = base + 128 * h
            for k in range(32):
                qs[b, 32 * h + k] = (_code(x[e + k] * inv) | _code(x[e + 32 + k] * inv) << 2
                                     | _code(x[e + 64 + k] * inv) << 4
                                     | _code(x[e + 96 + k] * inv) << 6)
    return 0


@jit(inline="always")
def _base3_bytes(x, start, stride, count, digits, inv, qs, b, first):
    """``count`` base-3 bytes, byte k from x[start + k + stride * n], n < digits (else 0)."""
    for k in range(count):
        q = np.uint32(0)
        for n in range(5):
            c = np.uint32(_code(x[start + k + stride * n] * inv)) if n < digits else np.uint32(0)
            q = q * np.uint32(3) + c
        qs[b, first + k] = np.uint8((q * np.uint32(256) + np.uint32(242)) // np.uint32(243))


@jit()
def _tq1_encode(x, qs, d, t0, t1):
    for b in range(t0, t1):
        base = 256 * b
        m = _block_scale(x, base)
        d[b] = m
        inv = np.float32(1) / m if m != 0 else np.float32(0)
        _base3_bytes(x, base, 32, 32, 5, inv, qs, b, 0)
        _base3_bytes(x, base + 160, 16, 16, 5, inv, qs, b, 32)
        _base3_bytes(x, base + 240, 4, 4, 4, inv, qs, b, 48)
    return 0


@jit()
def _i2s_encode(x, qs, maxima, t0, t1):
    """Codes by sign (|w| < 1e-6 is 0) into 32-byte blocks, and each block's max |w|."""
    tiny = np.float32(1e-6)
    for b in range(t0, t1):
        base = 128 * b
        m = np.float32(0)
        bad = False
        for j in range(base, base + 128):
            m = max(m, abs(x[j]))
        for j in range(base, base + 128):
            bad |= not abs(x[j]) <= m
        maxima[b] = np.float32(np.nan) if bad else m
        for k in range(32):
            byte = np.uint8(0)
            for n in range(4):
                v = x[base + 32 * n + k]
                code = np.uint8(1) + np.uint8(v >= tiny) - np.uint8(v <= -tiny)
                byte |= code << (6 - 2 * n)
            qs[32 * b + k] = byte
    return 0


@jit()
def _tq2_decode(qs, d, out, t0, t1):
    bad = 0
    for b in range(t0, t1):
        for h in range(2):
            for n in range(4):
                for k in range(32):
                    code = (qs[b, 32 * h + k] >> (2 * n)) & 3
                    bad += code == 3
                    out[b, 128 * h + 32 * n + k] = d[b] * (np.float32(code) - np.float32(1))
    return bad


@jit(inline="always")
def _base3_digits(qs, b, first, count, out, start, stride, digits, scale):
    """Digits n < ``digits`` of ``count`` bytes from ``first`` into out[start + k + stride n]."""
    for n in range(digits):
        for k in range(count):
            v = (np.uint32(qs[b, first + k]) * np.uint32(3 ** n)) & np.uint32(255)
            code = (v * np.uint32(3)) >> 8
            out[b, start + k + stride * n] = scale * (np.float32(code) - np.float32(1))


@jit()
def _tq1_decode(qs, d, out, t0, t1):
    for b in range(t0, t1):
        _base3_digits(qs, b, 0, 32, out, 0, 32, 5, d[b])
        _base3_digits(qs, b, 32, 16, out, 160, 16, 5, d[b])
        _base3_digits(qs, b, 48, 4, out, 240, 4, 4, d[b])
    return 0


@jit()
def _i2s_decode(qs, scale, out, t0, t1):
    bad = 0
    for b in range(t0, t1):
        for n in range(4):
            for k in range(32):
                code = (qs[32 * b + k] >> (6 - 2 * n)) & 3
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
