"""Random ternary projection sketches, shared by the NumPy, CPU and CUDA backends.

The projection ``P`` (``m`` rows, ``n`` columns) has one non-zero per column: column
``j`` holds ``sign(j)`` at row ``j mod m``. ``sign(j)`` is +1 where bit ``j & 63`` of
the generator's hash ``draw(key, j >> 6)`` is set, else -1 (one 64-bit hash gives the
signs of 64 consecutive columns). Bucket ``i`` of the sketch ``s = P x`` is the signed
sum of the elements ``i, i + m, i + 2 m, ...``, added in that order in float64 and
rounded to float32 once, so every backend gives the same bits. It holds ``r`` elements
(``r = ceil(n / m)``) for ``i < full = n - (r - 1) m`` and ``r - 1`` after.

:func:`signed`, :func:`sizes` and :func:`members` are compiled by ``numba.njit`` in
:mod:`..cpu.compress` and by ``numba.cuda.jit(device=True)`` in :mod:`..cuda.compress`;
:func:`signs` and :func:`projected` are NumPy code over whole vectors.
"""

from __future__ import annotations

import numpy as np

from .vsa import draw

_ONE = np.uint64(1)
_SIX = np.uint64(6)
_LOW = np.uint64(63)


def signed(v, word, j):
    """``v`` with the sign of column ``j``, ``word`` the hash of its 64 columns (``j >> 6``)."""
    return v if (word >> (np.uint64(j) & _LOW)) & _ONE else -v


def sizes(n, m):
    """``(r, full)`` of ``n`` elements in ``m`` >= 1 buckets: buckets below ``full`` hold ``r``."""
    r = (n + m - 1) // m
    return r, n - (r - 1) * m


def members(i, r, full):
    """Elements in bucket ``i`` (``r``, ``full`` from :func:`sizes`)."""
    return r - (i >= full)


# ------------------------------------------------------------- whole vectors, in NumPy
def signs(n: int, key: int) -> np.ndarray:
    """float32 signs (+1 or -1) of columns ``0 .. n`` of the projection keyed ``key``."""
    j = np.arange(n, dtype=np.uint64)
    words = draw(np.uint64(key), np.arange(-(-n // 64), dtype=np.uint64))
    bits = (words[j >> _SIX] >> (j & _LOW)) & _ONE
    return np.where(bits == _ONE, np.float32(1), np.float32(-1))


def projected(s: np.ndarray, n: int) -> np.ndarray:
    """Bucket values ``s`` (float32) each divided by its number of elements, in float32."""
    r, full = sizes(n, s.shape[0])
    out = s / np.float32(r)
    out[full:] = s[full:] / np.float32(r - 1)  # empty when r == 1
    return out
