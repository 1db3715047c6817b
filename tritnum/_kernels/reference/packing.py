"""NumPy reference packing: the obvious vectorized code, and the test oracle.

Each kernel takes rows (``(rows, n)`` trits or ``(rows, ...)`` packed data) and
returns ``(result, ok)``; ``ok`` is False when the input holds a value that is not
a trit or a packed code that no encoder writes.
"""

from __future__ import annotations

import numpy as np

from ..._dispatch import register
from ..._formats import FORMATS, Format

_SHIFT2 = np.array([0, 2, 4, 6], dtype=np.uint8)
_POW3 = np.array([81, 27, 9, 3, 1], dtype=np.int32)  # digit 0 is the most significant
_BITS = np.arange(64, dtype=np.uint64)


def trits_ok(a: np.ndarray) -> np.ndarray:
    """Elementwise: is the value -1, 0 or +1."""
    return (a >= -1) & (a <= 1)


def _padded_codes(a: np.ndarray, fmt: Format) -> np.ndarray:
    """Codes ``t + 1`` as ``(rows, units, per_unit)`` uint8, padded with code 1 (trit 0)."""
    rows, n = a.shape
    units = fmt.units(n)
    codes = np.ones((rows, units * fmt.per_unit), dtype=np.uint8)
    codes[:, :n] = a + 1
    return codes.reshape(rows, units, fmt.per_unit)


def _encode(a: np.ndarray, fmt: Format) -> np.ndarray:
    codes = _padded_codes(a, fmt)
    if fmt.name == "2bit":
        return np.bitwise_or.reduce(codes << _SHIFT2, axis=-1)
    if fmt.name == "base3":
        q = codes.astype(np.int32) @ _POW3
        return ((q * 256 + 242) // 243).astype(np.uint8)
    plus = ((codes == 2).astype(np.uint64) << _BITS).sum(axis=-1, dtype=np.uint64)
    minus = ((codes == 0).astype(np.uint64) << _BITS).sum(axis=-1, dtype=np.uint64)
    return np.stack([plus, minus], axis=1)


def _decode(data: np.ndarray, fmt: Format, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Codes ``(rows, units * per_unit)`` and per-unit validity ``(rows, units)``."""
    rows = data.shape[0]
    if fmt.name == "2bit":
        codes = (data[..., None] >> _SHIFT2) & 3
        valid = codes != 3
    elif fmt.name == "base3":
        v = (data[..., None].astype(np.int32) * _POW3[::-1]) & 255
        codes = ((v * 3) >> 8).astype(np.uint8)
        canonical = ((codes.astype(np.int32) @ _POW3) * 256 + 242) // 243 == data
        valid = np.broadcast_to(canonical[..., None], codes.shape)
    else:
        plus = ((data[:, 0, :, None] >> _BITS) & np.uint64(1)).astype(np.uint8)
        minus = ((data[:, 1, :, None] >> _BITS) & np.uint64(1)).astype(np.uint8)
        codes = 1 + plus - minus
        valid = (plus & minus) == 0
    units = data.shape[-1]
    codes = codes.reshape(rows, units * fmt.per_unit)
    valid = valid.reshape(rows, units * fmt.per_unit).copy()
    valid[:, n:] &= codes[:, n:] == 1  # padding is trit 0
    return codes, valid.reshape(rows, units, fmt.per_unit).all(axis=-1)


def bad_unit(data: np.ndarray, fmt: Format, n: int) -> tuple[int, int] | None:
    """``(row, unit)`` of the first corrupt unit of packed rows, or None."""
    _, units = _decode(np.asarray(data), fmt, n)
    bad = np.argwhere(~units)
    return (int(bad[0, 0]), int(bad[0, 1])) if bad.size else None


@register("pack", "numpy")
def pack(a: np.ndarray, fmt: Format) -> tuple[np.ndarray, bool]:
    if not trits_ok(a).all():
        return np.empty(0, fmt.dtype), False
    return _encode(a, fmt), True


@register("unpack", "numpy")
def unpack(data: np.ndarray, fmt: Format, n: int) -> tuple[np.ndarray, bool]:
    codes, units = _decode(data, fmt, n)
    return (codes[:, :n].astype(np.int8) - 1), bool(units.all())


@register("convert", "numpy")
def convert(data: np.ndarray, src: Format, dst: Format, n: int) -> tuple[np.ndarray, bool]:
    trits, ok = unpack(data, src, n)
    return (_encode(trits, dst) if ok else np.empty(0, dst.dtype)), ok


__all__ = ["FORMATS", "bad_unit", "convert", "pack", "trits_ok", "unpack"]
