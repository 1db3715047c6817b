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
from ._llvm.packing import copy_trits
from ._llvm.popcount import popcount
from ._parallel import MIN_PARALLEL_BYTES_LIGHT, run

# Internal API: the private names other modules use (tests/test_architecture_seams.py):
# cpu/compress.py draws its random signs with the hypervectors' generator.
_INTERNAL_API = ("_draw",)

CHUNK = 4096  # int8 columns per bundle task
# words per bit-sliced bundle task: 4 AVX-512 registers, or 2 AVX2 ones (of the 16 there are)
WORDS = (4 if LEVEL.vector_bytes == 64 else 2) * LEVEL.vector_bytes // 8
SUM_COLUMNS = 1024  # int8 columns per class-sum task (classes x 4 KB of int32 sums)
# bit-plane rows up to this many words per plane are rolled a word at a time (faster than
# vectorized loops, whose set-up dominates short rows: 7.5 against 10-14 us for 1000 x 4 words)
ROLL_WORDS = 8


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


@jit(inline="always")
def _op_dense_row(x, y, o, op):
    """:func:`_op_row` with ``op`` a constant in each loop (it vectorizes)."""
    if op == hv.MUL:
        return _op_row(x, y, o, hv.MUL)
    if op == hv.NEG:
        return _op_row(x, y, o, hv.NEG)
    if op == hv.SUB3:
        return _op_row(x, y, o, hv.SUB3)
    return _op_row(x, y, o, hv.ADD3)


@jit()
def _op_dense(a, b, ia, ib, op, out, t0, t1):
    """Rows ``out[t] = op(a[ia[t]], b[ib[t]])`` and the count of rows meeting a non-trit.

    The inputs are checked as they are read (one pass over them instead of a
    check pass and this one).
    """
    bad = 0
    for t in range(t0, t1):
        bad += not _op_dense_row(a[ia[t]], b[ib[t]], out[t], op)
    return bad


@jit(inline="always")
def _op_words_rows(a, b, ia, ib, op, out, t0, t1, in_order):
    for t in range(t0, t1):
        i, j = (t, t) if in_order else (ia[t], ib[t])  # in_order: a constant
        for w in range(out.shape[2]):
            out[t, 0, w], out[t, 1, w] = _op_words(a[i, 0, w], a[i, 1, w], b[j, 0, w],
                                                   b[j, 1, w], op)


@jit(inline="always")
def _op_planes_rows(a, b, ia, ib, op, out, t0, t1, in_order=False):
    """Rows ``out[t] = op(a[ia[t]], b[ib[t]])`` of bit planes (``in_order``: of ``a[t]``, ``b[t]``).

    ``op`` is a constant in each loop: no branch a word, no views a row (1000 rows of
    256 trits, bind: 7.3 -> 5.0 µs). Rows read in order are read without their indexes:
    7.3 -> 5.2 µs there.
    """
    if op == hv.MUL:
        _op_words_rows(a, b, ia, ib, hv.MUL, out, t0, t1, in_order)
    elif op == hv.NEG:
        _op_words_rows(a, b, ia, ib, hv.NEG, out, t0, t1, in_order)
    elif op == hv.SUB3:
        _op_words_rows(a, b, ia, ib, hv.SUB3, out, t0, t1, in_order)
    else:
        _op_words_rows(a, b, ia, ib, hv.ADD3, out, t0, t1, in_order)


@jit()
def _op_planes(a, b, ia, ib, op, out, t0, t1):
    _op_planes_rows(a, b, ia, ib, op, out, t0, t1)
    return 0


@jit(inline="always")
def _in_order(ia, ib, n):
    """Whether rows ``0..n`` of the result read rows ``0..n`` of ``a`` and of ``b``."""
    in_order = True
    for t in range(n):
        in_order &= (ia[t] == t) & (ib[t] == t)
    return in_order


@jit()
def _op_dense_all(a, b, ia, ib, op, out):
    """:func:`_op_dense` over every row of C-contiguous ``a``, ``b`` and ``out``.

    Rows read in order on both sides (every row with its own: the fast route's, and most
    of the general route's) are one row of all their trits, one loop: 1,000 binds at
    d = 256 took 13.4 µs a row at a time, 8.2 so, and NumPy's ``a * b`` 9.0.
    """
    n = out.shape[0]
    if _in_order(ia, ib, n):
        return np.intp(not _op_dense_row(a.reshape(-1), b.reshape(-1), out.reshape(-1), op))
    return np.intp(_op_dense(a, b, ia, ib, op, out, 0, n))


