"""NumPy reference quantization: BitNet b1.58 absmean weights, absmax activations.

Precision contract shared by every backend (so results match exactly):
weights: group sums of |w| in float64, ``scale = float32(max(sum / count, 1e-5))``,
``q = float64(w) / float64(scale)`` and ``t = (q > 0.5) - (q < -0.5)``, which is
``clip(round_half_even(q), -1, 1)`` for every finite q.
activations (bitnet.cpp ``quantize_row_i8_s``, float32 throughout):
``amax = max(max|x|, 1e-5)``, ``q = clip(rint(x * (127 / amax)), -128, 127)``.
"""

from __future__ import annotations

import numpy as np

from ..._dispatch import register
from ..._formats import Format
from ..shared.dequantize import from_packed
from ..shared.packing import encode
from ..shared.quantize import EPS


@register("abs_sums", "numpy")
def abs_sums(w: np.ndarray, groups: int) -> np.ndarray:
    """Sums of |w| in float64 over ``groups`` equal groups of each row: ``(rows, groups)``."""
    rows, n = w.shape
    return np.abs(w.reshape(rows, groups, n // groups), dtype=np.float64).sum(axis=-1)


def ternarize(w: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Trits of ``w`` (rows, n) for float32 ``scales`` (rows, groups), as int8."""
    rows, n = w.shape
    groups = scales.shape[1]
    q = w.reshape(rows, groups, n // groups).astype(np.float64) / scales[..., None].astype(
        np.float64)
    return ((q > 0.5).astype(np.int8) - (q < -0.5)).reshape(rows, n)


@register("quantize_pack", "numpy")
def quantize_pack(w: np.ndarray, scales: np.ndarray, fmt: Format) -> np.ndarray:
    """Trits of ``w`` for ``scales``, packed into ``fmt`` rows."""
    return encode(ternarize(w, scales), fmt)


@register("quantize_activations", "numpy")
def quantize_activations(x: np.ndarray, per_tensor: bool) -> tuple[np.ndarray, np.ndarray]:
    """int8 rows and their float32 ``amax`` (one per row, or one for all)."""
    with np.errstate(over="ignore", invalid="ignore"):  # the caller raises on a non-finite amax
        x = x.astype(np.float32, copy=False)
        amax = np.abs(x).max(axis=None if per_tensor else 1, initial=np.float32(0))
        amax = np.maximum(np.atleast_1d(amax), np.float32(EPS)).astype(np.float32)
        iscale = np.float32(127) / amax
        q = np.rint(x * (iscale[:, None] if not per_tensor else iscale[0]))
        return np.clip(q, -128, 127).astype(np.int8), amax


@register("dequantize", "numpy")
def dequantize_rows(trits: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """float32 ``trits * scale`` of int8 rows ``(R, n)`` and float32 scales ``(R, groups)``.

    Scales ``(1, 1)`` stand for one scale of the whole tensor; each of ``groups``
    scales of a row covers ``n // groups`` consecutive trits.
    """
    rows, n = trits.shape
    out = trits.reshape(rows, scales.shape[1], n // max(scales.shape[1], 1)).astype(np.float32)
    return np.multiply(out, scales[:, :, None], out=out).reshape(rows, n)


register("dequantize_packed", "numpy")(from_packed("numpy"))
