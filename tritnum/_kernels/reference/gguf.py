"""NumPy reference for the GGUF block formats TQ2_0, TQ1_0 and bitnet.cpp's I2_S.

Encoders take float32 blocks (``(blocks, 256)``, or the flat tensor for I2_S) and
return codes and scales; the byte layouts are assembled here too. Rounding and
scales follow the ``gguf`` package (llama.cpp's reference): ``d = max|x|`` per
block, ``q = round_half_away(x * float32(1 / d))``, d stored as float16.
"""

from __future__ import annotations

import numpy as np

from ..._dispatch import register
from ..shared.gguf import (
    I2S_NONZERO,
    INVERSE_MIN,
    i2s_bytes,
    i2s_unpack,
    tq1_bytes,
    tq1_codes,
    tq2_bytes,
    tq2_codes,
)


def roundf(v: np.ndarray) -> np.ndarray:
    """Round half away from zero, as ggml's ``roundf`` and the gguf package's ``np_roundf``."""
    a = np.abs(v)
    floor = np.floor(a)
    return np.sign(v) * (floor + np.floor(2 * (a - floor)))


def block_codes(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes t + 1 ``(blocks, 256)`` uint8 and the float32 absmax ``d`` of each block."""
    d = np.abs(x).max(axis=1)
    # 1/d, or 0 where ggml's 1/d is 0 or overflows (ggml then rounds NaNs, which its int8
    # cast makes code 1, as x * 0 does here; see shared.gguf.block_inverse)
    big = d > INVERSE_MIN
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=big)
    with np.errstate(invalid="ignore"):  # NaN/inf: the caller refuses them from the scales
        codes = (roundf(x * inv[:, None]).astype(np.int8) + 1).astype(np.uint8)
    return codes, d


def i2s_codes(x: np.ndarray) -> np.ndarray:
    """bitnet.cpp's codes: 1 where |w| < 1e-6 (in double), else 2 for w > 0, 0 for w < 0."""
    return np.where(np.abs(x) < I2S_NONZERO, 1, np.where(x > 0, 2, 0)).astype(np.uint8)


@register("gguf_encode", "numpy")
def gguf_encode(x: np.ndarray, qtype: str, qs: np.ndarray) -> np.ndarray:
    """Write the quantized bytes of ``x`` into ``qs``; return the scales.

    ``x`` is flat float32, or float16 bits as uint16. ``qs`` is ``(blocks, block
    bytes)`` for TQ1_0/TQ2_0: whole blocks, the codes and then the float16 scale.
    For I2_S it is flat and gets the codes only. The float32 scales come back: one
    per block, or the tensor's maximum for I2_S.
    """
    if x.dtype == np.uint16:
        x = x.view(np.float16).astype(np.float32)
    if qtype == "I2_S":
        qs[...] = i2s_bytes(i2s_codes(x))
        return np.abs(x).max(initial=np.float32(0)).reshape(1)
    codes, d = block_codes(x.reshape(-1, 256))
    data = tq2_bytes(codes) if qtype == "TQ2_0" else tq1_bytes(codes)
    qs[:, : data.shape[1]] = data
    with np.errstate(over="ignore"):  # above 65504: infinity, as gguf stores it
        qs[:, data.shape[1]:] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    return d


def _codes(qs: np.ndarray, qtype: str) -> np.ndarray:
    """Codes t + 1 of the blocks: flat for I2_S, ``(blocks, 256)`` for TQ1_0/TQ2_0."""
    if qtype == "I2_S":
        return i2s_unpack(qs)
    return tq2_codes(qs) if qtype == "TQ2_0" else tq1_codes(qs)


@register("gguf_decode", "numpy")
def gguf_decode(qs: np.ndarray, scales: np.ndarray, qtype: str,
                out: np.ndarray | None = None) -> tuple[np.ndarray, bool]:
    """float32 values ``scale * (code - 1)`` and whether every code was a trit code.

    The values go into ``out`` (flat) when it is given.
    """
    codes = _codes(qs, qtype)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN or huge scales: as the kernels
        if qtype == "I2_S":
            values = scales[0] * (codes.astype(np.float32) - 1)
        else:
            values = (scales[:, None] * (codes.astype(np.float32) - 1)).reshape(-1)
    if out is not None:
        out[...] = values
        values = out
    return values, bool((codes != 3).all())


@register("gguf_trits", "numpy")
def gguf_trits(qs: np.ndarray, qtype: str) -> tuple[np.ndarray, bool]:
    """The flat int8 trits ``code - 1`` and whether every code was a trit code.

    A code 3 (not a trit) comes out as 2, as the numba backends write it.
    """
    codes = _codes(qs, qtype)
    return codes.reshape(-1).astype(np.int8) - 1, bool((codes != 3).all())
