"""CPU VSA search: tiles of popcounts or int8 dots, the best k kept as the rows stream by.

From ``d`` of a few hundred trits on, both kinds of hypervectors are searched on bit
planes (:func:`._llvm.popcount.tile_counts`): "bitplane" rows as stored, dense int8
rows packed as they are read (one compare per plane and 64 trits,
:func:`._llvm.planes.trit_planes`). Below that, where a vector is a few words and a
tile's setup, its lane sums and a scalar score a pair outweigh its popcounts, the
int8 route (:func:`search_int8`) takes over.

The int8 route (a level with an int8 dot, ``k <= KSTREAM``): ``vpdpbusd`` tiles of 3
queries x 8 memory rows (:func:`._llvm.popcount.tile_int8`), a memory trit read as
its code ``trit + 1`` against the query's int8 trits, so that the dot is the sum less
the query's trit sum (exact in int32 for any ``d`` here). Dense memory is read in
place, never packed, its values checked in the same pass (the largest code); a
batch decodes bit-plane memory into an int8 scratch a chunk of 128 rows at a time,
one query decodes each row in the tile's registers (``vpmovm2b``). The scores of a
query x chunk come from one vectorized loop (``vsqrtpd``/``vdivpd`` for cosine, the
same IEEE operations as :func:`hv.score`: the same bits), then a scan against the
k-th keeps the top k as the bit-plane route does; threads take blocks of queries
first (the memory stays in L2 at these d; parts of it each find a top k of their own
to merge). Floor at d = 256 per pair: 4
``vpdpbusd`` of 64 products (2 a cycle on Zen 5), a 3 x 8 tile loading each memory
vector once for 3 queries, and the 8 accumulators of a query summed into one vector
by a transposing tree (about 2 operations a pair); tiles of 2 or 4 queries were slower
(1,000 x 1,000 dot: 3 queries 1.68 ms, 2 queries 2.04, 4 queries 2.20, spilling).
Measured (CPU time, one thread,
1,000 rows of d = 256, cosine, on the 2-core Zen 5 at load 5): one query 6.2 us
dense, 7.4 us on bit planes (bit-plane tiles: 37.8 and 16.1 us); 200 queries 0.42 and
0.39 ms (1.21 and 1.20 ms). The crossovers (:data:`INT8_MAX_D`, the same measure,
int8 / bit-plane time): cosine 0.68-0.75 at d = 1024 and 0.86-0.94 at 1536 for 200
queries (one query on bit planes 0.92 at 1024, 1.17 at 1536); the dot, whose
bit-plane tile compares in registers, 0.85-0.91 at 256 and 1.03-1.13 at 384;
Hamming, two dots a pair, 0.91-0.97 at 384 and 1.15-1.21 at 512; one query on bit
planes, dot and Hamming 0.69-0.79 at 512 and 1.01-1.10 at 1024. One dense query
does not pack its memory: 0.16-0.38x the bit-plane tiles' time up to 1024, 0.78x at 2048.

Floor, per query x memory pair at ``d`` = 10,000 (157 words per plane, 20
vectors of 8 words, the last one masked): per vector, two logic operations
(``vpand``, ``vpternlogq``), two popcounts (``vpopcntq``) and two additions into
the counters, 6 vector ALU operations; with the 6 x 2 tile each vector of a memory
row is loaded (and its planes OR-ed) once for 6 queries and each query vector
once for 2 rows: 16 loads and 74 ALU operations per vector and 12 pairs. That is
123 ALU operations a pair, 31 cycles at 4 a cycle (7.3 ns at 4.2 GHz); the loads
(27 a pair, 2 a cycle) are not the bound. Measured on an AMD EPYC (Zen 5,
AVX-512 VPOPCNTDQ), one thread, CPU time on a shared host: the tile alone
8.4-8.7 ns a pair (36 cycles, 86 % of that bound), a whole top-k dot search
10.1-10.5 ns (100 x 10,000, 1,000 x 20,000; 12.7-13.3 ns when the host's other
load runs on the same cores). The other schemes, measured or counted:

- Other register tiles (the tile alone, ns a pair): 6 x 2 8.5, 5 x 2 8.8, 4 x 2
  9.1, 3 x 3 9.9, 8 x 1 12.7, 4 x 3 18.0, 3 x 4 19.0, 2 x 6 26.7 (LLVM spills
  with three rows or more), 1 x 4 22.0 (hence the zero queries that complete
  the last tile).
- Harley-Seal counting: a carry-save adder is two ``vpternlogq`` for two
  vectors and the carries halve at each level, about 2 operations per counted
  vector, as many as ``vpopcntq`` + ``vpaddq``; the AND cannot fold into its
  adders (five inputs), and its ones/twos/fours per pair and count (6 registers)
  would leave room for 2-3 pairs a tile, so each loaded vector would serve fewer
  pairs. Not a gain where ``vpopcntq`` exists (not measured on AVX2, where a
  popcount is a few table-lookup operations and it might be).
- The int8 VNNI route on decoded tiles: ``vpdpbusd`` does 64 multiply-adds, so
  157 of them a pair, 2 a cycle at best: 78 cycles, 2.5x the bit planes' floor.
  torch's ``_int_mm`` is that route: 23.6-23.8 ns a pair at 1,000 x 20,000 on
  one thread here (420 GMAC/s, about 78 % of the VNNI peak), 29.7-32 ns at
  100 x 10,000. The bit planes' lead is thus 2.3-2.9x depending on the host's
  load; 3x at 1,000 queries would need 7.9 ns a pair, within 8 % of the ALU
  bound above. Measured with this module's int8 route (the small-d tiles below, bit
  planes decoded a chunk at a time) at d = 10,000, dot, one thread, CPU time, load 2:
  44.1 ns a pair at 100 x 10,000 and 43.2 at 1,000 x 2,000, against the bit planes'
  10.3-10.4 and ``_int_mm``'s 27.3 and 21.7 in the same run (its 3 x 8 tile reads 10 KB
  rows, 1.3 MB a chunk: past L2). Not a gain at this d.
- The dot metric's top k (:func:`._llvm.popcount.tile_dots`): the tile returns
  its dots compared in registers with each query's k-th: 12.4 -> 10.4 ns a pair
  (reading the counts the tile has just stored cost 2 ns a pair).
- Prefetching the next chunk during the passes over this one: slower
  (10.65 -> 11.08 ns; with 64-row chunks 10.9-11.1); chunks of 64 or 256 rows
  the same as 128; a prefetch distance of 3 or 6 times ``rows_ahead`` the same.

Bytes: each memory row is 2.5 KB of planes (10 KB as int8) and is read from DRAM
once per call (25 MB for 10,000 rows: a single query is bound by that read,
0.5-0.8 ms); queries come from L1/L2 once per chunk. Dense int8 memory is packed
as it is read: 4x the bytes (the 1-thread read rate, about 16 GB/s, adds 6 ms at
100 x 10,000), a few operations per 64 trits.

- Register blocking: a tile of ``tq`` queries x ``tm`` memory rows loads each
  vector of the memory rows once for all its queries (6 x 2 with AVX-512
  VPOPCNTDQ: 24 accumulators in the 32 vector registers; 2 x 2 portable; a
  one-query tile of 4 rows for a query left over, zero queries completing the
  last batch tile where more are left).
- Cache blocking: ``CHUNK_ROWS`` memory rows at a time (read in place, or packed
  into a zero-padded scratch for int8) stay in L2 while every query tile of the
  task passes over them: each memory row is read from DRAM once per call.
- Top-k: each query's best ``k`` (score, row) are kept sorted while the rows
  stream by in index order (a tie never displaces an earlier row; for the dot
  the tile compares with the k-th in registers and only the pairs above it are
  read); tasks over
  parts of the memory merge their lists at the end. Beyond ``KSTREAM`` the
  scores of blocks of queries are kept whole and selected on the host.
- Threads: tasks are (block of queries, part of the memory); the memory is cut
  into parts first (a query block re-reads the memory, a memory part does not).
"""

