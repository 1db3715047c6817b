"""Similarity of ternary hypervectors and nearest-neighbour search among them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from .._dispatch import call, host_cpu, kernel, place
from .._interop import HOST, dask_layer
from .._kernels.shared import vsa as _hv_math
from .._validate import choice
from ..errors import ShapeMismatchError
from ..packing import PackedTrits
from ..typing import Device, Metric
from ._hv import (
    BITPLANE,
    HV,
    Hypervectors,
    broadcast_rows,
    count,
    either,
    hypervectors,
    lazy,
    place_scores,
    resolve,
)
from ._hv import same_kind as _same_kind
from .algebra import _host_pair

__all__ = ["search", "similarity"]

_INT8 = np.dtype(np.int8)


def _metric(metric: str) -> int:
    return _hv_math.METRICS[choice(metric, "metric", _hv_math.METRICS)]


def _scores_out(s: Any, metric: int) -> Any:
    return s.astype(np.int64) if metric == _hv_math.DOT and isinstance(s, np.ndarray) else s


def _checked(*rows: np.ndarray) -> bool:
    """Whether every int8 row holds only -1, 0 and 1 (the CPU kernel's check)."""
    check = kernel("vsa.check", "cpu")
    return all(check(r) for r in rows)


def similarity(a: Hypervectors, b: Hypervectors, metric: Metric = "cosine", *,
               pairwise: bool = False, device: Device = "auto") -> Any:
    """Similarity of hypervectors pair by pair (leading shapes broadcast), or of all pairs.

    By default row ``i`` of ``a`` meets row ``i`` of ``b`` (NumPy broadcasting of
    the leading shapes: ``(n, d)`` against ``(n, d)`` gives ``(n,)``). With
    ``pairwise=True`` every row of ``a`` meets every row of ``b``: ``(n, d)``
    against ``(m, d)`` gives the ``(n, m)`` matrix, as torchhd's similarity does.

    ``"dot"``: the integer dot product. ``"cosine"``: ``dot / sqrt(nnz(a) nnz(b))``,
    0 when either is all zero. ``"hamming"``: the fraction of equal positions.

    Parameters
    ----------
    a, b : array_like of int or PackedTrits
        Same kind and dimension ``d``; ``a[..., None, :]`` against ``b[None]`` gives
        all pairs.
    metric : {"cosine", "dot", "hamming"}
        The measure.
    pairwise : bool
        All pairs: the result has shape ``a.shape[:-1] + b.shape[:-1]``.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    numpy.ndarray or scalar
        int64 for "dot", float64 otherwise, of the broadcast leading shape (or
        ``a.shape[:-1] + b.shape[:-1]`` with ``pairwise``).

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> a = np.array([1, -1, 0, 1], dtype=np.int8)
    >>> b = np.array([[1, 1, 0, 1], [0, 0, 1, 0]], dtype=np.int8)
    >>> tn.vsa.similarity(a, b, "dot")
    array([1, 0])
    >>> tn.vsa.similarity(a, b)
    array([0.33333333, 0.        ])
    >>> tn.vsa.similarity(a, b[0], "hamming")
    np.float64(0.75)
    >>> tn.vsa.similarity(b, b, "dot", pairwise=True)
    array([[3, 0],
           [0, 1]])
    """
    code = _metric(metric)
    host = None if pairwise else _host_pair(a, b, device)
    if host is not None:
        ra, rb, rows, packed = host
        if packed or _checked(ra, rb):  # else the general route names the bad value
            s = kernel("vsa.similarity", "cpu")(ra, rb, rows, rows, code, packed, a.shape[-1])
            lead = a.shape[:-1]
            return s.reshape(lead) if lead else s[0]  # as place_scores: a scalar for one pair
    if lazy(a, b):
        return dask_layer().similarity(a, b, metric, pairwise, device)
    dev = resolve(device, a, b)
    ha = hypervectors(a, dev, "a")
    hb = hypervectors(b, dev, "b")
    _same_kind(ha, hb, "similarity")
    if pairwise:  # a's leading axes first, b's after: the outer product of the rows
        ha = replace(ha, lead=(*ha.lead, *(1,) * len(hb.lead)))
        hb = replace(hb, lead=(*(1,) * (len(ha.lead) - len(hb.lead)), *hb.lead))
    lead, ia, ib = broadcast_rows(ha, hb, "similarity")
    s = call("vsa.similarity", dev, ha.rows, hb.rows, ia, ib, code, ha.packed, ha.d)
    return place_scores(s, lead, either(ha, hb))


def search_k(hq: HV, hm: HV, k: Any) -> int:
    """``k`` checked against a memory ``hm`` of shape ``(m, d)`` and queries ``hq`` of its kind."""
    _same_kind(hq, hm, "search")
    if len(hm.lead) != 1:
        raise ShapeMismatchError(
            f"search: memory must be (m, d), got shape {hm.shape}",
            expected="(m, d)", actual=hm.shape)
    m = hm.lead[0]
    if m == 0:
        raise ValueError("search: the memory is empty (0 stored hypervectors); "
                         "add hypervectors before searching")
    k = count(k, "k", 1)
    if k > m:
        raise ValueError(f"search: k={k} is larger than the memory ({m} hypervectors)")
    return k


def search(queries: Hypervectors, memory: Hypervectors, k: int = 1, metric: Metric = "cosine",
           *, device: Device = "auto") -> tuple[Any, Any]:
    """The ``k`` most similar memory rows for each query, best first, ties to the lower index.

    Parameters
    ----------
    queries : array_like of int or PackedTrits
        ``(..., d)`` query hypervectors.
    memory : array_like of int or PackedTrits
        ``(m, d)`` stored hypervectors, the same kind as ``queries``, ``m >= 1``.
    k : int
        How many matches per query, ``1 <= k <= m``.
    metric : {"cosine", "dot", "hamming"}
        As for :func:`similarity`.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    indices : numpy.ndarray
        ``(..., k)`` int64 rows of ``memory``.
    scores : numpy.ndarray
        ``(..., k)`` their similarity (int64 for "dot", else float64).

    Notes
    -----
    A Dask array as ``memory`` (dense trits chunked along its rows, or a lazy
    "bitplane" PackedTrits such as ``random(..., chunks=...)`` makes) is a sharded
    memory: each task finds the top ``k`` of one chunk of rows (a dense chunk is
    packed to bit planes first), and a tree of merges keeps the best ``k`` of
    those, with the same tie rule: the exact top ``k`` of the whole memory. The
    results are then lazy Dask arrays, chunked as the queries' rows (which may
    be a Dask array too).

    Raises
    ------
    ValueError
        An empty memory, or ``k`` outside ``1 .. m``.
    ShapeMismatchError
        A memory that is not 2-D, or a different dimension ``d``.

    Examples
    --------
    >>> import tritnum as tn
    >>> memory = tn.vsa.random(100, 1000, seed=3)
    >>> idx, scores = tn.vsa.search(memory[[42, 7]], memory, k=2)
    >>> idx[:, 0], scores[:, 0]
    (array([42,  7]), array([1., 1.]))
    """
    code = _metric(metric)
    host = _host_search(queries, memory, device)
    if host is not None and type(k) is int and 1 <= k <= len(host[1]):
        rq, rm, packed = host
        found = kernel("vsa.search", "cpu")(rq, rm, k, code, packed, queries.shape[-1])
        if found is not None:  # else a value that is not a trit: the general route names it
            lead = (*queries.shape[:-1], k)
            return found[0].reshape(lead), _scores_out(found[1], code).reshape(lead)
    if lazy(queries, memory):
        return dask_layer().search(queries, memory, k, metric, device)
    dev = resolve(device, queries, memory)
    checks = dev == "cpu"  # the CPU kernel checks int8 values as it reads them
    hq = hypervectors(queries, dev, "queries", kernel_checks=checks)
    hm = hypervectors(memory, dev, "memory", kernel_checks=checks)
    k = search_k(hq, hm, k)
    found = call("vsa.search", dev, hq.rows, hm.rows, k, code, hq.packed, hq.d)
    if found is None:  # the CPU kernel met a value that is not a trit: name it
        hypervectors(queries, dev, "queries")
        hypervectors(memory, dev, "memory")
    idx, s = found
    s = _scores_out(s, code)
    like = either(hq, hm)
    return place(idx, like, (*hq.lead, k)), place(s, like, (*hq.lead, k))


def _host_search(queries: Any, memory: Any, device: str
                 ) -> tuple[np.ndarray, np.ndarray, bool] | None:
    """The rows of ``queries`` and ``memory`` for the CPU kernel, or None for the general route.

    The fast route of a search on the host (as :func:`.algebra._host_pair` for pairs):
    C-contiguous int8 NumPy arrays, or host "bitplane" PackedTrits with checked codes
    that unpack to NumPy; non-empty queries ``(..., d)`` and a non-empty memory ``(m, d)``.
    Returns the query rows, the memory rows and whether they are packed. Anything else
    (and every bad input) takes the general route and its typed errors; int8 values that
    are not trits are found by the kernel, which then returns None.
    """
    kind = type(queries)
    if kind is not type(memory) or not host_cpu(device):
        return None
    if kind is np.ndarray:
        if (queries.dtype is not _INT8 or memory.dtype is not _INT8 or memory.ndim != 2
                or not queries.ndim or not queries.size or not memory.size
                or queries.shape[-1] != memory.shape[1]
                or not (queries.flags.c_contiguous and memory.flags.c_contiguous)):
            return None
        return queries.reshape(-1, memory.shape[1]), memory, False
    if kind is not PackedTrits:
        return None
    dq, dm, sq, sm = queries.data, memory.data, queries.shape, memory.shape
    if (type(dq) is not np.ndarray or type(dm) is not np.ndarray or len(sm) != 2 or not sq
            or 0 in sq or 0 in sm or sq[-1] != sm[1] or queries._format is not BITPLANE
            or memory._format is not BITPLANE or not (queries._valid and memory._valid)
            or queries._like is not HOST or memory._like is not HOST):
        return None
    return dq.reshape(-1, *dq.shape[-2:]), dm, True
