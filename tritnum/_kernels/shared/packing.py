"""Packing code shared by the backends and the public layer: per-unit codecs, row views.

- Per-unit codecs (:func:`encode_unit`, :func:`store_unit`, :func:`read_code`,
  :func:`unit_ok`): plain Python functions, compiled by ``numba.njit`` in
  :mod:`..cpu` and by ``numba.cuda.jit(device=True)`` in :mod:`..cuda`, so both
  backends encode and decode with the same code. They work on one packed row seen
  as ``uint8``: "2bit" and "base3" rows are their bytes; a "bitplane" row of
  ``2 * nw`` uint64 words is seen as ``16 * nw`` bytes, the plus plane first, the
  minus plane from byte ``half = 8 * nw`` on (little-endian, as the words are). A
  bitplane "unit" here is one byte of each plane: 8 trits. They call no other
  function, so each compiles on its own.
- :func:`byte_rows`: packed rows as those uint8 rows, for NumPy and device arrays.
- Whole-row NumPy codecs (:func:`encode`, :func:`decode`): the reference backend's
  packing, also used by :func:`bad_unit`, which names the first corrupt unit of
  packed data for the public error messages.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._formats import Format

UNIT_TRITS = (4, 5, 8)  # trits per uint8 unit for codes 0 (2bit), 1 (base3), 2 (bitplane)


def encode_unit(fmt, src, start, count):
    """Encode trits ``src[start:start + count]`` into one unit; -1 if one is not a trit.

    Padding (``count`` below the unit size) encodes as trit 0. A bitplane unit
    comes back as ``plus | minus << 8``.
    """
    if fmt == 2:
        plus = 0
        minus = 0
        for k in range(count):
            t = int(src[start + k])
            if t == 1:
                plus |= 1 << k
            elif t == -1:
                minus |= 1 << k
            elif t != 0:
                return -1
        return plus | (minus << 8)
    value = 0
    for k in range(4 if fmt == 0 else 5):
        c = 1
        if k < count:
            c = int(src[start + k]) + 1
            if c < 0 or c > 2:
                return -1
        if fmt == 0:
            value |= c << (2 * k)
        else:
            value = value * 3 + c
    if fmt == 1:
        value = (value * 256 + 242) // 243
    return value


def store_unit(fmt, row, u, half, value):
    """Write an :func:`encode_unit` result as unit ``u`` of a packed uint8 row."""
    if fmt == 2:
        row[u] = value & 255
        row[half + u] = value >> 8
    else:
        row[u] = value


def read_code(fmt, row, j, half):
    """Code (trit + 1) of trit ``j`` of a packed uint8 row; 3 marks a corrupt 2bit code."""
    if fmt == 0:
        return (int(row[j >> 2]) >> ((j & 3) << 1)) & 3
    if fmt == 1:
        v = int(row[j // 5])
        for _ in range(j % 5):
            v = (v * 3) & 255
        return (v * 3) >> 8
    b = j >> 3
    s = j & 7
    return 1 + ((int(row[b]) >> s) & 1) - ((int(row[half + b]) >> s) & 1)


def unit_ok(fmt, row, u, n, half):
    """Whether unit ``u`` of a packed row of ``n`` trits is what an encoder writes.

    Rejects 2bit code 3, base3 bytes that are not a canonical encoding, bitplane
    bits set in both planes, and padding that is not trit 0.
    """
    if fmt == 2:
        plus = int(row[u])
        minus = int(row[half + u])
        valid = n - 8 * u
        pad = 0
        if valid < 8:
            pad = 255 ^ ((1 << max(valid, 0)) - 1)
        return (plus & minus) == 0 and ((plus | minus) & pad) == 0
    b = int(row[u])
    if fmt == 0:
        for k in range(4):
            c = (b >> (2 * k)) & 3
            if c == 3 or (4 * u + k >= n and c != 1):
                return False
        return True
    v = b
    q = 0
    for k in range(5):
        c = (v * 3) >> 8
        v = (v * 3) & 255
        if 5 * u + k >= n and c != 1:
            return False
        q = q * 3 + c
    return (q * 256 + 242) // 243 == b


def byte_rows(data: Any, fmt: Format) -> tuple[Any, int]:
    """Packed ``(rows, ...)`` data as ``(rows, nbytes)`` uint8 and the minus-plane offset.

    Works on NumPy and numba device arrays alike (both are C-contiguous here).
    """
    if fmt.planes == 2:
        rows, _, nw = data.shape
        return data.reshape(rows, 2 * nw).view(np.uint8), 8 * nw
    return data, 0


# ------------------------------------------------------------- whole rows, in NumPy
_SHIFT2 = np.array([0, 2, 4, 6], dtype=np.uint8)
_POW3 = np.array([81, 27, 9, 3, 1], dtype=np.int32)  # digit 0 is the most significant
_BITS = np.arange(64, dtype=np.uint64)


def _padded_codes(a: np.ndarray, fmt: Format) -> np.ndarray:
    """Codes ``t + 1`` as ``(rows, units, per_unit)`` uint8, padded with code 1 (trit 0)."""
    rows, n = a.shape
    units = fmt.units(n)
    codes = np.ones((rows, units * fmt.per_unit), dtype=np.uint8)
    codes[:, :n] = a + 1
    return codes.reshape(rows, units, fmt.per_unit)


def encode(a: np.ndarray, fmt: Format) -> np.ndarray:
    """Trit rows ``(rows, n)`` (valid) as packed ``fmt`` rows."""
    codes = _padded_codes(a, fmt)
    if fmt.name == "2bit":
        return np.bitwise_or.reduce(codes << _SHIFT2, axis=-1)
    if fmt.name == "base3":
        q = codes.astype(np.int32) @ _POW3
        return ((q * 256 + 242) // 243).astype(np.uint8)
    plus = ((codes == 2).astype(np.uint64) << _BITS).sum(axis=-1, dtype=np.uint64)
    minus = ((codes == 0).astype(np.uint64) << _BITS).sum(axis=-1, dtype=np.uint64)
    return np.stack([plus, minus], axis=1)


def decode(data: np.ndarray, fmt: Format, n: int) -> tuple[np.ndarray, np.ndarray]:
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


BAD_UNIT_WINDOW_TRITS = 1 << 16  # trits decoded at a time by bad_unit


def bad_unit(data: np.ndarray, fmt: Format, n: int) -> tuple[int, int] | None:
    """``(row, unit)`` of the first corrupt unit of packed rows, or None.

    Decodes a window of ``BAD_UNIT_WINDOW_TRITS`` trits of one row at a time
    (units are checked on their own; padding by their place in the row): the
    memory it takes is bounded by the window, not by the row.
    """
    data = np.asarray(data)
    units = data.shape[-1]
    step = max(1, BAD_UNIT_WINDOW_TRITS // fmt.per_unit)
    for r in range(data.shape[0]):
        for u0 in range(0, units, step):
            _, ok = decode(data[r:r + 1, ..., u0:u0 + step], fmt, max(0, n - u0 * fmt.per_unit))
            bad = np.flatnonzero(~ok[0])
            if bad.size:
                return r, u0 + int(bad[0])
    return None