from __future__ import annotations

import math

import numpy as np

from ..._dispatch import register
from ..._isa import LEVEL, target_features
from ..shared import vsa as hv
from ..shared.select import topk, topk_blocks
from ._jit import jit
from ._llvm.cache import prefetch_row, rows_ahead
from ._llvm.gemm import TILE
from ._llvm.packing import unpack_planes
from ._llvm.planes import trit_planes
from ._llvm.popcount import (
    CHECK,
    INT8_ROWS,
    NARROW_WORDS,
    NONZEROS,
    WIDE_WORDS,
    popcount,
    tile_counts,
    tile_dots,
    tile_int8,
)
from ._parallel import CHUNKS_PER_THREAD, MIN_PARALLEL_BYTES, run, threads
from .vsa import check

CHUNK_ROWS = 128  # memory rows per scratch chunk: 320 KB of planes at d = 10,000 (L2: 1 MB)
KSTREAM = 64  # the largest k kept while streaming (insertion into a sorted list of k)
# (queries, memory rows) of the batch tile and of the one-query tile for the queries left over
WIDE_TILES = ((6, 2), (1, 4))  # AVX-512: 24 and 8 accumulators of the 32 registers
NARROW_TILES = ((2, 2), (1, 4))  # portable: 8 byte accumulators of AVX2's 16