@jit()
def _op_planes_all(a, b, ia, ib, op, out):
    """:func:`_op_planes` over every row, rows read in order without their indexes."""
    n = out.shape[0]
    if _in_order(ia, ib, n):
        _op_planes_rows(a, b, ia, ib, op, out, 0, n, True)
        return 0
    return _op_planes(a, b, ia, ib, op, out, 0, n)


# One row with one row: the kernels above without the row indexes (numba's call of these
# four arguments takes 0.3 us against 0.4 for those eight, at d = 256)
@jit()
def _op_dense_one(a, b, op, out):
    return not _op_dense_row(a[0], b[0], out[0], op)


_FIRST = np.zeros(1, np.intp)  # the row indexes, never read (rows in order)


@jit()
def _op_planes_one(a, b, op, out):
    _op_planes_rows(a, b, _FIRST, _FIRST, op, out, 0, 1, True)
    return 0


@register("vsa.op", "cpu")
def op(a, b, ia, ib, code: int, packed: bool, d: int) -> tuple[np.ndarray, bool]:
    n = len(ia)
    if n == 1 and len(a) == 1 and len(b) == 1 and a.size:  # one pair (ia = ib = [0])
        out = np.empty(a.shape, a.dtype)
        return out, not (_op_planes_one if packed else _op_dense_one)(a, b, code, out)
    out = np.empty(a.shape if n == len(a) else (n, *a.shape[1:]), a.dtype)
    if not out.size:
        return out, packed or (check(a) and check(b))  # rows that nothing reads: checked here
    kernel = _op_planes if packed else _op_dense
    if 3 * out.nbytes < MIN_PARALLEL_BYTES_LIGHT:  # a few vectors: no pool to ask
        if a.flags.c_contiguous and b.flags.c_contiguous:
            return out, not (_op_planes_all if packed else _op_dense_all)(a, b, ia, ib, code, out)
        return out, not kernel(a, b, ia, ib, code, out, 0, n)
    return out, run(kernel, n, 3 * out.nbytes, a, b, ia, ib, code, out, light=True) == 0


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
    """Rows rolled by ``shifts``, two checked copies each (:func:`._llvm.packing.copy_trits`).

    Returns how many rows hold a value outside {-1, 0, 1}.
    """
    d = out.shape[1]
    bad = 0
    for r in range(t0, t1):
        s = shifts[r]
        src = rows[r]
        dst = out[r]
        bad += max(copy_trits(src, 0, dst, s, d - s), copy_trits(src, d - s, dst, 0, s)) > 2
    return bad


# The bit-plane roll. Each plane is ``src << s | src >> (d - s)`` as a ``d``-bit number,
# words low first: output word ``k`` is a funnel of source words ``k - q - 1, k - q`` by
# ``s``'s bit count ``r`` (``q`` its word count), or'ed with one of words ``k + qt, k + qt + 1``
# for ``d - s`` (:func:`_up`, :func:`_down`: ``x >> 1 >> (63 - r)`` stands for
# ``x >> (64 - r)``, 0 for ``r = 0``, where a shift by 64 would be undefined). Valid rows
# have padding bits 0. The helpers work on flat arrays, a range of rows each, with unsigned
# indexes: an array handed to a helper per row costs two reference-count calls, and a
# signed index is tested for NumPy's negative ones, which keeps a loop scalar. Short rows
# go a word at a time, both planes together, with the source words carried in registers
# rather than loaded again after a store (a store to the same offset mod 4 KiB, as a fresh
# output array has, stalls such a load); long ones in loops LLVM vectorizes.
@jit(inline="always")
def _counts(s):
    """Words ``q`` and bits ``r`` of a shift ``s``, and ``63 - r`` (unsigned)."""
    r = np.uint64(s & 63)
    return s >> 6, r, np.uint64(63) - r


@jit(inline="always")
def _up(lo, hi, r, rr):
    """The high word of ``hi:lo << r`` (``rr = 63 - r``)."""
    return (hi << r) | ((lo >> np.uint64(1)) >> rr)


@jit(inline="always")
def _down(lo, hi, r, rr):
    """The low word of ``hi:lo >> r`` (``rr = 63 - r``)."""
    return (lo >> r) | ((hi << np.uint64(1)) << rr)


@jit(inline="always")
def _roll_whole(src, shifts, nw, dst, t0, t1):
    """Rows of whole words (``d = 64 nw``): word ``k`` from words ``k - q - 1, k - q`` mod nw."""
    u = np.uint64
    for row in range(t0, t1):
        q, r, rr = _counts(shifts[row])
        a = u(2 * row * nw)
        b = a + u(nw)
        i = nw - q - 1  # word k - q - 1 at k = 0, mod nw
        lo_a = src[a + u(i)]
        lo_b = src[b + u(i)]
        for k in range(nw):
            i += 1
            if i == nw:
                i = 0
            cur_a = src[a + u(i)]
            cur_b = src[b + u(i)]
            dst[a + u(k)] = _up(lo_a, cur_a, r, rr)
            dst[b + u(k)] = _up(lo_b, cur_b, r, rr)
            lo_a, lo_b = cur_a, cur_b


