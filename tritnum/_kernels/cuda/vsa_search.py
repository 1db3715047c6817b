"""CUDA VSA search: the top ``k`` memory rows of each query, spread over the GPU.

``search`` runs a grid of memory tiles x query tiles (:func:`_search_kernel`), keeps
the best ``k`` per block on the device and merges the tiles' lists in a second kernel
(:func:`search_merge`), up to ``KMAX`` (a larger ``k`` scores every pair on the GPU
with :func:`.vsa_similarity.similarity` and selects on the host).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda, float64, int32, int64

from ..._dispatch import register
from ..shared import vsa as hv
from ..shared.select import topk_blocks
from ._launch import MAX_BLOCKS, THREADS
from .vsa_device import score
from .vsa_similarity import similarity

KMAX = 16  # the most matches per query the search kernels keep (more: top-k on the host)


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
                                      score(metric, a - cnt[1, t], cnt[2, t], zb, d - a, d), i)
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
