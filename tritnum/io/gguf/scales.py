"""Whether a GGUF block type holds a TernaryTensor's scales exactly, and what it loses if not.

TQ1_0 and TQ2_0 hold one float16 scale per 256 values of a row, I2_S one float32
scale per tensor. A TernaryTensor whose scales are finer than that (``group_size``
32, 64 or 128 into TQ blocks; per-row scales into I2_S) can only be written by
re-quantizing its values (``d = max|x|`` per block, as the ``gguf`` package does),
which moves values; a scale at or past 65520 becomes an infinite float16 scale,
which nothing repairs. :func:`scale_loss` says which applies and measures the
error of re-quantizing (with the codec it is given).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..._interop import to_host
from ...packing import unpack_native
from ...quantize import TernaryTensor

__all__ = ["FLOAT16_OVERFLOW", "ScaleLoss", "overflow_reason", "scale_loss"]

FLOAT16_OVERFLOW = 65520.0  # the smallest float32 that rounds to an infinite float16
_BLOCK = 256


@dataclass(frozen=True)
class ScaleLoss:
    """What writing a TernaryTensor as ``qtype`` loses.

    ``fixable``: re-quantizing from the dequantized values (``requantize=True``)
    writes it, with ``relative_error`` (``||new - old|| / ||old||``) and
    ``max_error`` (the largest change of a value); not fixable: no file of that
    type holds it.
    """

    qtype: str
    reason: str
    relative_error: float
    max_error: float
    fixable: bool

    def message(self) -> str:
        """Why the export was refused, how much it would lose, and what to do."""
        if not self.fixable:
            return (f"{self.reason}; no {self.qtype} file can hold it (requantize=True "
                    "cannot help): scale the weights down")
        return (f"{self.qtype} cannot hold these scales exactly: {self.reason}; writing it "
                f"would re-quantize the values with relative error "
                f"{self.relative_error:.2%} (largest change {self.max_error:.4g}); pass "
                "requantize=True to accept that")


def _trits(t: TernaryTensor) -> np.ndarray:
    return to_host(unpack_native(t.packed)).reshape(-1)


def _element_scales(t: TernaryTensor) -> np.ndarray:
    """The float32 scale of every element, flat."""
    n = math.prod(t.shape)
    if t.group_size is None:
        return np.full(n, t.scales, np.float32)
    return np.repeat(t.scales.reshape(-1), t.group_size)


def overflow_reason(qtype: str, what: str, total: int, big: np.ndarray, first: str = "") -> str:
    """Why ``qtype`` cannot hold scales ``big`` (those at or past 65520 of ``total`` ``what``).

    The words the TernaryTensor and the float paths both refuse with; ``first``
    says where the first of them is.
    """
    where = f"; the first {first}" if first else ""
    return (f"{big.size} of its {total} {what} (the largest {float(np.abs(big).max()):.6g}{where}) "
            f"reach {FLOAT16_OVERFLOW:g} or more, where {qtype}'s float16 block scale "
            "becomes infinite")


def _overflow(t: TernaryTensor, qtype: str) -> ScaleLoss | None:
    """An unfixable loss where a scale of nonzero trits overflows float16 (TQ types)."""
    scales = t.scales.reshape(-1)
    if not (np.abs(scales) >= FLOAT16_OVERFLOW).any():
        return None
    used = _trits(t).reshape(scales.size, -1).any(axis=1)
    big = used & (np.abs(scales) >= FLOAT16_OVERFLOW)
    if not big.any():
        return None
    reason = overflow_reason(qtype, "scales", scales.size, scales[big])
    return ScaleLoss(qtype, reason, math.inf, math.inf, False)


def _granularity(t: TernaryTensor, qtype: str) -> str | None:
    """Why the scales may differ within one of the type's blocks, or None if they cannot."""
    g = t.group_size
    if g is None:
        return None
    if qtype == "I2_S":
        what = "per-row" if g == t.shape[-1] else f"group_size {g}"
        return f"I2_S holds one scale per tensor, this tensor has {what} scales"
    if g % _BLOCK == 0:
        return None
    return f"its group_size {g} is finer than the {_BLOCK}-value blocks of one scale"


def scale_loss(t: TernaryTensor, qtype: str,
               requantized: Callable[[np.ndarray], np.ndarray]) -> ScaleLoss | None:
    """What writing ``t`` as ``qtype`` (``"TQ2_0"``, ``"TQ1_0"``, ``"I2_S"``) loses, or None.

    None where every block's nonzero trits share one scale (also when finer groups
    happen to hold equal scales), and that scale fits the type. ``requantized``
    maps the flat float32 values to what a file of the type holds after quantizing
    them (the codec's round trip), to measure the error.
    """
    if qtype != "I2_S":
        loss = _overflow(t, qtype)
        if loss is not None:
            return loss
    reason = _granularity(t, qtype)
    if reason is None:
        return None
    trits = _trits(t)
    if not trits.size:
        return None
    scales = _element_scales(t)
    nonzero = trits != 0
    block = trits.size if qtype == "I2_S" else _BLOCK
    low = np.where(nonzero, scales, np.float32(np.inf)).reshape(-1, block).min(axis=1)
    high = np.where(nonzero, scales, np.float32(-np.inf)).reshape(-1, block).max(axis=1)
    differ = nonzero.reshape(-1, block).any(axis=1) & (low != high)
    if not differ.any():
        return None
    if qtype != "I2_S":
        reason += f" ({int(differ.sum())} of {differ.size} blocks mix scales)"
    values = trits.astype(np.float32) * scales
    error = requantized(values) - values
    norm = float(np.linalg.norm(values.astype(np.float64)))
    relative = float(np.linalg.norm(error.astype(np.float64))) / norm if norm else 0.0
    return ScaleLoss(qtype, reason, relative, float(np.abs(error).max(initial=0)), True)