# tile shape 4 * nonzeros + 2 * (not wide) + single: wide batch, wide single, narrow batch,
# narrow single; then the same counting the memory rows' non-zeros too
_count_tile = tile_counts(tuple((tq, tm, wide, nonzeros) for nonzeros in (False, True)
                                for wide, tiles in ((True, WIDE_TILES), (False, NARROW_TILES))
                                for tq, tm in tiles))
# the same tiles without the non-zeros, as dots compared with limits (the dot metric's top k)
_dot_tile = tile_dots(tuple((tq, tm, wide) for wide, tiles in ((True, WIDE_TILES),
                                                                (False, NARROW_TILES))
                            for tq, tm in tiles))
_score = jit(inline="always")(hv.score)
NO_LIMIT = np.iinfo(np.int64).min  # the limit of a list not yet full (-inf)


# the wide tile where ``vpopcntq`` counts 8 words in one instruction: on the AVX-512 level
# (a lower TRITNUM_ISA turns it off) of a CPU with VPOPCNTDQ
HAS_VPOPCNTDQ = {"avx512f", "avx512vpopcntdq"} <= target_features()
WIDE = LEVEL.vpopcntq and HAS_VPOPCNTDQ


@jit(inline="always")
def _offer(best_s, best_i, part, q, k, s, i):
    """Insert (s, i), which beats the last of list ``[part, q]`` of k, best first.

    The rows come in index order: a tie never displaces a row already kept.
    """
    p = k - 1
    while p > 0 and best_s[part, q, p - 1] < s:
        best_s[part, q, p] = best_s[part, q, p - 1]
        best_i[part, q, p] = best_i[part, q, p - 1]
        p -= 1
    best_s[part, q, p] = s
    best_i[part, q, p] = i


@jit(inline="always")
def _limit(limits, best_s, part, q, k, j, rn):
    """Set the limits of query ``q``'s ``rn`` pairs in row ``j`` of a tile: its k-th dot."""
    kth = best_s[part, q, k - 1]
    lim = np.int64(kth) if kth > -np.inf else NO_LIMIT
    for r in range(rn):
        limits[j * rn + r] = lim


@jit()  # not inlined: compiled per memory type, the other branch pruned
def _planes_of(memory, r0, r1, chunk):
    """Memory rows ``[r0, r1)`` as zero-padded planes ``chunk[r - r0]`` (copied or packed)."""
    for r in range(r0, r1):
        dst = chunk[r - r0]
        if memory.ndim == 3:  # bit planes
            nw = memory.shape[2]
            dst[0, :nw] = memory[r, 0]
            dst[1, :nw] = memory[r, 1]
        else:  # int8 trits: 64 at a time, the next row on its way in
            if r + 1 < memory.shape[0]:
                prefetch_row(memory, r + 1)
            row = memory[r]
            d = row.shape[0]
            nw = (d + 63) // 64
            full = d // 64
            for w in range(full):
                dst[0, w], dst[1, w] = trit_planes(row, 64 * w)
            if full < nw:
                plus = np.uint64(0)
                minus = np.uint64(0)
                for j in range(64 * full, d):
                    bit = np.uint64(1) << np.uint64(j - 64 * full)
                    if row[j] == 1:
                        plus |= bit
                    elif row[j] == -1:
                        minus |= bit
                dst[0, full] = plus
                dst[1, full] = minus
        dst[:, nw:] = 0


@jit(inline="always")
def _nonzeros(flat, off, stride, plane, nw, rows, nnz):
    """Non-zeros of ``rows`` plane rows of ``flat`` from word ``off`` (row ``stride``)."""
    for r in range(rows):
        base = off + r * stride
        count = 0
        for w in range(nw):
            count += np.int64(popcount(flat[base + w] | flat[base + plane + w]))
        nnz[r] = count


