"""Quantization of Dask arrays: weights (absmean) and activations (absmax), chunk by chunk.

Scales per row or per group belong to their chunk: one pass, each task runs
:func:`tritnum.quantize` on its rows. A scale per tensor needs every chunk's
sum first: one reduction gathers the rows' float64 sums (tiny: one number a
row), adds them up in row order as the in-memory code does, and the packing
tasks read that one scale. Per-tensor activations work alike, with the largest
|x| of every chunk.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import dask
import dask.array as da
import numpy as np

from .._dispatch import call, resolve_device
from .._formats import Format
from .._interop import as_rows, to_host
from ..quantize import TernaryTensor, abs_sums, scales_of
from ..quantize import quantize as quantize_weights
from ..quantize import quantize_activations as quantize_rows
from .chunks import lazy_packed, lead, meta, tail, tail_sizes, whole


def in_memory(t: TernaryTensor) -> TernaryTensor:
    """A lazy TernaryTensor computed: its trits and scales from one pass over its graph."""
    packed, scales = dask.compute(t.packed, t.scales)
    return TernaryTensor(packed, scales, t.group_size, copy=False)


def quantize(w: Any, group_size: int | None, fmt: Format, device: str) -> TernaryTensor:
    """A lazy TernaryTensor of the Dask weights ``w`` (float dtype, arguments checked)."""
    dev = resolve_device(device)
    w = whole(w, 1, "w")
    n = w.shape[-1]
    ix, out = lead(w.ndim - 1), tail(fmt)
    if group_size is not None:
        sizes = dict(zip(out, tail_sizes(fmt, n), strict=True))
        sizes["g"] = n // group_size
        data, scales = da.apply_gufunc(
            _quantize_block, f"(n)->({','.join(out)}),(g)", w, output_sizes=sizes,
            group_size=group_size, format=fmt.name, dev=dev,
            meta=(meta(fmt.dtype, len(ix + out)), meta(np.float32, w.ndim)))
        return TernaryTensor(lazy_packed(data, w.shape, fmt), scales, group_size)
    scale = da.reduction(w, partial(_row_sums, dev=dev), partial(_tensor_scale, shape=w.shape),
                         combine=_gathered, axis=tuple(range(w.ndim)), dtype=np.float32,
                         concatenate=True, meta=np.empty((), np.float32))
    data = da.blockwise(_pack_block, ix + out, w, (*ix, "t"), scale, (), fmt, None, dev, None,
                        new_axes=dict(zip(out, tail_sizes(fmt, n), strict=True)),
                        concatenate=True, meta=meta(fmt.dtype, len(ix + out)))
    return TernaryTensor(lazy_packed(data, w.shape, fmt), scale, None)


def _quantize_block(w: np.ndarray, group_size: int, format: str,
                    dev: str) -> tuple[np.ndarray, np.ndarray]:
    t = quantize_weights(w, group_size=group_size, format=format, device=dev)
    return t.packed.data, t.scales


def _row_sums(w: np.ndarray, axis: Any, keepdims: bool, dev: str) -> np.ndarray:
    """float64 sums of |w| of each row of a chunk, ``(*rows, 1)`` (reduction's first step)."""
    return abs_sums(as_rows(w), dev, w).reshape((*w.shape[:-1], 1))


def _gathered(sums: np.ndarray, axis: Any, keepdims: bool) -> np.ndarray:
    """The chunks' row sums, concatenated in row order by the reduction (nothing added yet)."""
    return sums


def _tensor_scale(sums: np.ndarray, axis: Any, keepdims: bool,
                  shape: tuple[int, ...]) -> np.ndarray:
    """The tensor's scale from all row sums, added in row order as in memory."""
    return np.asarray(scales_of(sums.reshape(-1, 1), shape, None)[0, 0])


def _pack_block(w: np.ndarray, scale: np.ndarray, fmt: Format, dev: str) -> np.ndarray:
    rows = as_rows(w)
    scales = np.full((rows.shape[0], 1), scale, np.float32)
    return to_host(call("quantize_pack", dev, rows, scales, fmt)).reshape(fmt.data_shape(w.shape))


def quantize_activations(x: Any, axis: int | None, device: str) -> tuple[Any, Any]:
    """Lazy int8 activations and scales of the Dask ``x`` (float dtype, axis checked)."""
    dev = resolve_device(device)
    x = whole(x, 1, "x")
    if axis is not None:
        return da.apply_gufunc(_activations_block, "(n)->(n),()", x, dev=dev,
                               meta=(meta(np.int8, x.ndim), meta(np.float32, x.ndim - 1)))
    amax = da.reduction(x, _chunk_amax, _amax, axis=tuple(range(x.ndim)), dtype=np.float32,
                        meta=np.empty((), np.float32))
    q = x.map_blocks(_tensor_block, amax, dev, dtype=np.int8, meta=meta(np.int8, x.ndim))
    scale = amax.map_blocks(_tensor_scale_of, dtype=np.float32, meta=np.empty((), np.float32))
    return q, scale


def _activations_block(x: np.ndarray, dev: str) -> tuple[np.ndarray, np.ndarray]:
    return quantize_rows(x, device=dev)


def _chunk_amax(x: np.ndarray, axis: Any, keepdims: bool) -> np.ndarray:
    """Largest |x| of a chunk in float32; the in-memory op names a value that is not finite."""
    with np.errstate(over="ignore"):
        m = _amax(x.astype(np.float32), axis, keepdims)
    if not np.isfinite(m).all():
        quantize_rows(x, axis=None)  # raises ValueError naming the first (within the chunk)
    return m


def _amax(x: np.ndarray, axis: Any, keepdims: bool) -> np.ndarray:
    return np.abs(x).max(axis=axis, keepdims=keepdims, initial=np.float32(0))


def _tensor_block(x: np.ndarray, amax: np.ndarray, dev: str) -> np.ndarray:
    """The chunk quantized with the tensor's ``amax``.

    The per-tensor kernel scales by the largest |x| of the rows it is given: one
    more row holding the tensor's largest |x| makes that the tensor's (the
    chunk's own are no larger), and that row is dropped again.
    """
    rows = as_rows(x)
    extra = np.zeros((1, rows.shape[1]), rows.dtype)
    extra[0, :1] = amax
    q, _ = quantize_rows(np.concatenate([rows, extra]), axis=None, device=dev)
    return to_host(q)[:-1].reshape(x.shape)


def _tensor_scale_of(amax: np.ndarray) -> np.ndarray:
    """The returned per-tensor scale: ``max(amax, 1e-5) / 127`` as the in-memory op gives it."""
    return quantize_rows(np.asarray(amax, np.float32).reshape(1, 1), axis=None)[1]
