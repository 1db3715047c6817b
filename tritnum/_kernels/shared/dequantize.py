"""``dequantize_packed`` as a composition: unpack the trits, then ``dequantize`` them.

The NumPy and CUDA backends (and the CPU one for formats without a decoder of its own)
dequantize packed rows in these two steps of their own kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..._dispatch import kernel
from ..._formats import Format


def from_packed(device: str) -> Callable[..., Any]:
    """``dequantize_packed`` of ``device``: its ``unpack``, then its ``dequantize``."""

    def dequantize_packed(rows: Any, fmt: Format, n: int, scales: Any) -> Any:
        """float32 ``trits * scale`` of packed ``rows`` (codes checked by the caller)."""
        trits, _ = kernel("unpack", device)(rows, fmt, n)
        return kernel("dequantize", device)(trits, scales)

    return dequantize_packed
