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
from ..shared import vsa as hv
from ..shared.select import topk_blocks
from ..shared.vsa import hashes, random_trits, to_planes, to_trits


def _dense(rows: np.ndarray, packed: bool, d: int) -> np.ndarray:
    return to_trits(rows, d) if packed else rows


def _out(trits: np.ndarray, packed: bool) -> np.ndarray:
    trits = trits.astype(np.int8)
    return to_planes(trits) if packed else trits


@register("vsa.random", "numpy")
def random(row0: int, n: int, d: int, key: int, thr: int, packed: bool) -> np.ndarray:
    return _out(random_trits(row0, n, d, key, thr), packed)


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
def op(a, b, ia, ib, code: int, packed: bool, d: int) -> tuple[np.ndarray, bool]:
    """The elementwise ``code`` of row pairs, and whether every dense input was a trit."""
    ok = packed or (check(a) and check(b))
    x = _dense(a, packed, d)[ia]
    y = _dense(b, packed, d)[ib]
    return _out(op_dense(x, y, code), packed), ok


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


@register("vsa.class_sums", "numpy")
def class_sums(rows, labels, classes: int) -> np.ndarray:
    """``out[c]``: the sum of the int8 rows labelled ``c`` (int64 ``(classes, d)``)."""
    out = np.zeros((classes, rows.shape[1]), np.int64)
    np.add.at(out, labels, rows)
    return out


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
    norm = (x != 0).sum(axis=1).astype(np.float64) * (y != 0).sum(axis=1)
    out = np.zeros(len(x))
    nz = norm > 0
    out[nz] = dot[nz] / np.sqrt(norm[nz].astype(np.float64))
    return out


@register("vsa.similarity", "numpy")
def similarity(a, b, ia, ib, metric: int, packed: bool, d: int) -> np.ndarray:
    s = scores(_dense(a, packed, d)[ia], _dense(b, packed, d)[ib], metric, d)
    return s.astype(np.int64) if metric == hv.DOT else s


@register("vsa.search", "numpy")
def search(queries, memory, k: int, metric: int, packed: bool, d: int):
    x = _dense(queries, packed, d)
    y = _dense(memory, packed, d)
    q, m = len(x), len(y)
    return topk_blocks(lambda q0, q1: scores(np.repeat(x[q0:q1], m, axis=0),
                                             np.tile(y, (q1 - q0, 1)), metric, d
                                             ).reshape(q1 - q0, m), q, m, k)


for _op in ("level_indices", "class_scores", "axis_first", "concat"):  # NumPy is their kernel
    register(f"vsa.{_op}", "numpy")(getattr(hv, _op))
