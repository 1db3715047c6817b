"""NumPy reference for the GGUF block formats TQ2_0, TQ1_0 and bitnet.cpp's I2_S.

Encoders take float32 blocks (``(blocks, 256)``, or the flat tensor for I2_S) and
return codes and scales; the byte layouts are assembled here too. Rounding and
scales follow the ``gguf`` package (llama.cpp's reference): ``d = max|x|`` per
block, ``q = round_half_away(x * float32(1 / d))``, d stored as float16.
"""

from __future__ import annotations

import numpy as np

from ..._dispatch import register
from ..gguf_codecs import INVERSE_MIN

_POW3 = np.array([81, 27, 9, 3, 1], dtype=np.uint16)


def roundf(v: np.ndarray) -> np.ndarray:
    """Round half away from zero, as ggml's ``roundf`` and the gguf package's ``np_roundf``."""
    a = np.abs(v)
    floor = np.floor(a)
    return np.sign(v) * (floor + np.floor(2 * (a - floor)))


def block_codes(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes t + 1 ``(blocks, 256)`` uint8 and the float32 absmax ``d`` of each block."""
    d = np.abs(x).max(axis=1)
    # 1/d, or 0 where ggml's 1/d is 0 or overflows (ggml then rounds NaNs, which its int8
    # cast makes code 1, as x * 0 does here; see gguf_codecs.block_inverse)
    big = d > INVERSE_MIN
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=big)
    codes = (roundf(x * inv[:, None]).astype(np.int8) + 1).astype(np.uint8)
    return codes, d


def tq2_bytes(codes: np.ndarray) -> np.ndarray:
    """TQ2_0 ``qs``: byte 32h + m holds elements 128h + m + 32n at bits 2n."""
    c = codes.reshape(-1, 2, 4, 32)
    return (c[:, :, 0] | c[:, :, 1] << 2 | c[:, :, 2] << 4 | c[:, :, 3] << 6).reshape(-1, 64)


def tq2_codes(qs: np.ndarray) -> np.ndarray:
    """Inverse of :func:`tq2_bytes` (code 3 stays 3)."""
    shifts = np.array([0, 2, 4, 6], np.uint8)[:, None]
    return ((qs.reshape(-1, 2, 1, 32) >> shifts) & 3).reshape(-1, 256)


def _base3(digits: np.ndarray) -> np.ndarray:
    q = (digits.astype(np.uint16) * _POW3[: digits.shape[1], None]).sum(axis=1, dtype=np.uint16)
    return ((q * 256 + 242) // 243).astype(np.uint8)


def tq1_bytes(codes: np.ndarray) -> np.ndarray:
    """TQ1_0 ``qs[48]`` and ``qh[4]`` (52 bytes per block of 256 codes)."""
    n = codes.shape[0]
    return np.concatenate([
        _base3(codes[:, :160].reshape(n * 1, 5, 32)).reshape(n, 32),
        _base3(codes[:, 160:240].reshape(n, 5, 16)).reshape(n, 16),
        _base3(codes[:, 240:].reshape(n, 4, 4)).reshape(n, 4),  # fifth digit 0
    ], axis=1)


def tq1_codes(qs: np.ndarray) -> np.ndarray:
    """Inverse of :func:`tq1_bytes`: digit n of a byte is ((byte * 3^n) mod 256 * 3) >> 8."""
    n = qs.shape[0]
    pow3 = np.array([1, 3, 9, 27, 81], np.uint16)[:, None]

    def digits(b: np.ndarray, k: int) -> np.ndarray:
        return ((((b[:, None, :].astype(np.uint16) * pow3[:k]) & 255) * 3) >> 8).reshape(
            n, k * b.shape[1])

    return np.concatenate(
        [digits(qs[:, :32], 5), digits(qs[:, 32:48], 5), digits(qs[:, 48:52], 4)], axis=1
    ).astype(np.uint8)


def i2s_codes(x: np.ndarray) -> np.ndarray:
    """bitnet.cpp's converter: code 1 where |w| < 1e-6, else 2 for w > 0, 0 for w < 0."""
    return np.where(np.abs(x) < 1e-6, 1, np.where(x > 0, 2, 0)).astype(np.uint8)


def i2s_bytes(codes: np.ndarray) -> np.ndarray:
    """128-element blocks of 32 bytes: element j at byte j % 32, shift 6 - 2 (j // 32)."""
    c = codes.reshape(-1, 4, 32)
    return (c[:, 0] << 6 | c[:, 1] << 4 | c[:, 2] << 2 | c[:, 3]).reshape(-1)


def i2s_unpack(qs: np.ndarray) -> np.ndarray:
    """Inverse of :func:`i2s_bytes`."""
    shifts = np.array([6, 4, 2, 0], np.uint8)[:, None]
    return ((qs.reshape(-1, 1, 32) >> shifts) & 3).reshape(-1)


@register("gguf_encode", "numpy")
def gguf_encode(x: np.ndarray, qtype: str, qs: np.ndarray) -> np.ndarray:
    """Write the quantized bytes of ``x`` (flat float32) into ``qs``; return the scales.

    ``qs`` is ``(blocks, block bytes)`` for TQ1_0/TQ2_0: whole blocks, the codes
    and then the float16 scale. For I2_S it is flat and gets the codes only. The
    float32 scales come back: one per block, or the tensor's maximum for I2_S.
    """
    if qtype == "I2_S":
        qs[...] = i2s_bytes(i2s_codes(x))
        return np.abs(x).max(initial=np.float32(0)).reshape(1)
    codes, d = block_codes(x.reshape(-1, 256))
    data = tq2_bytes(codes) if qtype == "TQ2_0" else tq1_bytes(codes)
    qs[:, : data.shape[1]] = data
    with np.errstate(over="ignore"):  # above 65504: infinity, as gguf stores it
        qs[:, data.shape[1]:] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    return d


@register("gguf_decode", "numpy")
def gguf_decode(qs: np.ndarray, scales: np.ndarray, qtype: str,
                out: np.ndarray | None = None) -> tuple[np.ndarray, bool]:
    """float32 values ``scale * (code - 1)`` and whether every code was a trit code.

    The values go into ``out`` (flat) when it is given.
    """
    if qtype == "I2_S":
        codes = i2s_unpack(qs)
        values = scales[0] * (codes.astype(np.float32) - 1)
    else:
        codes = tq2_codes(qs) if qtype == "TQ2_0" else tq1_codes(qs)
        values = (scales[:, None] * (codes.astype(np.float32) - 1)).reshape(-1)
    if out is not None:
        out[...] = values
        values = out
    return values, bool((codes != 3).all())
