"""CUDA VSA kernels: one thread per trit, word or pair (grid-stride), one block per query.

The arithmetic is :mod:`..shared.vsa`, shared with the CPU kernels, compiled as inline
device functions with ``cuda.popc`` on uint64 words. ``search`` streams the
memory through a block per query: each thread keeps the best ``k`` of the rows
it scored, and the block merges them (up to ``KMAX``; a larger ``k`` scores
every pair on the GPU and selects on the host).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda, float64, int64, uint64

from ..._dispatch import register
from ..shared import vsa as hv
from ..shared.select import topk_blocks
from ._launch import THREADS, blocks, flag, is_set

KMAX = 16  # the most matches per query a search block keeps
SLOTS = KMAX + 1  # per-thread list: KMAX entries and a sentinel


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
_majority_word = _device(hv.majority_word)


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


@cuda.jit
def bundle_planes(vs, top, out):
    """Each thread counts one word column with two bit-sliced ripple counters."""
    n, rows, _, nw = vs.shape
    cnt = cuda.local.array((2, 64, 1), uint64)
    for i in range(cuda.grid(1), rows * nw, cuda.gridsize(1)):
        r = i // nw
        w = i - r * nw
        for k in range(top):
            cnt[0, k, 0] = 0
            cnt[1, k, 0] = 0
        for v in range(n):
            for p in range(2):
                carry = vs[v, r, p, w]
                k = 0
                while carry != 0:
                    x = cnt[p, k, 0]
                    cnt[p, k, 0] = x ^ carry
                    carry &= x
                    k += 1
        out[r, 0, w], out[r, 1, w] = _majority_word(cnt, 0, top)


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
def _keep(best_s, best_i, k, s, i):
    """Insert (s, i) into the sorted best-k list when it ranks before its last entry."""
    if not _better(s, i, best_s[k - 1], best_i[k - 1]):
        return
    p = k - 1
    while p > 0 and _better(s, i, best_s[p - 1], best_i[p - 1]):
        best_s[p] = best_s[p - 1]
        best_i[p] = best_i[p - 1]
        p -= 1
    best_s[p] = s
    best_i[p] = i


@cuda.jit(device=True, inline="always")
def _merge(sh_s, sh_i, k, q, out_idx, out_score):
    """Thread 0: the best k of the per-thread sorted lists in shared memory."""
    heads = cuda.local.array(THREADS, int64)
    for t in range(THREADS):
        heads[t] = 0
    for o in range(k):
        pick = 0
        for t in range(1, THREADS):
            if _better(sh_s[t, heads[t]], sh_i[t, heads[t]],
                       sh_s[pick, heads[pick]], sh_i[pick, heads[pick]]):
                pick = t
        out_idx[q, o] = sh_i[pick, heads[pick]]
        out_score[q, o] = sh_s[pick, heads[pick]]
        heads[pick] += 1


@cuda.jit(device=True, inline="always")
def _reset(best_s, best_i, k):
    for t in range(k + 1):  # one sentinel past k: merge may look at it
        best_s[t] = -np.inf
        best_i[t] = 1 << 62


def _search_kernel(pair: Any) -> Any:
    """A search kernel scoring pairs of rows with ``pair`` (dense or bit-plane)."""

    @cuda.jit
    def search(queries, memory, k, metric, d, out_idx, out_score):
        tid = cuda.threadIdx.x
        best_s = cuda.local.array(SLOTS, float64)
        best_i = cuda.local.array(SLOTS, int64)
        sh_s = cuda.shared.array((THREADS, SLOTS), float64)
        sh_i = cuda.shared.array((THREADS, SLOTS), int64)
        for q in range(cuda.blockIdx.x, queries.shape[0], cuda.gridDim.x):
            _reset(best_s, best_i, k)
            for i in range(tid, memory.shape[0], THREADS):
                _keep(best_s, best_i, k, pair(queries[q], memory[i], metric, d), i)
            for t in range(k + 1):
                sh_s[tid, t] = best_s[t]
                sh_i[tid, t] = best_i[t]
            cuda.syncthreads()
            if tid == 0:
                _merge(sh_s, sh_i, k, q, out_idx, out_score)
            cuda.syncthreads()

    return search


search_dense = _search_kernel(_pair_trits)
search_planes = _search_kernel(_pair_words)


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
            bundle_planes[blocks(out.size // 2), THREADS](vs, max(1, int(n).bit_length()), out)
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
    out = cuda.device_array(ia.shape[0], np.float64)
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
    idx = cuda.device_array((q, k), np.int64)
    scores = cuda.device_array((q, k), np.float64)
    kernel = search_planes if packed else search_dense
    kernel[min(q, 4096), THREADS](queries, memory, k, metric, d, idx, scores)
    return idx.copy_to_host(), scores.copy_to_host()
