"""Sharded associative memory: top-k search of a memory held in Dask chunks of rows.

Each task searches one chunk of memory rows for one chunk of queries with the
in-memory :func:`tritnum.vsa.search` (a dense chunk is packed to bit planes
first) and tags its ``min(k, rows)`` best with their memory indices. A tree
reduction merges the candidates of the chunks, keeping the ``k`` best by
(score, then lower index): the rule of the in-memory search, which picks each
chunk's candidates, so the merge ends with the exact top ``k`` of the whole
memory.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import dask.array as da
import numpy as np
from dask.layers import ArraySliceDep

from .._formats import FORMATS
from .._kernels.shared.select import topk
from ..packing import pack as pack_trits
from ..vsa._hv import resolve
from ..vsa.similarity_search import search as search_rows
from ..vsa.similarity_search import search_k
from .arrays import pack
from .chunks import block_of, meta
from .vsa import Kind, Lazy, hypervectors

BITPLANE = FORMATS["bitplane"]
# a candidate: its score (float64 holds every integer dot product exactly) and memory row
CANDIDATE = np.dtype([("score", np.float64), ("index", np.int64)])


def search(queries: Any, memory: Any, k: Any, metric: str, device: str) -> tuple[Any, Any]:
    """Lazy ``(indices, scores)`` of the top ``k`` memory rows of each query."""
    dev = resolve(device)
    hq, hm = hypervectors(queries, "queries"), hypervectors(memory, "memory")
    k = search_k(hq, hm, k)  # type: ignore[arg-type]
    q, q_valid = _query_rows(hq, dev)
    mem = hm.array
    ks = tuple(min(k, rows) for rows in mem.chunks[0])
    mem_ix = ("j", "mp", "mw") if hm.packed else ("j", "mt")
    found = da.blockwise(
        _search_block, "qj", q, ("q", "qp", "qw"), mem, mem_ix,
        ArraySliceDep(mem.chunks[:1]), "j",  # where each chunk lies: not a graph key
        q_valid, None, hm.kind, None, k, None, metric, None, dev, None,
        align_arrays=False, adjust_chunks={"j": ks}, concatenate=True, meta=meta(CANDIDATE, 2))
    merge = partial(_merge, k=k)
    best = da.reduction(found, _candidates, merge, combine=merge, axis=1, keepdims=True,
                        dtype=CANDIDATE, concatenate=True, output_size=k, meta=meta(CANDIDATE, 2))
    scores = best["score"].astype(np.int64) if metric == "dot" else best["score"]
    shape = (*hq.lead, k)
    return best["index"].reshape(shape), scores.reshape(shape)


def _query_rows(hq: Lazy, dev: str) -> tuple[Any, bool]:
    """The queries as bit-plane rows ``(R, 2, nw)``, packed once (not by every task)."""
    rows = hq.array.reshape((-1, *hq.array.shape[len(hq.lead):]))
    if hq.packed:
        return rows, hq.valid
    return pack(rows, BITPLANE, dev).data, True


def _search_block(q: np.ndarray, mem: np.ndarray, rows: tuple[slice], q_valid: bool, hm: Kind,
                  k: int, metric: str, dev: str) -> np.ndarray:
    """The top ``min(k, rows)`` of one chunk of memory rows, as candidates.

    ``rows``: the chunk's slice of the memory's rows (its first row numbers them).
    """
    if len(mem) == 0:  # an empty chunk: no candidates (the other chunks hold the rows)
        return np.empty((len(q), 0), CANDIDATE)
    queries = block_of(q, hm.d, "bitplane", q_valid)
    vectors = hm.block(mem) if hm.packed else pack_trits(mem, "bitplane", device=dev)
    idx, scores = search_rows(queries, vectors, min(k, len(mem)), metric, device=dev)
    out = np.empty(idx.shape, CANDIDATE)
    out["index"] = idx + rows[0].start
    out["score"] = scores
    return out


def _candidates(found: np.ndarray, axis: Any, keepdims: bool) -> np.ndarray:
    return found


def _merge(found: np.ndarray, axis: Any, keepdims: bool, k: int) -> np.ndarray:
    """The ``k`` best candidates of each row: higher score first, then lower memory index.

    The reduction concatenates the chunks' candidates in chunk order, each chunk's
    equal scores in index order: equal scores stand in index order, and ``topk``
    gives a tie to the earlier column.
    """
    if found.shape[1] == 0:  # chunks that were all empty
        return found
    best, _ = topk(np.ascontiguousarray(found["score"]), min(k, found.shape[1]))
    return np.take_along_axis(found, best, axis=1)
