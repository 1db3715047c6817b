"""Quantization code shared by the backends and the public layer: the scale floor, amax.

Also the host kernel of ``dequantize`` (a float multiply NumPy does well).

The precision contract itself is written in :mod:`..reference.quantize`.
"""

from __future__ import annotations

import numpy as np

EPS = 1e-5  # the smallest scale: weights' mean |w| and activations' max |x| are floored to it


def kept_amax(amax: np.ndarray, per_tensor: bool) -> np.ndarray:
    """The amax values returned: one per row, or the tensor's one (also with no rows)."""
    if not per_tensor:
        return amax
    return amax[:1] if amax.size else np.array([EPS], np.float32)


def dequantize_rows(trits: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """float32 ``trits * scale`` of int8 rows ``(R, n)`` and float32 scales ``(R, groups)``.

    Scales ``(1, 1)`` stand for one scale of the whole tensor; each of ``groups``
    scales of a row covers ``n // groups`` consecutive trits.
    """
    rows, n = trits.shape
    out = trits.reshape(rows, scales.shape[1], n // max(scales.shape[1], 1)).astype(np.float32)
    return np.multiply(out, scales[:, :, None], out=out).reshape(rows, n)
