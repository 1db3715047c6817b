"""VSA code shared by the NumPy, CPU and CUDA backends and the public layer.

- Hypervector arithmetic: plain Python functions on NumPy scalars (or arrays),
  compiled by ``numba.njit`` in :mod:`..cpu.vsa` and by
  ``numba.cuda.jit(device=True)`` in :mod:`..cuda.vsa_device`, so every backend draws
  the same random trits and combines the same bit planes. Functions that count
  bits call ``popc``, a global each backend binds to its own popcount with
  :func:`specialize`.
- The generator over whole rows in NumPy (:func:`hashes`, :func:`random_trits`)
  and the dense/bitplane conversions (:func:`to_trits`, :func:`to_planes`), for
  the reference backend and for the vectors the public layer builds on the host.

The generator is counter based: the trit at ``(seed, row, column)`` is a hash
of those three numbers (the murmur3 64-bit finalizer, a bijection, applied
once per row key and once per element), so it does not depend on the device,
the chunking or the order of the calls. Its top 32 bits against a threshold
decide zero or not, its lowest bit the sign.
"""

from __future__ import annotations

import math
import types

import numpy as np

from ..._formats import FORMATS
from .packing import decode, encode

# Internal API: the private names other modules use (tests/test_architecture_seams.py):
# vsa/generation.py and the bench (_bench/compress.py) read the hash's multipliers.
_INTERNAL_API = ("_M1", "_M2")

GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # row stride of the row keys
COLUMN = np.uint64(0xD1B54A32D192ED03)  # column stride within a row
_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
_S32 = np.uint64(32)
_ONE = np.uint64(1)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)

# metric codes
DOT, COSINE, HAMMING = 0, 1, 2
METRICS = {"dot": DOT, "cosine": COSINE, "hamming": HAMMING}
# elementwise operation codes
MUL, SUB3, ADD3, NEG = 0, 1, 2, 3


def popc(x):  # pragma: no cover - replaced by each backend (see specialize)
    raise NotImplementedError


def specialize(fn, **names):
    """A copy of ``fn`` whose globals ``names`` are replaced (e.g. ``popc``)."""
    return types.FunctionType(fn.__code__, {**fn.__globals__, **names}, fn.__name__,
                              fn.__defaults__, fn.__closure__)


def fmix64(x):
    """murmur3's 64-bit finalizer: a bijection that mixes every input bit into every output bit."""
    x = x ^ (x >> _S33)
    x = x * _M1
    x = x ^ (x >> _S33)
    x = x * _M2
    return x ^ (x >> _S33)


def row_key(key, row):
    """The hash key of one row (``key`` from the seed, ``row`` >= 0)."""
    return fmix64(key + np.uint64(row) * GOLDEN)


def draw(rkey, col):
    """The 64-bit hash of element ``col`` of the row with key ``rkey``."""
    return fmix64(rkey + np.uint64(col) * COLUMN)


def trit_of(h, thr):
    """The trit of hash ``h``: non-zero when its top 32 bits are below ``thr``, sign from bit 0."""
    nz = np.int64((h >> _S32) < thr)
    return nz * (2 * np.int64(h & _ONE) - 1)


def random_word(rkey, w, count, thr):
    """Plus and minus words of columns ``64 w .. 64 w + count`` (``count`` <= 64) of a row."""
    plus = np.uint64(0)
    minus = np.uint64(0)
    base = 64 * w
    for b in range(count):
        h = draw(rkey, base + b)
        nz = (h >> _S32) < thr
        bit = np.uint64(nz) << np.uint64(b)
        if h & _ONE:
            plus |= bit
        else:
            minus |= bit
    return plus, minus


def takes_other(u, i, n, circle):
    """Whether row ``i`` of ``n`` level (``circle``: circular) rows takes a column from row 1.

    ``u`` is the column's uniform 32-bit number (int64). Level row ``i`` takes the
    share ``i / (n - 1)`` of the columns; a circular row takes ``2 i / n`` of them on
    the way out and gives them back on the way round. Only the branch taken is
    evaluated, so int64 cannot overflow for ``n < 2**31``.
    """
    if circle:
        if 2 * i < n:
            return u * n < (2 * i) << 32
        return u * n >= (2 * i - n) << 32
    return u * max(n - 1, 1) < i << 32


def mixed_trit(k0, k1, k2, i, j, n, circle, thr):
    """Trit ``(i, j)`` of ``n`` level or circular rows (see :func:`takes_other`).

    Column ``j`` of generator row 1 (row key ``k1``) where row ``i`` takes it, else
    of row 0 (``k0``); row 2 (``k2``) gives the per-column uniform numbers.
    """
    u = np.int64(draw(k2, j) >> _S32)
    return trit_of(draw(k1 if takes_other(u, i, n, circle) else k0, j), thr)


