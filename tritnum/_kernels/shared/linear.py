"""``linear`` pieces the host backends share: output buffers, resident weights, fused int8.

The CUDA backend keeps device copies and layouts and quantizes activations in one
launch; on the host the same operations are plain compositions of the backend's
own kernels, so ``linear`` calls every backend the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..._dispatch import kernel


def into(y: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """``y``, or the caller's buffer ``out`` holding it."""
    if out is None:
        return y
    out[...] = y
    return out


def keep(a: Any, cache: dict[Any, Any], name: Any) -> Any:
    """``a`` where host kernels read it: as it is (nothing to keep)."""
    return a


def weights(data: Any, scales: Any, fmt: Any, n: int, cache: dict[Any, Any]) -> tuple[Any, Any]:
    """Packed ``data`` and ``(out, groups)`` ``scales`` as host kernels take them: as they are."""
    return data, scales


def no_small_rows(data: Any, scales: Any, fmt: Any, n: int) -> dict[str, Any]:
    """``linear_small`` of a backend without a one-call route for small layers: none."""
    return {}


def int8_fused(device: str) -> Callable[..., tuple[np.ndarray, np.ndarray]]:
    """``linear_int8_fused`` of a host ``device``: its quantizer, then its ``linear_int8``.

    As on CUDA, a row holding NaN or infinity gets a NaN scale, so NaN outputs.
    """

    def linear_int8_fused(x: np.ndarray, w: Any, fmt: Any, n: int, scales: np.ndarray,
                          bias: np.ndarray | None,
                          out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        q, amax = kernel("quantize_activations", device)(x, False)
        xscale = (np.asarray(amax) / np.float32(127)).astype(np.float32)
        with np.errstate(invalid="ignore"):
            y = kernel("linear_int8", device)(q, xscale, w, fmt, n, scales, bias)
        return into(y, out), xscale

    return linear_int8_fused