@jit(inline="always")
def _roll_short(src, shifts, d, nw, dst, t0, t1):
    """Rows of up to ``ROLL_WORDS`` words, ``d`` not a multiple of 64, a word at a time."""
    u = np.uint64
    mask = (u(1) << u(d & 63)) - u(1)  # the last word's bits
    for row in range(t0, t1):
        s = shifts[row]
        q, r, rr = _counts(s)  # q < nw: s < d <= 64 nw
        qt, rt, rrt = _counts(d - s)
        last = nw - qt - 1  # the last word src >> (d - s) reaches
        a = u(2 * row * nw)
        b = a + u(nw)
        lo_a = lo_b = u(0)
        hi_a = src[a + u(qt)]
        hi_b = src[b + u(qt)]
        for k in range(nw):
            x = y = u(0)
            if k >= q:
                cur_a = src[a + u(k - q)]
                cur_b = src[b + u(k - q)]
                x = _up(lo_a, cur_a, r, rr)
                y = _up(lo_b, cur_b, r, rr)
                lo_a, lo_b = cur_a, cur_b
            if k < last:
                top_a = src[a + u(k + qt + 1)]
                top_b = src[b + u(k + qt + 1)]
                x |= _down(hi_a, top_a, rt, rrt)
                y |= _down(hi_b, top_b, rt, rrt)
                hi_a, hi_b = top_a, top_b
            elif k == last:
                x |= hi_a >> rt
                y |= hi_b >> rt
            dst[a + u(k)] = x
            dst[b + u(k)] = y
        dst[b - u(1)] &= mask  # src << s put src's last bits past d
        dst[b + u(nw - 1)] &= mask


@jit(inline="always")
def _roll_long(src, shifts, d, nw, dst, t0, t1):
    """Rows of more than ``ROLL_WORDS`` words: a vectorized loop per range of words."""
    u = np.uint64
    mask = (u(1) << u(d & 63)) - u(1) if d & 63 else ~u(0)
    for row in range(t0, t1):
        s = shifts[row]
        q, r, rr = _counts(s)
        qt, rt, rrt = _counts(d - s)
        last = nw - qt - 1  # -1 when d - s = d = 64 nw: nothing lands
        for o in range(2 * row * nw, 2 * (row + 1) * nw, nw):
            for k in range(q):
                dst[u(o + k)] = 0
            dst[u(o + q)] = src[u(o)] << r
            for k in range(q + 1, nw):
                dst[u(o + k)] = _up(src[u(o + k - q - 1)], src[u(o + k - q)], r, rr)
            for k in range(last):
                dst[u(o + k)] |= _down(src[u(o + k + qt)], src[u(o + k + qt + 1)], rt, rrt)
            if last >= 0:
                dst[u(o + last)] |= src[u(o + nw - 1)] >> rt
            dst[u(o + nw - 1)] &= mask


@jit()
def _permute_planes(rows, shifts, d, out, t0, t1):
    """Bit-plane rows rolled by ``shifts`` (``0 <= s < d``), by the helpers above."""
    nw = out.shape[2]
    src = rows.reshape(-1)
    dst = out.reshape(-1)
    if nw > ROLL_WORDS:
        _roll_long(src, shifts, d, nw, dst, t0, t1)
    elif d & 63:
        _roll_short(src, shifts, d, nw, dst, t0, t1)
    else:
        _roll_whole(src, shifts, nw, dst, t0, t1)
    return 0


@register("vsa.permute", "cpu")
def permute(rows, shifts, packed: bool, d: int) -> np.ndarray | None:
    """Rows rolled by ``shifts``; None when a dense row holds a value outside {-1, 0, 1}.

    Dense rows are checked as they are copied (the one-vector route sends them
    unchecked; the general route's are checked before and are never None);
    bit-plane rows must have valid codes, padding bits 0.
    """
    out = np.empty_like(rows)
    if not out.size:
        return out
    n = len(rows)
    if packed:
        args = (rows, shifts, d, out)
        kernel = _permute_planes
    else:
        args = (rows, shifts, out)
        kernel = _permute_dense
    if 2 * rows.nbytes < MIN_PARALLEL_BYTES_LIGHT:  # one or a few vectors: no pool to ask
        bad = kernel(*args, 0, n)
    else:
        bad = run(kernel, n, 2 * rows.nbytes, *args, light=True)
    return None if bad else out


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
