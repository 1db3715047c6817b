"""Quantization code shared by the backends and the public layer: the scale floor, amax.

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
