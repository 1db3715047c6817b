"""CUDA VSA kernels: elementwise ones grid-stride; search and bundle spread over the GPU.

The arithmetic is :mod:`..shared.vsa`, shared with the CPU kernels, compiled as inline
device functions with ``cuda.popc`` on uint64 words. ``search`` runs a grid of memory
tiles x query tiles (:func:`_search_kernel`), keeps the best ``k`` per block on the
device and merges the tiles' lists in a second kernel (:func:`search_merge`), up to
``KMAX`` (a larger ``k`` scores every pair on the GPU and selects on the host).
``bundle`` on bit planes splits the vectors over threads with counters in registers
(:func:`bundle_planes`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda, float64, int32, int64, uint64

from ..._dispatch import register
from ..shared import vsa as hv
from ..shared.select import topk_blocks
from ._launch import MAX_BLOCKS, THREADS, blocks, flag, is_set

KMAX = 16  # the most matches per query the search kernels keep (more: top-k on the host)


def _device(fn: Any, **names: Any) -> Any:
    return cuda.jit(device=True, inline="always")(hv.specialize(fn, **names) if names else fn)


@cuda.jit(device=True, inline="always")
def _popc(x):
    return cuda.popc(x)


_fmix = _device(hv.fmix64)
_row_key = _device(hv.row_key, fmix64=_fmix)
_draw = _device(hv.draw, fmix64=_fmix)
_trit_of = _device(hv.trit_of)
_random_word = _device(hv.random_word, draw=_draw)
_takes_other = _device(hv.takes_other)
_mixed_trit = _device(hv.mixed_trit, draw=_draw, trit_of=_trit_of, takes_other=_takes_other)
_op_trits = _device(hv.op_trits)
_op_words = _device(hv.op_words)
_score = _device(hv.score)
_pair_words = _device(hv.pair_words, popc=_popc, score=_score)
_pair_trits = _device(hv.pair_trits, score=_score)
_bits_at = _device(hv.bits_at)
_rolled_word = _device(hv.rolled_word, bits_at=_bits_at)
_level_of = _device(hv.level_of)


# ------------------------------------------------------------------- kernels
@cuda.jit
def random_dense(row0, key, thr, out):
    n, d = out.shape
    for i in range(cuda.grid(1), n * d, cuda.gridsize(1)):
        r = i // d
        j = i - r * d
        out[r, j] = _trit_of(_draw(_row_key(key, row0 + r), j), thr)


@cuda.jit
def random_planes(row0, d, key, thr, out):
    n = out.shape[0]
    nw = out.shape[2]
    for i in range(cuda.grid(1), n * nw, cuda.gridsize(1)):
        r = i // nw
        w = i - r * nw
        out[r, 0, w], out[r, 1, w] = _random_word(_row_key(key, row0 + r), w,
                                                  min(64, d - 64 * w), thr)


@cuda.jit
def mixed_dense(key, thr, circle, out):
    n, d = out.shape
    k0 = _row_key(key, 0)
    k1 = _row_key(key, 1)
    k2 = _row_key(key, 2)
    for i in range(cuda.grid(1), n * d, cuda.gridsize(1)):
        r = i // d
        j = i - r * d
        out[r, j] = _mixed_trit(k0, k1, k2, r, j, n, circle, thr)


@cuda.jit
def check_rows(rows, bad):
    n, d = rows.shape
    for i in range(cuda.grid(1), n * d, cuda.gridsize(1)):
        r = i // d
        v = rows[r, i - r * d]
        if v < -1 or v > 1:
            bad[0] = 1  # a flag, not a count: a count could wrap to 0


@cuda.jit
def op_dense(a, b, ia, ib, op, out, bad):
    n, d = out.shape
    for i in range(cuda.grid(1), n * d, cuda.gridsize(1)):
        t = i // d
        j = i - t * d
        x = a[ia[t], j]
        y = b[ib[t], j]
        if x < -1 or x > 1 or y < -1 or y > 1:
            bad[0] = 1  # the inputs are checked as they are read
        out[t, j] = _op_trits(x, y, op)


@cuda.jit
def op_planes(a, b, ia, ib, op, out):
    n = out.shape[0]
    nw = out.shape[2]
    for i in range(cuda.grid(1), n * nw, cuda.gridsize(1)):
        t = i // nw
        w = i - t * nw
        x = a[ia[t]]
        y = b[ib[t]]
        out[t, 0, w], out[t, 1, w] = _op_words(x[0, w], x[1, w], y[0, w], y[1, w], op)


@cuda.jit
def bundle_dense(vs, weights, out):
    n, rows, d = vs.shape
    for i in range(cuda.grid(1), rows * d, cuda.gridsize(1)):
        r = i // d
        j = i - r * d
        acc = weights[0] * 0 if n else 0
        for k in range(n):
            acc += weights[k] * vs[k, r, j]
        out[r, j] = 1 if acc > 0 else (-1 if acc < 0 else 0)


COUNTER_BITS = 8  # bits of a thread's register counters: up to 255 votes between flushes
CHUNK = (1 << COUNTER_BITS) - 1
BUNDLE_PER_THREAD = 32  # vectors a bundle thread counts before the vectors are split further
MAX_SLICES = 32  # slices of the vectors per word column (a power of two dividing THREADS)


@cuda.jit
def bundle_planes(vs, slices, out):
    """Majority of bit-plane vectors: a parallel split of the vectors, counters in registers.

    ``vs`` is ``(n, rows, 2, nw)``. A block takes ``THREADS // slices`` adjacent
    word columns of one row (coalesced loads) and splits the ``n`` vectors into
    ``slices`` contiguous slices, one thread per (slice, column). A thread counts
    its slice with bit-sliced ripple counters of ``COUNTER_BITS`` bits per plane
    (unrolled: registers), flushing every ``CHUNK`` vectors: the 64 lanes' plus
    minus minus counts are added to the block's int32 lane votes with shared
    atomics. Slice 0's threads then turn each column's 64 votes into the output's
    plus and minus words (the sign; a tie is 0).

    Floor: ``16 n rows nw`` bytes read once (coalesced), ``16 rows nw`` written;
    about 2 x 6 word operations per vector word (amortized ripple) and
    ``64 x 2 COUNTER_BITS`` per flush.
    """
    votes = cuda.shared.array((THREADS, 64), int32)
    cnt = cuda.local.array((2, COUNTER_BITS), uint64)
    n, rows, _, nw = vs.shape
    tid = cuda.threadIdx.x
    cols = THREADS // slices
    s = tid // cols
    c = tid - s * cols
    per = (n + slices - 1) // slices
    groups = (nw + cols - 1) // cols
    for item in range(cuda.blockIdx.x, rows * groups, cuda.gridDim.x):
        r = item // groups
        w = (item - r * groups) * cols + c
        for b in range(64):
            votes[c, b] = 0
        cuda.syncthreads()
        if w < nw:
            v1 = min(n, (s + 1) * per)
            for v0 in range(s * per, v1, CHUNK):
                for k in range(COUNTER_BITS):
                    cnt[0, k] = 0
                    cnt[1, k] = 0
                for v in range(v0, min(v1, v0 + CHUNK)):
                    for p in range(2):
                        carry = vs[v, r, p, w]
                        for k in range(COUNTER_BITS):
                            if carry == 0:
                                break
                            x = cnt[p, k]
                            cnt[p, k] = x ^ carry
                            carry &= x
                for b in range(64):
                    diff = 0
                    for k in range(COUNTER_BITS):
                        diff += (int32((cnt[0, k] >> b) & 1) - int32((cnt[1, k] >> b) & 1)) << k
                    if diff != 0:
                        cuda.atomic.add(votes, (c, b), diff)
        cuda.syncthreads()
        if s == 0 and w < nw:
            plus = uint64(0)
            minus = uint64(0)
            for b in range(64):
                bit = uint64(1) << uint64(b)
                if votes[c, b] > 0:
                    plus |= bit
                elif votes[c, b] < 0:
                    minus |= bit
            out[r, 0, w] = plus
            out[r, 1, w] = minus
        cuda.syncthreads()  # votes[] is cleared for the next item


def bundle_slices(n: int) -> int:
    """Slices of ``n`` bundled vectors: about BUNDLE_PER_THREAD each, a power of two."""
    want = -(-n // BUNDLE_PER_THREAD)
    return min(MAX_SLICES, 1 << max(0, want - 1).bit_length())


@cuda.jit
def class_sums_dense(rows, labels, out):
    n, d = rows.shape
    for j in range(cuda.grid(1), d, cuda.gridsize(1)):  # a thread owns a column: no atomics
        for i in range(n):
            out[labels[i], j] += rows[i, j]


@cuda.jit
def permute_dense(rows, shifts, out):
    n, d = out.shape
    for i in range(cuda.grid(1), n * d, cuda.gridsize(1)):
        r = i // d
        j = i - r * d
        src = j - shifts[r]
        out[r, j] = rows[r, src + d if src < 0 else src]


@cuda.jit
def permute_planes(rows, shifts, d, out):
    n = out.shape[0]
    nw = out.shape[2]
    for i in range(cuda.grid(1), n * 2 * nw, cuda.gridsize(1)):
        r = i // (2 * nw)
        p = (i // nw) % 2
        k = i % nw
        out[r, p, k] = _rolled_word(rows[r, p], k, shifts[r], d)


def _pairs_kernel(pair: Any) -> Any:
    """A kernel scoring the row pairs ``(a[ia[t]], b[ib[t]])`` with ``pair``."""

    @cuda.jit
    def pairs(a, b, ia, ib, metric, d, out):
        for t in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
            out[t] = pair(a[ia[t]], b[ib[t]], metric, d)

    return pairs


pairs_dense = _pairs_kernel(_pair_trits)
pairs_planes = _pairs_kernel(_pair_words)


@cuda.jit(device=True, inline="always")
def _better(s1, i1, s2, i2):
    """(score, index) 1 ranks before 2: a higher score, or the same score and a lower index."""
    return s1 > s2 or (s1 == s2 and i1 < i2)


@cuda.jit(device=True, inline="always")
def _keep(best_s, best_i, t, k, s, i):
    """Insert (s, i) into the sorted list ``best[t, :k]`` when it ranks before its last entry.

    Returns whether it did (a sorted source can stop at its first refusal).
    """
    if not _better(s, i, best_s[t, k - 1], best_i[t, k - 1]):
        return False
    p = k - 1
    while p > 0 and _better(s, i, best_s[t, p - 1], best_i[t, p - 1]):
        best_s[t, p] = best_s[t, p - 1]
        best_i[t, p] = best_i[t, p - 1]
        p -= 1
    best_s[t, p] = s
    best_i[t, p] = i
    return True


@cuda.jit(device=True, inline="always")
def _reset(best_s, best_i, t, k):
    for p in range(k):  # sentinels rank after every real score (scores are finite)
        best_s[t, p] = -np.inf
        best_i[t, p] = 1 << 62


@cuda.jit(device=True, inline="always")
def _block_topk(best_s, best_i, t, k, sh_s, sh_i, tid):
    """The best ``k`` of every thread's sorted list ``best[t, :k]``, in ``sh[0, :k]``.

    A tree of pairwise merges in shared memory: log2(THREADS) rounds of ``k``
    steps (thread ``tid`` merges lists ``tid`` and ``tid + step``), so no thread
    scans the whole block. Call from every thread of the block; ``sh`` is
    ``(THREADS, KMAX)`` and is rewritten.
    """
    for p in range(k):
        sh_s[tid, p] = best_s[t, p]
        sh_i[tid, p] = best_i[t, p]
    cuda.syncthreads()
    step = THREADS // 2
    while step > 0:
        if tid < step:
            a = 0
            b = 0
            for p in range(k):  # merged into best[t] (free now), then copied back
                if _better(sh_s[tid + step, b], sh_i[tid + step, b], sh_s[tid, a], sh_i[tid, a]):
                    best_s[t, p] = sh_s[tid + step, b]
                    best_i[t, p] = sh_i[tid + step, b]
                    b += 1
                else:
                    best_s[t, p] = sh_s[tid, a]
                    best_i[t, p] = sh_i[tid, a]
                    a += 1
            for p in range(k):
                sh_s[tid, p] = best_s[t, p]
                sh_i[tid, p] = best_i[t, p]
        cuda.syncthreads()
        step //= 2


@cuda.jit(device=True, inline="always")
def _tile_dense(queries, q0, nq, row, metric, lane, lanes, cnt):
    """Counts of int8 ``row`` against queries ``q0 .. q0 + nq``, columns ``lane::lanes``.

    ``cnt[0, t]``: the dot product (Hamming: differing trits), ``cnt[1, t]`` 0,
    ``cnt[2, t]`` the query's non-zeros; returns the row's non-zeros.
    """
    zb = 0
    for j in range(lane, row.shape[0], lanes):
        y = row[j]
        zb += y != 0
        for t in range(QTILE):
            if t < nq:
                x = queries[q0 + t, j]
                if metric == hv.HAMMING:
                    cnt[0, t] += x != y
                else:
                    cnt[0, t] += int32(x) * int32(y)
                    cnt[2, t] += x != 0
    return zb


@cuda.jit(device=True, inline="always")
def _tile_planes(queries, q0, nq, row, metric, lane, lanes, cnt):
    """Counts of bit-plane ``row`` against queries ``q0 .. q0 + nq``, words ``lane::lanes``.

    Each memory word is loaded once for the ``QTILE`` queries (their words are the
    same for every row of the block: broadcast loads). ``cnt[0, t]`` counts agreeing
    non-zeros (Hamming: differing trits), ``cnt[1, t]`` disagreeing ones, ``cnt[2, t]``
    the query's non-zeros; returns the row's non-zeros.
    """
    zb = 0
    for w in range(lane, row.shape[1], lanes):
        bp = row[0, w]
        bm = row[1, w]
        zb += cuda.popc(bp | bm)
        for t in range(QTILE):
            if t < nq:
                ap = queries[q0 + t, 0, w]
                am = queries[q0 + t, 1, w]
                if metric == hv.HAMMING:
                    cnt[0, t] += cuda.popc((ap ^ bp) | (am ^ bm))
                else:
                    cnt[0, t] += cuda.popc((ap & bp) | (am & bm))
                    cnt[1, t] += cuda.popc((ap & bm) | (am & bp))
                    cnt[2, t] += cuda.popc(ap | am)
    return zb


QTILE = 8  # queries a search block scores against each memory row it loads
SEARCH_BLOCKS = 1024  # blocks a search aims for (query tiles x memory tiles): every SM busy
MAX_LANES = 16  # threads that may share one memory row (a power of two dividing THREADS)


def _search_kernel(tile: Any) -> Any:
    """The first search pass: the best ``k`` of each (query tile, memory tile), per query.

    Block ``(x, y)`` takes memory rows ``x * rows .. (x + 1) * rows`` and queries
    ``y * QTILE ..``. ``lanes`` adjacent threads share a row (coalesced loads of
    adjacent words; many lanes when there are few rows per thread, one for batches),
    so a pass scores ``THREADS // lanes`` rows: each lane counts its columns with
    ``tile`` (int32 counters in registers), the lanes' counts are summed in shared
    memory, and lane 0 scores the row (the shared :func:`..shared.vsa.score`) and
    keeps a sorted best-``k`` list per query (ties to the lower index).
    :func:`_block_topk` merges the block's lists into ``part[q, x, :k]``, one per
    memory tile, which :func:`search_merge` merges (or which is the answer when
    there is one tile).

    Floor (bit planes, ``q`` queries, ``m x nw`` words): the memory once (``16 m nw``
    bytes; the kernel reads it ``ceil(q / QTILE)`` times, from L2 when it fits) and
    ``2 q m nw`` popcounts for a dot product (3 for cosine, 1 for Hamming). Counts are
    int32: ``d < 2**31``.
    """

    @cuda.jit
    def search(queries, memory, k, metric, d, rows, lanes, part_s, part_i):
        tid = cuda.threadIdx.x
        slot = tid // lanes  # the row among the pass's rows
        lane = tid - slot * lanes
        slots = THREADS // lanes
        best_s = cuda.local.array((QTILE, KMAX), float64)
        best_i = cuda.local.array((QTILE, KMAX), int64)
        cnt = cuda.local.array((3, QTILE), int32)
        sh_s = cuda.shared.array((THREADS, KMAX), float64)
        sh_i = cuda.shared.array((THREADS, KMAX), int64)
        red = cuda.shared.array((3, QTILE, THREADS), int32)  # the lanes' counts
        red_zb = cuda.shared.array(THREADS, int32)
        nq_all = queries.shape[0]
        m = memory.shape[0]
        for qt in range(cuda.blockIdx.y, (nq_all + QTILE - 1) // QTILE, cuda.gridDim.y):
            q0 = qt * QTILE
            nq = min(QTILE, nq_all - q0)
            for mt in range(cuda.blockIdx.x, part_s.shape[1], cuda.gridDim.x):
                for t in range(QTILE):
                    _reset(best_s, best_i, t, k)
                end = min(m, (mt + 1) * rows)
                for base in range(mt * rows, end, slots):  # the same passes for every thread
                    i = base + slot
                    for t in range(QTILE):
                        cnt[0, t] = 0
                        cnt[1, t] = 0
                        cnt[2, t] = 0
                    zb = 0
                    if i < end:
                        zb = tile(queries, q0, nq, memory[i], metric, lane, lanes, cnt)
                    if lanes > 1:
                        for t in range(QTILE):
                            red[0, t, tid] = cnt[0, t]
                            red[1, t, tid] = cnt[1, t]
                            red[2, t, tid] = cnt[2, t]
                        red_zb[tid] = zb
                        cuda.syncthreads()
                        if lane == 0:
                            for o in range(tid + 1, tid + lanes):
                                for t in range(QTILE):
                                    cnt[0, t] += red[0, t, o]
                                    cnt[1, t] += red[1, t, o]
                                    cnt[2, t] += red[2, t, o]
                                zb += red_zb[o]
                        cuda.syncthreads()  # red[] is rewritten by the next pass
                    if lane == 0 and i < end:
                        for t in range(QTILE):  # a fixed count: cnt[] stays in registers
                            if t < nq:
                                a = cnt[0, t]
                                _keep(best_s, best_i, t, k,
                                      _score(metric, a - cnt[1, t], cnt[2, t], zb, d - a, d), i)
                for t in range(nq):
                    _block_topk(best_s, best_i, t, k, sh_s, sh_i, tid)
                    if tid < k:
                        part_s[q0 + t, mt, tid] = sh_s[0, tid]
                        part_i[q0 + t, mt, tid] = sh_i[0, tid]
                    cuda.syncthreads()  # sh is rewritten for the next query

    return search


search_dense = _search_kernel(_tile_dense)
search_planes = _search_kernel(_tile_planes)


@cuda.jit
def search_merge(part_s, part_i, k, out_s, out_i):
    """The second search pass: per query (a block each), the best ``k`` of its tiles' lists.

    Each thread folds the sorted lists of tiles ``tid, tid + THREADS, ..`` into its
    own (stopping at a list's first entry that does not make it), then
    :func:`_block_topk`. Floor: ``16 q tiles k`` bytes read, ``16 q k`` written.
    """
    tid = cuda.threadIdx.x
    best_s = cuda.local.array((1, KMAX), float64)
    best_i = cuda.local.array((1, KMAX), int64)
    sh_s = cuda.shared.array((THREADS, KMAX), float64)
    sh_i = cuda.shared.array((THREADS, KMAX), int64)
    for q in range(cuda.blockIdx.x, part_s.shape[0], cuda.gridDim.x):
        _reset(best_s, best_i, 0, k)
        for x in range(tid, part_s.shape[1], THREADS):
            for p in range(k):
                if not _keep(best_s, best_i, 0, k, part_s[q, x, p], part_i[q, x, p]):
                    break
        _block_topk(best_s, best_i, 0, k, sh_s, sh_i, tid)
        if tid < k:
            out_s[q, tid] = sh_s[0, tid]
            out_i[q, tid] = sh_i[0, tid]
        cuda.syncthreads()


@cuda.jit
def levels_of_values(values, lo, hi, top, out, bad):
    """One thread per value: its level (:func:`hv.level_of`, bounds repeating every ``len(lo)``)."""
    p = lo.shape[0]
    for i in range(cuda.grid(1), values.shape[0], cuda.gridsize(1)):
        j = i % p
        out[i] = _level_of(values[i], lo[j], hi[j], top)
        if out[i] < 0:
            bad[0] = 1


@cuda.jit
def checked_indices(values, n, out, bad):
    """One thread per value: the integer index, flagged unless ``0 <= value < n``."""
    for i in range(cuda.grid(1), values.shape[0], cuda.gridsize(1)):
        v = values[i]
        if v < 0 or v >= n:
            bad[0] = 1
        out[i] = int64(v)


@cuda.jit
def class_scores_dense(rows, sums, norms, scores, best):
    """One thread per sample: its score against every prototype, and the first best."""
    n, d = rows.shape
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        top = 0
        for c in range(sums.shape[0]):
            dot = float64(0.0)
            for j in range(d):
                dot += float64(rows[i, j]) * sums[c, j]
            scores[i, c] = dot / norms[c]
            if scores[i, c] > scores[i, top]:
                top = c
        best[i] = top


@cuda.jit
def axis_first_rows(rows, out):
    """``out[i, a, x] = rows[a, i, x]``, one thread per element."""
    na, n, nx = rows.shape
    for t in range(cuda.grid(1), na * n * nx, cuda.gridsize(1)):
        x = t % nx
        a = t // nx % na
        i = t // (nx * na)
        out[i, a, x] = rows[a, i, x]


# ------------------------------------------------------------------ wrappers
@register("vsa.random", "cuda")
def random(row0: int, n: int, d: int, key: int, thr: int, packed: bool) -> Any:
    k, t = np.uint64(key), np.uint64(thr)
    if packed:
        out = cuda.device_array((n, 2, -(-d // 64)), np.uint64)
        if out.size:
            random_planes[blocks(n * out.shape[2]), THREADS](row0, d, k, t, out)
    else:
        out = cuda.device_array((n, d), np.int8)
        if out.size:
            random_dense[blocks(n * d), THREADS](row0, k, t, out)
    return out


@register("vsa.mixed", "cuda")
def mixed(n: int, d: int, key: int, thr: int, circle: bool) -> Any:
    out = cuda.device_array((n, d), np.int8)
    if out.size:
        mixed_dense[blocks(n * d), THREADS](np.uint64(key), np.uint64(thr), bool(circle), out)
    return out


@register("vsa.check", "cuda")
def check(rows: Any) -> bool:
    bad = flag()
    if rows.size:
        check_rows[blocks(rows.size), THREADS](rows, bad)
    return not is_set(bad)


@register("vsa.op", "cuda")
def op(a, b, ia, ib, code: int, packed: bool, d: int) -> tuple[Any, bool]:
    out = cuda.device_array((ia.shape[0], *tuple(a.shape)[1:]), a.dtype)
    if not out.size:
        return out, packed or (check(a) and check(b))  # rows that nothing reads: checked here
    if packed:
        op_planes[blocks(out.size // 2), THREADS](a, b, ia, ib, code, out)
        return out, True
    bad = flag()
    op_dense[blocks(out.size), THREADS](a, b, ia, ib, code, out, bad)
    return out, not is_set(bad)


@register("vsa.bundle", "cuda")
def bundle(vs, weights, packed: bool, d: int) -> Any:
    n = vs.shape[0]
    out = cuda.device_array(tuple(vs.shape)[1:], vs.dtype)
    if out.size:
        if packed:
            slices = bundle_slices(n)
            groups = -(-out.shape[2] // (THREADS // slices))
            bundle_planes[min(out.shape[0] * groups, MAX_BLOCKS), THREADS](vs, slices, out)
        else:
            w = weights
            if w is None:
                w = cuda.to_device(np.ones(max(n, 1), hv.votes_dtype(n)))
            bundle_dense[blocks(out.size), THREADS](vs, w, out)
    return out


@register("vsa.class_sums", "cuda")
def class_sums(rows, labels, classes: int) -> Any:
    out = cuda.to_device(np.zeros((classes, rows.shape[1]), np.int64))
    if out.size and rows.shape[0]:
        class_sums_dense[blocks(rows.shape[1]), THREADS](rows, labels, out)
    return out


@register("vsa.permute", "cuda")
def permute(rows, shifts, packed: bool, d: int) -> Any:
    out = cuda.device_array(rows.shape, rows.dtype)
    if out.size:
        kernel = permute_planes if packed else permute_dense
        args = (rows, shifts, d, out) if packed else (rows, shifts, out)
        kernel[blocks(out.size), THREADS](*args)
    return out


@register("vsa.similarity", "cuda")
def similarity(a, b, ia, ib, metric: int, packed: bool, d: int) -> Any:
    out = cuda.device_array(ia.shape[0], np.int64 if metric == hv.DOT else np.float64)
    if out.size:
        kernel = pairs_planes if packed else pairs_dense
        kernel[blocks(out.size), THREADS](a, b, ia, ib, metric, d, out)
    return out


@register("vsa.search", "cuda")
def search(queries, memory, k: int, metric: int, packed: bool, d: int):
    q, m = queries.shape[0], memory.shape[0]
    if k > KMAX or q == 0:
        def scores(q0: int, q1: int) -> np.ndarray:
            ia = cuda.to_device(np.repeat(np.arange(q0, q1, dtype=np.int64), m))
            ib = cuda.to_device(np.tile(np.arange(m, dtype=np.int64), q1 - q0))
            s = similarity(queries, memory, ia, ib, metric, packed, d).copy_to_host()
            return s.reshape(q1 - q0, m)

        return topk_blocks(scores, q, m, k)
    lanes = search_lanes(q, m, queries.shape[queries.ndim - 1])
    qtiles, rows = search_tiles(q, m, lanes)
    mtiles = -(-m // rows)
    part_s = cuda.device_array((q, mtiles, k), np.float64)
    part_i = cuda.device_array((q, mtiles, k), np.int64)
    kernel = search_planes if packed else search_dense
    grid = (min(mtiles, MAX_BLOCKS), min(qtiles, MAX_BLOCKS))
    kernel[grid, THREADS](queries, memory, k, metric, d, rows, lanes, part_s, part_i)
    if mtiles == 1:
        return part_i[:, 0].copy_to_host(), part_s[:, 0].copy_to_host()
    out_s = cuda.device_array((q, k), np.float64)
    out_i = cuda.device_array((q, k), np.int64)
    search_merge[min(q, MAX_BLOCKS), THREADS](part_s, part_i, k, out_s, out_i)
    return out_i.copy_to_host(), out_s.copy_to_host()


def search_lanes(q: int, m: int, width: int) -> int:
    """Threads per memory row, a power of two: 1 for batches, more for few rows.

    Enough for about SEARCH_BLOCKS full blocks, at most MAX_LANES and the row's
    ``width`` (words or trits).
    """
    want = SEARCH_BLOCKS * THREADS // (m * -(-q // QTILE))
    lanes = 1
    while 2 * lanes <= min(want, MAX_LANES, width):
        lanes *= 2
    return lanes


def search_tiles(q: int, m: int, lanes: int = 1) -> tuple[int, int]:
    """Query tiles, and memory rows per tile: about SEARCH_BLOCKS blocks.

    A tile is whole passes of ``THREADS // lanes`` rows.
    """
    qtiles = -(-q // QTILE)
    slots = THREADS // lanes
    want = max(1, SEARCH_BLOCKS // qtiles)  # memory tiles per query tile
    return qtiles, slots * max(1, -(-m // (want * slots)))


@register("vsa.level_indices", "cuda")
def level_indices(values, lo, hi, n_levels: int) -> tuple[Any, bool]:
    out = cuda.device_array(values.shape[0], np.int64)
    bad = flag()
    if out.size:
        if lo is None or hi is None:
            checked_indices[blocks(out.size), THREADS](values, n_levels, out, bad)
        else:
            levels_of_values[blocks(out.size), THREADS](values, lo, hi, n_levels - 1, out, bad)
    return out, not is_set(bad)


@register("vsa.class_scores", "cuda")
def class_scores(rows, sums, norms) -> tuple[Any, Any]:
    n = rows.shape[0]
    scores = cuda.device_array((n, sums.shape[0]), np.float64)
    best = cuda.device_array(n, np.int64)
    if n:
        class_scores_dense[blocks(n), THREADS](rows, sums, norms, scores, best)
    return scores, best


@register("vsa.axis_first", "cuda")
def axis_first(rows) -> Any:
    na, n, nx = rows.shape
    out = cuda.device_array((n, na, nx), rows.dtype)
    if out.size:
        axis_first_rows[blocks(out.size), THREADS](rows, out)
    return out


@register("vsa.concat", "cuda")
def concat(parts) -> Any:
    if len(parts) == 1:
        return parts[0]
    out = cuda.device_array((sum(p.shape[0] for p in parts), *tuple(parts[0].shape)[1:]),
                            parts[0].dtype)
    r0 = 0
    for p in parts:
        out[r0:r0 + p.shape[0]] = p
        r0 += p.shape[0]
    return out