def op_trits(x, y, op):
    """The elementwise operation ``op`` on two trits (int)."""
    if op == MUL:
        return x * y
    if op == NEG:
        return -x
    v = x - y if op == SUB3 else x + y  # in [-2, 2]: fold into {-1, 0, 1} mod 3
    return v - 3 * (v > 1) + 3 * (v < -1)


def op_words(ap, am, bp, bm, op):
    """The elementwise operation ``op`` on one word of two bit-plane rows: (plus, minus)."""
    if op == MUL:
        return (ap & bp) | (am & bm), (ap & bm) | (am & bp)
    if op == NEG:
        return am, ap
    if op == ADD3:  # a + b = a - (-b)
        bp, bm = bm, bp
    az = ~(ap | am)
    bz = ~(bp | bm)
    # a - b mod 3: +1 from (1, 0), (0, -1), (-1, 1); -1 from (1, -1), (0, 1), (-1, 0)
    return (ap & bz) | (az & bm) | (am & bp), (ap & bm) | (az & bp) | (am & bz)


def votes_dtype(n):
    """The integer type that counts ``n`` unit votes without wrapping (int32 while it can)."""
    return np.int32 if n < 2**31 else np.int64


def score(metric, dot, na, nb, eq, d):
    """The similarity ``metric`` from the counts of a pair (float64)."""
    if metric == DOT:
        return np.float64(dot)
    if metric == COSINE:
        if na == 0 or nb == 0:
            return np.float64(0.0)
        return np.float64(dot) / math.sqrt(np.float64(na) * np.float64(nb))  # no int64 overflow
    if d == 0:
        return np.float64(1.0)
    return np.float64(eq) / np.float64(d)


def pair_words(a, b, metric, d):
    """Similarity of two bit-plane rows ``(2, nw)`` with word-parallel popcounts."""
    nw = a.shape[1]
    pos = 0
    neg = 0
    na = 0
    nb = 0
    diff = 0
    if metric == HAMMING:
        for w in range(nw):
            diff += popc((a[0, w] ^ b[0, w]) | (a[1, w] ^ b[1, w]))
        return score(metric, 0, 0, 0, d - diff, d)
    for w in range(nw):
        ap = a[0, w]
        am = a[1, w]
        bp = b[0, w]
        bm = b[1, w]
        pos += popc((ap & bp) | (am & bm))
        neg += popc((ap & bm) | (am & bp))
    if metric == COSINE:
        for w in range(nw):
            na += popc(a[0, w] | a[1, w])
            nb += popc(b[0, w] | b[1, w])
    return score(metric, pos - neg, na, nb, 0, d)


def pair_trits(x, y, metric, d):
    """Similarity of two dense int8 rows."""
    if metric == HAMMING:
        eq = 0
        for j in range(d):
            eq += x[j] == y[j]
        return score(metric, 0, 0, 0, eq, d)
    dot = 0
    na = 0
    nb = 0
    for j in range(d):
        dot += np.int64(x[j]) * np.int64(y[j])
    if metric == COSINE:
        for j in range(d):
            na += x[j] != 0
            nb += y[j] != 0
    return score(metric, dot, na, nb, 0, d)


def bits_at(words, p, count):
    """``count`` (1..64) bits of a plane row from bit ``p`` on (``p + count`` within the row)."""
    w = p >> 6
    off = p & 63
    x = words[w] >> np.uint64(off)
    if off != 0 and off + count > 64:
        x |= words[w + 1] << np.uint64(64 - off)
    if count < 64:
        x &= (_ONE << np.uint64(count)) - _ONE
    return x


def rolled_word(words, k, shift, d):
    """Word ``k`` of a plane row of ``d`` bits rolled right by ``shift`` (0 <= shift < d)."""
    j0 = 64 * k
    c = min(64, d - j0)
    p = j0 - shift
    if p < 0:
        p += d
    first = min(c, d - p)
    x = bits_at(words, p, first)
    if first < c:
        x |= bits_at(words, 0, c - first) << np.uint64(first)
    return x


def majority_word(cnt, w, top):
    """Plus and minus words where the bit-sliced plus count beats the minus count.

    ``cnt[p, k, w]`` is bit ``k`` of the count of plane ``p`` at each bit lane.
    """
    gt = np.uint64(0)
    lt = np.uint64(0)
    eq = _ALL
    for k in range(top - 1, -1, -1):
        p = cnt[0, k, w]
        m = cnt[1, k, w]
        gt |= eq & p & ~m
        lt |= eq & m & ~p
        eq &= ~(p ^ m)
    return gt, lt