@jit()
def _search(queries, qnnz, memory, flat, k, metric, d, wide, parts, per_block, out_s, out_i,
            t0, t1):
    """Tasks ``[t0, t1)``: query units from ``per_block * (t // parts)`` x part ``t % parts``.

    ``queries`` holds the zero-padded ``(A, S)`` planes ``(q, 2, nwp)`` of the queries,
    ``qnnz`` their non-zeros. Query unit ``u`` is batch tile ``u`` while there are whole
    ones, then one query each. Bit-plane ``memory`` is read in place (``flat``, its
    words; a tile reaching past the array's last row reads them from the scratch),
    prefetched a few rows ahead on the chunk's first pass (1.2-1.3x on a memory
    beyond the cache, measured on one query against 10,000 rows); int8 ``memory`` is packed
    ``CHUNK_ROWS`` rows at a time into the scratch (``flat`` is empty). With
    ``k <= KSTREAM`` part ``p`` keeps query ``i``'s best ``k`` in ``out_s[p, i]``,
    ``out_i[p, i]`` (best first; -inf where the part has fewer rows); otherwise
    ``out_s[0, i, r]`` receives every score.
    """
    (tq, tm), (_, tm1) = WIDE_TILES if wide else NARROW_TILES
    nq, _, nwp = queries.shape
    m = memory.shape[0]
    direct = flat.size > 0
    nw = flat.size // (2 * m) if direct else nwp
    batches = nq // tq
    units = batches + nq - batches * tq
    ahead = rows_ahead(memory)
    stream = out_i.shape[2] > 0
    chunk = np.zeros((CHUNK_ROWS + max(tm, tm1), 2, nwp), np.uint64)
    cflat = chunk.reshape(-1)
    nnz = np.zeros(CHUNK_ROWS + max(tm, tm1), np.int64)
    counts = np.zeros(-(-(2 * max(tq * tm, tm1) + max(tm, tm1)) // 8) * 8, np.int64)
    dots = metric == hv.DOT and stream  # the dots compared in the tile: scores read where better
    limits = np.zeros(counts.size, np.int64)
    qflat = queries.reshape(-1)
    for t in range(t0, t1):
        part = t % parts
        first = per_block * (t // parts)
        lo = m * part // parts
        hi = m * (part + 1) // parts
        for c0 in range(lo, hi, CHUNK_ROWS):
            rows = min(hi - c0, CHUNK_ROWS)
            if not direct:
                _planes_of(memory, c0, c0 + rows, chunk)
            if metric != hv.DOT and not direct:
                _nonzeros(cflat, 0, 2 * nwp, nwp, nwp, rows, nnz)
            for u in range(first, min(units, first + per_block)):
                single = u >= batches
                q0, jn, rn = (batches * tq + u - batches, 1, tm1) if single else (u * tq, tq, tm)
                # bit-plane rows' non-zeros counted on their first pass, in the tile
                count_nnz = direct and u == first and metric != hv.DOT
                shape = 4 * count_nnz + 2 * (not wide) + single
                qoff = 2 * nwp * q0
                if dots:
                    for j in range(jn):
                        _limit(limits, out_s, part, q0 + j, k, j, rn)
                for r0 in range(0, rows, rn):
                    if direct and u == first:  # the chunk's first pass reads it from DRAM
                        # rows >= 8 KB ahead, each once: the whole window at the chunk's
                        # first tile, then the tile's worth that enters it (a window of
                        # short rows asked again each tile: 128 rows of 64 bytes at d = 256,
                        # 35 ns a row, 2.5x NumPy's float product with 1,000 rows)
                        end = min(m, c0 + r0 + rn + max(rn, ahead))
                        for r in range(c0 + r0 + rn if r0 == 0 else max(c0 + r0 + rn, end - rn),
                                       end):
                            prefetch_row(memory, r)
                    if direct and c0 + r0 + rn <= m:
                        rows_at, at, stride, words = flat, 2 * nw * (c0 + r0), 2 * nw, nw
                    else:  # int8 rows packed in the scratch, or the array's last rows
                        if direct:
                            _planes_of(memory, c0 + r0, m, chunk[r0:])
                        rows_at, at, stride, words = cflat, 2 * nwp * r0, 2 * nwp, nwp
                    if dots:
                        above = _dot_tile(2 * (not wide) + single, qflat, qoff, 2 * nwp, nwp,
                                          rows_at, at, stride, words, words, limits, counts)
                        pair = 0
                        while above:  # rare: a pair better than its query's k-th
                            j, r = pair // rn, pair % rn
                            if above & 1 and r < rows - r0 and counts[pair] > limits[pair]:
                                _offer(out_s, out_i, part, q0 + j, k, np.float64(counts[pair]),
                                       c0 + r0 + r)  # in row order: ties keep the earlier row
                                _limit(limits, out_s, part, q0 + j, k, j, rn)
                            above >>= 1
                            pair += 1
                        continue
                    _count_tile(shape, qflat, qoff, 2 * nwp, nwp, rows_at, at, stride, words,
                                words, counts)
                    if count_nnz:
                        nnz[r0:r0 + rn] = counts[2 * jn * rn:2 * jn * rn + rn]
                    for j in range(jn):
                        q = q0 + j
                        na = qnnz[q]
                        kth = out_s[part, q, k - 1] if stream else 0.0
                        for r in range(min(rn, rows - r0)):
                            both = counts[2 * (j * rn + r)]
                            differ = counts[2 * (j * rn + r) + 1]
                            nb = nnz[r0 + r]
                            s = _score(metric, both - 2 * differ, na, nb,
                                       d - na - nb + 2 * both - differ, d)
                            if not stream:
                                out_s[0, q, c0 + r0 + r] = s
                            elif s > kth:  # a tie never displaces the earlier row
                                _offer(out_s, out_i, part, q, k, s, c0 + r0 + r)
                                kth = out_s[part, q, k - 1]
    return 0


@jit()
def _query_planes(queries, out, nnz, t0, t1):
    """Queries (int8 rows or bit planes) as zero-padded ``(A, S)`` planes and their non-zeros."""
    nwp = out.shape[2]
    flat = out.reshape(-1)
    for i in range(t0, t1):
        _planes_of(queries, i, i + 1, out[i:])
        _nonzeros(flat, 2 * nwp * i, 2 * nwp, nwp, nwp, 1, nnz[i:])
        a = out[i]
        for w in range(nwp):
            a[0, w] |= a[1, w]
    return 0


def _layout(queries: np.ndarray, wide: bool, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The queries' ``(A, S)`` planes, zero-padded to whole vectors, and their non-zeros.

    ``rows`` >= ``len(queries)``: the rows past the queries are zero (phantom queries).
    """
    words = WIDE_WORDS if wide else NARROW_WORDS
    nw = queries.shape[2] if queries.ndim == 3 else -(-queries.shape[1] // 64)
    planes = np.zeros((rows, 2, -(-nw // words) * words), np.uint64)
    nnz = np.zeros(rows, np.int64)
    _query_planes(queries, planes, nnz, 0, len(queries))
    return planes, nnz


def search_tiles(queries, memory, k: int, metric: int, d: int, wide: bool = WIDE):
    """The best ``k`` rows of ``memory`` for each query, with the wide or the portable tiles."""
    nq, m = len(queries), len(memory)
    tq = (WIDE_TILES if wide else NARROW_TILES)[0][0]
    # zero queries complete the last batch tile where that costs less than one-query tiles
    # (one query x 4 rows: 2.5x the time a pair of the 6 x 2 tile; 100 queries: 4 % faster)
    pad = -nq % tq if k <= KSTREAM and 4 * (nq % tq) > tq else 0
    planes, qnnz = _layout(queries, wide, nq + pad)
    flat = memory.reshape(-1) if memory.ndim == 3 else np.zeros(0, np.uint64)
    # tritnum's count and limit (numba's pool left unstarted); a search too small to share
    # (run's rule) is one part: no lists to merge (a tenth of a one-query search at d = 256)
    spread = (threads() * CHUNKS_PER_THREAD if nq * memory.nbytes >= MIN_PARALLEL_BYTES
              else 1)
    parts = max(1, min(-(-m // CHUNK_ROWS), spread))

    def tasks(n: int) -> tuple[int, int]:
        """Query units per block and the tasks for ``n`` queries: parts first, then blocks."""
        units = n // tq + n % tq
        per_block = max(1, -(-units // max(1, min(units, -(-spread // parts)))))
        return per_block, -(-units // per_block) * parts

    if k <= KSTREAM:
        best_s = np.full((parts, nq + pad, k), -np.inf)
        best_i = np.zeros((parts, nq + pad, k), np.int64)
        per_block, count = tasks(nq + pad)
        run(_search, count, nq * memory.nbytes, planes, qnnz, memory, flat, k, metric, d,
            wide, parts, per_block, best_s, best_i)
        if parts == 1:  # the one list of each query is its best k, best first, ties kept
            return best_i[0, :nq], best_s[0, :nq]
        cand_i = best_i[:, :nq].transpose(1, 0, 2).reshape(nq, parts * k)
        cand_s = best_s[:, :nq].transpose(1, 0, 2).reshape(nq, parts * k)
        pick, s = topk(cand_s, k)  # ties: lower row
        return np.take_along_axis(cand_i, pick, 1), s

    every = np.zeros((1, 1, 0), np.int64)  # no lists: every score

    def scores(q0: int, q1: int) -> np.ndarray:
        out = np.empty((1, q1 - q0, m))
        per_block, count = tasks(q1 - q0)
        run(_search, count, (q1 - q0) * memory.nbytes, planes[q0:q1], qnnz[q0:q1], memory,
            flat, k, metric, d, wide, parts, per_block, out, every)
        return out[0]

    return topk_blocks(scores, nq, m, k)


# ------------------------------------------------------------ int8 dots (small d)
# the int8 route up to these d, by metric: (batches of queries, one query on bit planes); one
# query on int8 rows up to INT8_MAX_D_DENSE (measured crossovers: see the module docstring)
INT8_MAX_D = {hv.DOT: (256, 768), hv.COSINE: (1024, 1024), hv.HAMMING: (384, 768)}
INT8_MAX_D_DENSE = 1024
INT8_CHUNK = 128  # memory rows per chunk of the int8 route (32 KB at d = 256: L1)
INT8_BATCH = 3 if TILE is not None and TILE.lanes == 16 else 1  # queries of the batch tile
# the tile shapes (queries, rows' pass, Hamming's count, bit planes): the batch tile; one
# query counting the rows too (CHECK or NONZEROS, one shape more); the rows' pass alone (the
# same); the Hamming tile, then with the rows' non-zeros; one query on bit-plane rows (a
# search of one query decodes each row once: in registers, not through a scratch)
_INT8_SHAPES = ((INT8_BATCH, 0, False, False), (1, CHECK, False, False),
                (1, NONZEROS, False, False), (0, CHECK, False, False),
                (0, NONZEROS, False, False), (1, 0, True, False), (1, NONZEROS, True, False),
                (1, CHECK, False, True), (1, NONZEROS, False, True), (1, NONZEROS, True, True))
BATCH, ONE, ROWS, BOTH, BOTH_ROWS, PLANES, BOTH_PLANES = 0, 1 - CHECK, 3 - CHECK, 5, 6, 7 - CHECK, 9
_int8_tile = tile_int8(_INT8_SHAPES, TILE) if TILE is not None else None
INT8_VECTOR = 4 * TILE.lanes if TILE is not None else 64  # bytes of the tile's vectors


def int8_route(d: int, metric: int, queries: int, packed: bool) -> bool:
    """Whether a search of ``d``-trit vectors takes the int8 dots (a level with an int8 dot).

    Where they are the faster (:data:`INT8_MAX_D`); not ``d = 0`` (every Hamming score
    is 1 there, no division).
    """
    batch, one = INT8_MAX_D[metric]
    limit = batch if queries > 1 else one if packed else INT8_MAX_D_DENSE
    return _int8_tile is not None and 0 < d <= limit


@jit()
def _int8_rows(src, r0, r1, dst, stride):
    """Rows ``[r0, r1)`` of ``src`` as int8 trits at ``dst[(r - r0) * stride]``.

    ``src``: int8 trits, or bit planes seen as bytes ``(m, 2, 8 nw)``. The bytes of each
    row past its trits are left as they are (zero in a fresh buffer; bit planes decode
    their zero padding to zero). Returns non-zero for a corrupt plane.
    """
    bad = np.uint64(0)
    if src.ndim == 3:
        flat = src.reshape(-1)
        half = src.shape[2]
        for r in range(r0, r1):
            bad |= unpack_planes(flat, 2 * half * r, 2 * half * r + half, dst,
                                 (r - r0) * stride, half // 8)
    else:
        d = src.shape[1]
        for r in range(r0, r1):
            dst[(r - r0) * stride:(r - r0) * stride + d] = src[r]
    return bad


@jit()
def _int8_queries(queries, d, codes, sums, nnz, t0, t1):
    """Queries ``[t0, t1)`` as ``codes[i] = (trit, |trit|)`` (0 past ``d``), sums, non-zeros.

    Returns how many queries hold a value that is not a trit.
    """
    width = codes.shape[2]
    bad = 0
    for i in range(t0, t1):
        _int8_rows(queries, i, i + 1, codes[i - t0].reshape(-1), 2 * width)
        row = codes[i - t0, 0]
        total = 0
        count = 0
        ok = True
        for j in range(d):
            t = row[j]
            ok &= (t >= -1) & (t <= 1)
            codes[i - t0, 1, j] = t & 1
            total += t
            count += t & 1
        sums[i - t0] = total
        nnz[i - t0] = count
        bad += not ok
    return bad


@jit(inline="always")
def _int8_scores(metric, buf, at, bplane, qsum, na, nnz, d, rows, scores):
    """``scores[r]``: :func:`hv.score` of a query from its sums ``buf[at + r]``, row by row.

    One loop a metric, free of branches: LLVM vectorizes each (``vsqrtpd`` and ``vdivpd``
    for cosine) in a caller compiled with ``error_model="numpy"``, no zero-division
    checks (there are no zero divisors). As a scalar loop through :func:`hv.score` the
    cosine scores took 3x the dots at d = 256.
    """
    if metric == hv.COSINE:
        for r in range(rows):
            product = np.float64(na) * np.float64(nnz[r])  # 0 where either is 0
            dot = np.float64(buf[at + r] - qsum)
            scores[r] = dot / math.sqrt(product) if product != 0 else 0.0
    elif metric == hv.HAMMING:
        for r in range(rows):
            dot = buf[at + r] - qsum
            common = buf[bplane + at + r]
            eq = d - na - nnz[r] + (3 * common + dot) // 2
            scores[r] = np.float64(eq) / np.float64(d)
    else:
        for r in range(rows):
            scores[r] = np.float64(buf[at + r] - qsum)


@jit(inline="always")
def _planes_tile(memory, pflat, ptail, qflat, width, c0, rows, both, need, d, buf, ostride, nnz):
    """One query's tiles over bit-plane rows ``[c0, c0 + rows)`` (decoded in registers).

    The rows past the array's last whole tile come from the zero-padded ``ptail``.
    """
    half = memory.shape[-1]  # [-1]: numba 0.60 types this line for 2-D memory too
    steps = -(-d // INT8_VECTOR)
    shape = BOTH_PLANES if both else PLANES + need
    m = memory.shape[0]
    for r0 in range(0, rows, INT8_ROWS):
        r = c0 + r0
        if r + INT8_ROWS <= m:
            _int8_tile(shape, qflat, 0, width, pflat, 2 * half * r, 2 * half, steps, half,
                       buf, r0, ostride, ostride, nnz, r0)
        else:
            ptail[:] = 0
            ptail[:2 * half * (m - r)] = pflat[2 * half * r:2 * half * m]
            _int8_tile(shape, qflat, 0, width, ptail, 0, 2 * half, steps, half, buf, r0,
                       ostride, ostride, nnz, r0)


@jit(error_model="numpy")  # no zero-division checks: they keep LLVM from vectorizing the scores
def _search_int8(queries, memory, k, metric, d, parts, per_block, out_s, out_i, t0, t1):
    """Tasks ``[t0, t1)``: query tiles from ``per_block * (t // parts)``, memory part ``t % parts``.

    As :func:`_search`, on the int8 dots of :func:`._llvm.popcount.tile_int8`: int8
    memory rows are read in place (the last few rows of a part from a zero-padded copy),
    bit-plane rows decoded a chunk at a time. The check of the rows' values (and their
    non-zeros, for cosine and Hamming) comes with the chunk's first tile (fused into a
    one-query tile, a pass of its own before a batch tile). Each task lays out its block
    of queries (:func:`_int8_queries`; zero queries complete the last tile). Returns
    non-zero where a value is not a trit (then nothing else is meaningful).
    """
    both = metric == hv.HAMMING
    need = CHECK if metric == hv.DOT else NONZEROS
    nq = queries.shape[0]
    tq = 1 if both or nq == 1 else INT8_BATCH
    tiles = -(-nq // tq)
    width = 64 * ((d + 63) // 64)
    codes = np.zeros((per_block * tq, 2, width), np.int8)
    qflat = codes.reshape(-1)
    qsum = np.empty(per_block * tq, np.int64)
    qnnz = np.empty(per_block * tq, np.int64)
    m = memory.shape[0]
    packed = memory.ndim == 3
    steps, rest = d // INT8_VECTOR, d % INT8_VECTOR
    ostride = INT8_CHUNK + INT8_ROWS
    scratch = np.zeros(ostride * width, np.int8)
    flat = scratch if packed else memory.reshape(-1)
    direct = packed and nq == 1  # one query reads the planes, decoded in registers
    pflat = memory.reshape(-1).view(np.uint8)  # the planes' bytes (unread unless direct)
    half = memory.shape[-1] if packed else 0  # bytes of a plane ([2] fails 0.60 on 2-D)
    ptail = np.zeros(INT8_ROWS * 2 * half, np.uint8)  # the last rows, zero-padded
    buf = np.empty(2 * tq * ostride, np.int32)
    nnz = np.empty(ostride, np.int32)
    scores = np.empty(ostride)
    bplane = tq * ostride
    bad = np.uint64(0)
    laid = -1
    for t in range(t0, t1):
        part = t % parts
        first = per_block * (t // parts)
        lo = m * part // parts
        hi = m * (part + 1) // parts
        qlo, qhi = first * tq, min(nq, (first + per_block) * tq)
        if first != laid:  # the tasks of a block of queries come one after the other
            laid = first
            codes[:] = 0
            bad |= np.uint64(_int8_queries(queries, d, codes, qsum, qnnz, qlo, qhi))
        out_s[part, qlo:qhi] = -np.inf
        out_i[part, qlo:qhi] = 0
        for c0 in range(lo, hi, INT8_CHUNK):
            rows = min(hi - c0, INT8_CHUNK)
            if direct:
                _planes_tile(memory, pflat, ptail, qflat, width, c0, rows, both, need, d, buf,
                             ostride, nnz)
            elif packed:
                bad |= _int8_rows(memory, c0, c0 + rows, scratch, width)
            elif rows % INT8_ROWS:  # the last rows from a zero-padded copy
                tail = rows - rows % INT8_ROWS
                _int8_rows(memory, c0 + tail, c0 + rows, scratch, width)
            for u in range(first, min(tiles, first + per_block)):
                q0 = u * tq
                for r0 in range(0, 0 if direct else rows, INT8_ROWS):
                    if packed:
                        src, at, stride = scratch, r0 * width, width
                    elif r0 + INT8_ROWS > rows:
                        src, at, stride = scratch, 0, width
                    else:
                        src, at, stride = flat, (c0 + r0) * d, d
                    if u > first:
                        shape = BOTH if both else BATCH
                    elif tq == 1:  # the rows' pass fused into a one-query tile
                        shape = BOTH_ROWS if both else ONE + need
                    else:
                        shape = BATCH
                        bad |= np.uint64(_int8_tile(ROWS + need, qflat, 0, width, src, at,
                                                    stride, steps, rest, buf, 0, ostride, 0,
                                                    nnz, r0) > 2)
                    top = _int8_tile(shape, qflat, 2 * width * (q0 - first * tq), width, src,
                                     at, stride, steps, rest, buf, r0, ostride, bplane, nnz, r0)
                    bad |= np.uint64(top > 2)
                for j in range(min(tq, nq - q0)):
                    q = q0 + j
                    i = q - first * tq
                    _int8_scores(metric, buf, j * ostride, bplane, qsum[i], qnnz[i], nnz, d,
                                 rows, scores)
                    kth = out_s[part, q, k - 1]
                    above = 0
                    for r in range(rows):  # vectorized: most chunks have no row above the k-th
                        above += scores[r] > kth
                    for r in range(rows if above else 0):
                        if scores[r] > kth:  # a tie never displaces the earlier row
                            _offer(out_s, out_i, part, q, k, scores[r], c0 + r)
                            kth = out_s[part, q, k - 1]
    return bad


def search_int8(queries: np.ndarray, memory: np.ndarray, k: int, metric: int, d: int):
    """The best ``k <= KSTREAM`` rows of ``memory`` for each query on int8 dots.

    None where a value is not a trit.

    ``queries`` and ``memory``: int8 rows or bit planes, C-contiguous.
    """
    nq, m = len(queries), len(memory)
    if memory.ndim == 3:  # bit planes: words read as bytes
        queries, memory = queries.view(np.uint8), memory.view(np.uint8)
    tiles = -(-nq // (1 if metric == hv.HAMMING or nq == 1 else INT8_BATCH))
    if nq * memory.nbytes < MIN_PARALLEL_BYTES:  # one task on this thread (run's rule)
        best_s, best_i = np.empty((1, nq, k)), np.empty((1, nq, k), np.int64)
        if _search_int8(queries, memory, k, metric, d, 1, tiles, best_s, best_i, 0, 1):
            return None
        return best_i[0], best_s[0]
    # blocks of queries first: each reads the whole memory, from L2 at these d, and its
    # rows' top k are final (parts of the memory each find their own first, then merge:
    # 1,000 x 1,000 at d = 256 on one thread took 1.70 ms as one part, 2.03 as 4, 2.29 as 8)
    spread = threads() * CHUNKS_PER_THREAD
    blocks = min(tiles, spread)
    parts = max(1, min(-(-m // INT8_CHUNK), spread // blocks))
    per_block = -(-tiles // blocks)
    count = -(-tiles // per_block) * parts
    best_s = np.empty((parts, nq, k))  # -inf and 0 from each task, for its queries and part
    best_i = np.empty((parts, nq, k), np.int64)
    if run(_search_int8, count, nq * memory.nbytes, queries, memory, k, metric, d, parts,
           per_block, best_s, best_i):
        return None
    if parts == 1:
        return best_i[0], best_s[0]
    cand_i = best_i.transpose(1, 0, 2).reshape(nq, parts * k)
    cand_s = best_s.transpose(1, 0, 2).reshape(nq, parts * k)
    pick, s = topk(cand_s, k)  # ties: lower row
    return np.take_along_axis(cand_i, pick, 1), s


@register("vsa.search", "cpu")
def search(queries, memory, k: int, metric: int, packed: bool, d: int):
    """The best ``k`` rows; None where an int8 value is not a trit (the caller names it).

    Small ``d`` (:func:`int8_route`) takes the int8 dots, which check int8 values as
    they read them; the bit-plane tiles check them first (:func:`.vsa.check`).
    """
    queries, memory = np.ascontiguousarray(queries), np.ascontiguousarray(memory)
    if k <= KSTREAM and int8_route(d, metric, len(queries), packed):
        return search_int8(queries, memory, k, metric, d)
    if not packed and not (check(queries) and check(memory)):
        return None
    return search_tiles(queries, memory, k, metric, d)
