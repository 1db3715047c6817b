"""CPU VSA kernels: serial ``nogil`` loops over tasks, spread over threads by :mod:`._parallel`.

Dense hypervectors are int8 rows; "bitplane" rows are ``(2, nw)`` uint64 words
and are worked on a word (64 trits) at a time: AND/OR/XOR for binding,
``llvm.ctpop`` for similarity, carry-save (Harley-Seal) bit-sliced counters for
bundling. The arithmetic is :mod:`..shared.vsa`, shared with the CUDA kernels.
Search has its own module, :mod:`.vsa_search`.
"""

from __future__ import annotations

import numpy as np

from ..._dispatch import register
from ..._isa import LEVEL
from ..shared import vsa as hv
from ._jit import jit
from ._llvm.bundle import make_count_bits
from ._llvm.popcount import popcount
from ._parallel import run

# Internal API: the private names other modules use (tests/test_architecture_seams.py):
# cpu/compress.py draws its random signs with the hypervectors' generator.
_INTERNAL_API = ("_draw",)

CHUNK = 4096  # int8 columns per bundle task
# words per bit-sliced bundle task: 4 AVX-512 registers, or 2 AVX2 ones (of the 16 there are)
WORDS = (4 if LEVEL.vector_bytes == 64 else 2) * LEVEL.vector_bytes // 8
SUM_COLUMNS = 1024  # int8 columns per class-sum task (classes x 4 KB of int32 sums)


@jit(inline="always")
def popc(x):
    return np.int64(popcount(x))


_fmix = jit(inline="always")(hv.fmix64)
_row_key = jit(inline="always")(hv.specialize(hv.row_key, fmix64=_fmix))
_draw = jit(inline="always")(hv.specialize(hv.draw, fmix64=_fmix))
_trit_of = jit(inline="always")(hv.trit_of)
_random_word = jit(inline="always")(hv.specialize(hv.random_word, draw=_draw))
_takes_other = jit(inline="always")(hv.takes_other)
_mixed_trit = jit(inline="always")(hv.specialize(hv.mixed_trit, draw=_draw, trit_of=_trit_of,
                                                 takes_other=_takes_other))
_op_trits = jit(inline="always")(hv.op_trits)
_op_words = jit(inline="always")(hv.op_words)
_score = jit(inline="always")(hv.score)
_pair_words = jit(inline="always")(hv.specialize(hv.pair_words, popc=popc, score=_score))
_pair_trits = jit(inline="always")(hv.specialize(hv.pair_trits, score=_score))
_bits_at = jit(inline="always")(hv.bits_at)
_rolled_word = jit(inline="always")(hv.specialize(hv.rolled_word, bits_at=_bits_at))
_majority_word = jit(inline="always")(hv.majority_word)
_count_bits = make_count_bits(WORDS)


# ------------------------------------------------------------------------ random
@jit()
def _random_dense(row0, key, thr, out, t0, t1):
    d = out.shape[1]
    for r in range(t0, t1):
        rk = _row_key(key, row0 + r)
        row = out[r]
        for j in range(d):
            row[j] = _trit_of(_draw(rk, j), thr)
    return 0


@jit()
def _random_planes(row0, d, key, thr, out, t0, t1):
    nw = out.shape[2]
    for r in range(t0, t1):
        rk = _row_key(key, row0 + r)
        for w in range(nw):
            out[r, 0, w], out[r, 1, w] = _random_word(rk, w, min(64, d - 64 * w), thr)
    return 0


