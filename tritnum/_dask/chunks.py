"""Chunks and graph keys: the packed axis whole, blocks as in-memory objects, shared arguments."""

from __future__ import annotations

import math
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.base import get_scheduler

from .._formats import Format, get_format
from ..packing import PackedTrits


def meta(dtype: Any, ndim: int) -> np.ndarray:
    """An empty NumPy array of ``dtype`` and ``ndim``: the ``meta`` of a lazy result."""
    return np.empty((0,) * ndim, dtype)


def whole(x: Any, tail: int, name: str) -> Any:
    """``x`` with its last ``tail`` axes one chunk each (rechunked when they are split).

    ValueError for chunks of unknown size (a Dask array filtered by a mask).
    """
    if any(math.isnan(c) for sizes in x.chunks for c in sizes):
        raise ValueError(f"{name} is a Dask array of unknown chunk sizes; call "
                         f"{name}.compute_chunk_sizes() first")
    return x.rechunk({ax: -1 for ax in range(x.ndim - tail, x.ndim)})


def lead(n: int, prefix: str = "i") -> tuple[str, ...]:
    """Blockwise indices of ``n`` leading axes."""
    return tuple(f"{prefix}{k}" for k in range(n))


def tail(fmt: Format, prefix: str = "") -> tuple[str, ...]:
    """Blockwise indices of the packed axes of ``fmt`` (planes and words, or bytes)."""
    return (f"{prefix}p", f"{prefix}w") if fmt.planes == 2 else (f"{prefix}w",)


def tail_sizes(fmt: Format, n: int) -> tuple[int, ...]:
    """Sizes of the packed axes of ``fmt`` for rows of ``n`` trits."""
    return fmt.data_shape((n,))


def lazy_packed(data: Any, shape: tuple[int, ...], fmt: Format, valid: bool = True) -> PackedTrits:
    """A PackedTrits over the Dask array ``data``; ``valid``: written by tritnum's encoders."""
    packed = PackedTrits(data, shape, fmt.name, copy=False)
    packed._valid = valid
    return packed


def block_of(data: np.ndarray, n: int, format: str, valid: bool) -> PackedTrits:
    """One chunk of a lazy PackedTrits, in memory (its codes checked on use unless ``valid``)."""
    fmt = get_format(format)
    shape = (*data.shape[: data.ndim - fmt.planes], n)
    if valid:
        return PackedTrits._encoded(data, shape, fmt.name)
    return PackedTrits(data, shape, fmt.name, copy=False)


def _client() -> Any:
    """The distributed client that is Dask's scheduler now, else None."""
    client = getattr(get_scheduler(), "__self__", None)  # the bound method client.get
    return client if type(client).__name__ == "Client" else None


def shared(obj: Any) -> Any:
    """``obj`` as one argument that every task of a graph reads, sent to each worker once.

    Under a distributed client it is scattered to all workers (a Future); else
    it is one graph key (a Delayed) that every task depends on, never copied
    into each task.
    """
    if obj is None:
        return None
    client = _client()
    if client is not None:
        return client.scatter(obj, broadcast=True, hash=False)
    return dask.delayed(obj, pure=False, traverse=False)


def as_dask(a: Any, chunks: Any = -1) -> Any:
    """``a`` as a Dask array (in one chunk, or ``chunks``, when it is held in memory)."""
    return a if isinstance(a, da.Array) else da.from_array(np.asarray(a), chunks=chunks)
