"""NumPy reference packing: the obvious vectorized code, and the test oracle.

Each kernel takes rows (``(rows, n)`` trits or ``(rows, ...)`` packed data) and
returns ``(result, ok)``; ``ok`` is False when the input holds a value that is not
a trit or a packed code that no encoder writes.
"""

from __future__ import annotations

import numpy as np

from ..._dispatch import register
from ..._formats import FORMATS, Format
from ..shared.packing import decode, encode


def trits_ok(a: np.ndarray) -> np.ndarray:
    """Elementwise: is the value -1, 0 or +1."""
    return (a >= -1) & (a <= 1)


@register("pack", "numpy")
def pack(a: np.ndarray, fmt: Format) -> tuple[np.ndarray, bool]:
    if not trits_ok(a).all():
        return np.empty(0, fmt.dtype), False
    return encode(a, fmt), True


@register("unpack", "numpy")
def unpack(data: np.ndarray, fmt: Format, n: int) -> tuple[np.ndarray, bool]:
    codes, units = decode(data, fmt, n)
    return (codes[:, :n].astype(np.int8) - 1), bool(units.all())


@register("convert", "numpy")
def convert(data: np.ndarray, sfmt: Format, dfmt: Format, n: int) -> tuple[np.ndarray, bool]:
    trits, ok = unpack(data, sfmt, n)
    return (encode(trits, dfmt) if ok else np.empty(0, dfmt.dtype)), ok


__all__ = ["FORMATS", "convert", "pack", "trits_ok", "unpack"]