@register("vsa.random", "cpu")
def random(row0: int, n: int, d: int, key: int, thr: int, packed: bool) -> np.ndarray:
    k, t = np.uint64(key), np.uint64(thr)
    if packed:
        out = np.empty((n, 2, -(-d // 64)), np.uint64)
        run(_random_planes, n, 2 * n * d, row0, d, k, t, out)
    else:
        out = np.empty((n, d), np.int8)
        run(_random_dense, n, 8 * n * d, row0, k, t, out)
    return out


# ------------------------------------------------------------------ level/circular
@jit()
def _mixed_dense(key, thr, circle, out, t0, t1):
    n, d = out.shape
    k0 = _row_key(key, 0)
    k1 = _row_key(key, 1)
    k2 = _row_key(key, 2)
    for i in range(t0, t1):
        row = out[i]
        for j in range(d):
            row[j] = _mixed_trit(k0, k1, k2, i, j, n, circle, thr)
    return 0


@register("vsa.mixed", "cpu")
def mixed(n: int, d: int, key: int, thr: int, circle: bool) -> np.ndarray:
    out = np.empty((n, d), np.int8)
    run(_mixed_dense, n, 16 * n * d, np.uint64(key), np.uint64(thr), bool(circle), out)
    return out


# ------------------------------------------------------------------------- check
@jit()
def _check(rows, t0, t1):
    bad = 0
    for r in range(t0, t1):
        row = rows[r]
        ok = True
        for j in range(row.shape[0]):
            v = row[j]
            ok &= (v >= -1) & (v <= 1)
        bad += not ok
    return bad


@register("vsa.check", "cpu")
def check(rows: np.ndarray) -> bool:
    return run(_check, rows.shape[0], rows.nbytes, rows) == 0


# ---------------------------------------------------------------- bind and co.
@jit(inline="always")
def _op_row(x, y, o, op):
    """``o = op(x, y)``; returns whether every ``x`` and ``y`` was a trit."""
    ok = True
    for j in range(o.shape[0]):
        u = x[j]
        v = y[j]
        ok &= (u >= -1) & (u <= 1) & (v >= -1) & (v <= 1)
        o[j] = _op_trits(u, v, op)
    return ok


@jit()
def _op_dense(a, b, ia, ib, op, out, t0, t1):
    """Rows ``out[t] = op(a[ia[t]], b[ib[t]])`` and the count of rows meeting a non-trit.

    ``op`` is a constant in each loop (it vectorizes) and the inputs are checked
    as they are read (one pass over them instead of a check pass and this one).
    """
    bad = 0
    for t in range(t0, t1):
        x = a[ia[t]]
        y = b[ib[t]]
        o = out[t]
        if op == hv.MUL:
            ok = _op_row(x, y, o, hv.MUL)
        elif op == hv.NEG:
            ok = _op_row(x, y, o, hv.NEG)
        elif op == hv.SUB3:
            ok = _op_row(x, y, o, hv.SUB3)
        else:
            ok = _op_row(x, y, o, hv.ADD3)
        bad += not ok
    return bad


@jit()
def _op_planes(a, b, ia, ib, op, out, t0, t1):
    nw = out.shape[2]
    for t in range(t0, t1):
        x = a[ia[t]]
        y = b[ib[t]]
        o = out[t]
        for w in range(nw):
            o[0, w], o[1, w] = _op_words(x[0, w], x[1, w], y[0, w], y[1, w], op)
    return 0


@register("vsa.op", "cpu")
def op(a, b, ia, ib, code: int, packed: bool, d: int) -> tuple[np.ndarray, bool]:
    out = np.empty((len(ia), *a.shape[1:]), a.dtype)
    if not out.size:
        return out, packed or (check(a) and check(b))  # rows that nothing reads: checked here
    kernel = _op_planes if packed else _op_dense
    return out, run(kernel, len(ia), 3 * out.nbytes, a, b, ia, ib, code, out, light=True) == 0


# ------------------------------------------------------------------------ bundle
@jit()
def _bundle_weighted(vs, weights, out, t0, t1):
    n, _, d = vs.shape
    chunks = (d + CHUNK - 1) // CHUNK
    acc = np.zeros(CHUNK, weights.dtype)
    for t in range(t0, t1):
        r = t // chunks
        lo = (t % chunks) * CHUNK
        width = min(CHUNK, d - lo)
        acc[:width] = 0
        for i in range(n):
            v = vs[i, r, lo:lo + width]
            w = weights[i]
            for j in range(width):
                acc[j] += w * v[j]
        o = out[r, lo:lo + width]
        for j in range(width):
            o[j] = (acc[j] > 0) - (acc[j] < 0)
    return 0


@jit()
def _bundle_planes(vs, top, out, t0, t1):
    """Majority of bit-plane rows ``vs`` (C-contiguous), a block of ``WORDS`` columns a task.

    Each plane's set bits are counted bit-sliced (:func:`_count_bits`, ``top``
    bits), then compared word by word.
    """
    n, rows, _, nw = vs.shape
    blocks = (nw + WORDS - 1) // WORDS
    cnt = np.empty((2, top, WORDS), np.uint64)
    for t in range(t0, t1):
        r = t // blocks
        w0 = (t % blocks) * WORDS
        cw = min(WORDS, nw - w0)
        for p in range(2):
            _count_bits(vs, (2 * r + p) * nw + w0, 2 * rows * nw, n, cw, cnt[p], top)
        for w in range(cw):
            out[r, 0, w0 + w], out[r, 1, w0 + w] = _majority_word(cnt, w, top)
    return 0


@register("vsa.bundle", "cpu")
def bundle(vs, weights, packed: bool, d: int) -> np.ndarray:
    n, rows = vs.shape[:2]
    out = np.empty(vs.shape[1:], vs.dtype)
    if out.size == 0:
        return out
    if packed:
        nw = vs.shape[3]
        top = max(4, int(n).bit_length())
        run(_bundle_planes, rows * -(-nw // WORDS), vs.nbytes, np.ascontiguousarray(vs), top,
            out)
    else:
        if weights is None:  # one vote each, counted without wrapping, no n-sized array
            weights = np.broadcast_to(np.ones(1, hv.votes_dtype(n)), (n,))
        run(_bundle_weighted, rows * -(-d // CHUNK), vs.nbytes, vs, weights, out)
    return out


# ------------------------------------------------------------------- class sums
@jit()
def _class_sums(rows, labels, out, t0, t1):
    """Columns ``[SUM_COLUMNS t, ...)`` of the class sums, every row read once per task."""
    n, d = rows.shape
    for t in range(t0, t1):
        lo = t * SUM_COLUMNS
        width = min(SUM_COLUMNS, d - lo)
        for i in range(n):
            x = rows[i, lo:lo + width]
            o = out[labels[i], lo:lo + width]
            for j in range(width):
                o[j] += x[j]
    return 0


@register("vsa.class_sums", "cpu")
def class_sums(rows, labels, classes: int) -> np.ndarray:
    n, d = rows.shape
    out = np.zeros((classes, d), hv.votes_dtype(n))  # int32 lanes while they cannot wrap
    if out.size and n:
        run(_class_sums, -(-d // SUM_COLUMNS), rows.nbytes, rows, labels, out)
    return out.astype(np.int64, copy=False)


# ----------------------------------------------------------------------- permute
@jit()
def _permute_dense(rows, shifts, out, t0, t1):
    d = out.shape[1]
    for r in range(t0, t1):
        s = shifts[r]
        src = rows[r]
        dst = out[r]
        dst[s:] = src[:d - s]
        dst[:s] = src[d - s:]
    return 0


@jit()
def _permute_planes(rows, shifts, d, out, t0, t1):
    nw = out.shape[2]
    for r in range(t0, t1):
        s = shifts[r]
        for p in range(2):
            src = rows[r, p]
            for k in range(nw):
                out[r, p, k] = _rolled_word(src, k, s, d)
    return 0


@register("vsa.permute", "cpu")
def permute(rows, shifts, packed: bool, d: int) -> np.ndarray:
    out = np.empty_like(rows)
    if out.size:
        if packed:
            run(_permute_planes, len(rows), 2 * rows.nbytes, rows, shifts, d, out)
        else:
            run(_permute_dense, len(rows), 2 * rows.nbytes, rows, shifts, out)
    return out


# -------------------------------------------------------------- similarity/search
@jit()
def _pairs_dense(a, b, ia, ib, metric, d, out, t0, t1):
    for t in range(t0, t1):
        out[t] = _pair_trits(a[ia[t]], b[ib[t]], metric, d)
    return 0


@jit()
def _pairs_planes(a, b, ia, ib, metric, d, out, t0, t1):
    for t in range(t0, t1):
        out[t] = _pair_words(a[ia[t]], b[ib[t]], metric, d)
    return 0


@register("vsa.similarity", "cpu")
def similarity(a, b, ia, ib, metric: int, packed: bool, d: int) -> np.ndarray:
    out = np.empty(len(ia), np.int64 if metric == hv.DOT else np.float64)  # exact dots
    if len(ia):
        kernel = _pairs_planes if packed else _pairs_dense
        run(kernel, len(ia), len(ia) * a[0].nbytes, a, b, ia, ib, metric, d, out)
    return out


for _op in ("level_indices", "class_scores", "axis_first", "concat"):  # NumPy is their kernel
    register(f"vsa.{_op}", "cpu")(getattr(hv, _op))
