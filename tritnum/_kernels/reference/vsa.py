"""NumPy reference VSA kernels: the obvious vectorized code, and the test oracle.

Bit-plane rows are unpacked to int8, computed on as dense trits and packed
again: the oracle for the word-parallel kernels of the other backends.
Kernels take rows (``(rows, d)`` int8, or ``(rows, 2, nw)`` uint64 when
``packed``) and the row indices ``ia``/``ib`` of each output pair (broadcasting
without copies).
"""

from __future__ import annotations

import numpy as np

from ..._dispatch import register
from ..._formats import FORMATS
from .. import hv
from .packing import _decode, _encode

_BP = FORMATS["bitplane"]


def to_trits(rows: np.ndarray, d: int) -> np.ndarray:
    """Bit-plane rows ``(rows, 2, nw)`` as int8 ``(rows, d)``."""
    codes, _ = _decode(rows, _BP, d)
    return (codes[:, :d].astype(np.int8) - 1).astype(np.int8)


def to_planes(trits: np.ndarray) -> np.ndarray:
    """int8 rows as bit-plane rows."""
    return _encode(trits, _BP)


def _dense(rows: np.ndarray, packed: bool, d: int) -> np.ndarray:
    return to_trits(rows, d) if packed else rows


def _out(trits: np.ndarray, packed: bool) -> np.ndarray:
    trits = trits.astype(np.int8)
    return to_planes(trits) if packed else trits


def hashes(row0: int, n: int, d: int, key: int) -> np.ndarray:
    """The 64-bit hashes of rows ``row0 .. row0 + n`` and columns ``0 .. d``."""
    rows = np.arange(row0, row0 + n, dtype=np.uint64)
    rkeys = hv.fmix64(np.uint64(key) + rows * hv.GOLDEN)
    return hv.fmix64(rkeys[:, None] + np.arange(d, dtype=np.uint64) * hv.COLUMN)


@register("vsa.random", "numpy")
def random(row0: int, n: int, d: int, key: int, thr: int, packed: bool) -> np.ndarray:
    h = hashes(row0, n, d, key)
    nonzero = (h >> np.uint64(32)) < np.uint64(thr)
    sign = np.where(h & np.uint64(1), 1, -1)
    return _out(np.where(nonzero, sign, 0), packed)


@register("vsa.mixed", "numpy")
def mixed(n: int, d: int, key: int, thr: int, circle: bool) -> np.ndarray:
    """``n`` level (or circular) int8 rows mixing generator rows 0 and 1 column by column.

    Row ``i`` takes column ``j`` from row 1 where its share of the columns says so
    (see ``hv.takes_other``), ``u_j`` the top 32 bits of the hash of ``(2, j)``.
    """
    base, other = random(0, 2, d, key, thr, False)
    u = (hashes(2, 1, d, key)[0] >> np.uint64(32)).astype(np.int64)[None, :]
    i = np.arange(n, dtype=np.int64)[:, None]
    if circle:
        take = np.where(2 * i < n, u * n < (2 * i) << 32, u * n >= (2 * i - n) << 32)
    else:
        take = u * max(n - 1, 1) < i << 32
    return np.where(take, other, base).astype(np.int8)


@register("vsa.check", "numpy")
def check(rows: np.ndarray) -> bool:
    return bool(((rows >= -1) & (rows <= 1)).all())


def op_dense(x: np.ndarray, y: np.ndarray, op: int) -> np.ndarray:
    """The elementwise operation on int8 arrays."""
    x = x.astype(np.int16)
    y = y.astype(np.int16)
    if op == hv.MUL:
        return x * y
    if op == hv.NEG:
        return -x
    v = x - y if op == hv.SUB3 else x + y
    return (v + 1) % 3 - 1


@register("vsa.op", "numpy")
def op(a, b, ia, ib, code: int, packed: bool, d: int) -> np.ndarray:
    x = _dense(a, packed, d)[ia]
    y = _dense(b, packed, d)[ib]
    return _out(op_dense(x, y, code), packed)


@register("vsa.bundle", "numpy")
def bundle(vs, weights, packed: bool, d: int) -> np.ndarray:
    """Majority of ``vs`` ``(n, rows, ...)`` over axis 0, summing in vector order."""
    n, rows = vs.shape[:2]
    dense = _dense(vs.reshape(n * rows, *vs.shape[2:]), packed, d).reshape(n, rows, d)
    if weights is None:
        total = dense.sum(axis=0, dtype=np.int64)
    else:
        total = np.zeros((rows, d), weights.dtype)
        for i in range(n):  # in order: float sums are the same on every backend
            total += weights[i] * dense[i]
    return _out(np.sign(total), packed)


@register("vsa.permute", "numpy")
def permute(rows, shifts, packed: bool, d: int) -> np.ndarray:
    dense = _dense(rows, packed, d)
    cols = (np.arange(d)[None, :] - shifts[:, None]) % max(d, 1)
    return _out(np.take_along_axis(dense, cols, axis=1), packed)


def scores(x: np.ndarray, y: np.ndarray, metric: int, d: int) -> np.ndarray:
    """The metric of pairs of int8 rows ``x[i]``, ``y[i]`` (float64)."""
    if metric == hv.HAMMING:
        if d == 0:
            return np.ones(len(x))
        return (x == y).sum(axis=1) / np.float64(d)
    dot = (x.astype(np.int64) * y).sum(axis=1).astype(np.float64)
    if metric == hv.DOT:
        return dot
    norm = (x != 0).sum(axis=1) * (y != 0).sum(axis=1)
    out = np.zeros(len(x))
    nz = norm > 0
    out[nz] = dot[nz] / np.sqrt(norm[nz].astype(np.float64))
    return out


@register("vsa.similarity", "numpy")
def similarity(a, b, ia, ib, metric: int, packed: bool, d: int) -> np.ndarray:
    return scores(_dense(a, packed, d)[ia], _dense(b, packed, d)[ib], metric, d)


def topk(s: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices and values of the ``k`` largest scores of each row, ties to the lower index."""
    q, m = s.shape
    if k == 1:  # one pass: argmax returns the first, lowest-index maximum (scores are never NaN)
        idx = np.argmax(s, axis=1)[:, None]
    elif k >= m:
        idx = np.argsort(-s, axis=1, kind="stable")
    else:
        part = np.argpartition(-s, k - 1, axis=1)[:, :k]
        kth = np.take_along_axis(s, part, axis=1).min(axis=1, keepdims=True)
        above = s > kth
        equal = s == kth
        room = k - above.sum(axis=1, keepdims=True)
        keep = above | (equal & (np.cumsum(equal, axis=1) <= room))
        idx = np.nonzero(keep)[1].reshape(q, k)  # k per row, in index order
        order = np.argsort(-np.take_along_axis(s, idx, axis=1), axis=1, kind="stable")
        idx = np.take_along_axis(idx, order, axis=1)
    return idx.astype(np.int64), np.take_along_axis(s, idx, axis=1)


@register("vsa.search", "numpy")
def search(queries, memory, k: int, metric: int, packed: bool, d: int):
    x = _dense(queries, packed, d)
    y = _dense(memory, packed, d)
    q, m = len(x), len(y)
    s = scores(np.repeat(x, m, axis=0), np.tile(y, (q, 1)), metric, d).reshape(q, m)
    return topk(s, k)