# ------------------------------------------------------------- whole rows, in NumPy
_BP = FORMATS["bitplane"]


def hashes(row0: int, n: int, d: int, key: int) -> np.ndarray:
    """The 64-bit hashes of rows ``row0 .. row0 + n`` and columns ``0 .. d``."""
    rows = np.arange(row0, row0 + n, dtype=np.uint64)
    rkeys = fmix64(np.uint64(key) + rows * GOLDEN)
    return fmix64(rkeys[:, None] + np.arange(d, dtype=np.uint64) * COLUMN)


def random_trits(row0: int, n: int, d: int, key: int, thr: int) -> np.ndarray:
    """Rows ``row0 .. row0 + n`` of the generator as int8 ``(n, d)`` (see :func:`trit_of`)."""
    h = hashes(row0, n, d, key)
    nonzero = (h >> np.uint64(32)) < np.uint64(thr)
    sign = np.where(h & np.uint64(1), 1, -1)
    return np.where(nonzero, sign, 0).astype(np.int8)


def to_trits(rows: np.ndarray, d: int) -> np.ndarray:
    """Bit-plane rows ``(rows, 2, nw)`` as int8 ``(rows, d)``."""
    codes, _ = decode(rows, _BP, d)
    return (codes[:, :d].astype(np.int8) - 1).astype(np.int8)


def to_planes(trits: np.ndarray) -> np.ndarray:
    """int8 rows as bit-plane rows."""
    return encode(trits, _BP)


# ------------------------------------------- levels, class scores and row layout
def level_of(v, lo, hi, top):
    """The level of value ``v`` from ``lo`` to ``hi`` of levels ``0 .. top``; -1 for NaN.

    ``rint((v - lo) / (hi - lo) * top)`` (half to even) clipped to ``[0, top]``,
    computed as :func:`level_indices` computes it, for the kernels that go element
    by element.
    """
    x = (np.float64(v) - lo) / (hi - lo) * np.float64(top)
    if x != x:
        return np.int64(-1)
    x = min(max(x, np.float64(0.0)), np.float64(top))
    f = np.int64(x)  # x >= 0: truncation is the floor
    rest = x - np.float64(f)
    if rest > 0.5 or (rest == 0.5 and f % 2 == 1):
        f += 1
    return f


def level_indices(values: np.ndarray, lo: np.ndarray | None, hi: np.ndarray | None,
                  n_levels: int) -> tuple[np.ndarray, bool]:
    """Flat ``values`` as int64 level indices, and whether all of them map to a level.

    With bounds, element ``i`` maps through ``lo[i % len(lo)]``, ``hi[i % len(hi)]``
    (see :func:`level_of`; a NaN maps to none). Without (``lo`` None), the values are
    integer indices, each to lie in ``[0, n_levels)``.
    """
    if lo is None or hi is None:
        ok = not values.size or (values.min() >= 0 and values.max() < n_levels)
        return values.astype(np.int64), bool(ok)
    if not values.size:
        return np.empty(0, np.int64), True
    v = values.astype(np.float64).reshape(-1, len(lo))
    position = np.rint((v - lo) / (hi - lo) * (n_levels - 1))
    if np.isnan(position).any():
        return np.empty(0, np.int64), False
    return np.clip(position, 0, n_levels - 1).astype(np.int64).reshape(-1), True


def class_scores(rows: np.ndarray, sums: np.ndarray, norms: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``rows @ sums.T / norms`` (float64 ``(n, classes)``) and the first best class per row.

    ``rows`` are int8 ``(n, d)``, ``sums`` integer-valued float64 prototypes
    ``(classes, d)`` and ``norms`` their non-zero norms: every product and sum is an
    exact integer in float64, so each backend gives the same scores. At least one class.
    """
    scores = (rows.astype(np.float64) @ sums.T) / norms
    return scores, scores.argmax(axis=1).astype(np.int64, copy=False)


def axis_first(rows: np.ndarray) -> np.ndarray:
    """``(a, n, x)`` rows as C-contiguous ``(n, a, x)``: an axis of vectors brought first."""
    return np.ascontiguousarray(rows.transpose(1, 0, 2))


def concat(parts: tuple[np.ndarray, ...]) -> np.ndarray:
    """Blocks of rows, one after the other (a block alone is returned as it is)."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)
