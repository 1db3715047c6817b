"""Batched inference on Dask activations: ``linear`` (and ``BitLinear``) chunk by chunk.

Each task runs :func:`tritnum.linear` on one chunk of rows of ``x``. The weights
and the bias are shared (:func:`~tritnum._dask.chunks.shared`): sent to every
worker once, not with every task. Lazy weights (from ``tn.quantize`` of a Dask
array) are gathered into one graph key that every task reads.
"""

from __future__ import annotations

from typing import Any

import dask
import dask.array as da
import numpy as np

from .._dispatch import resolve_device
from ..errors import ShapeMismatchError
from ..matmul import _vector
from ..matmul import linear as linear_rows
from ..packing import PackedTrits, ensure_valid
from ..quantize import TernaryTensor
from .chunks import as_dask, lead, meta, shared, whole


def linear(x: Any, w: TernaryTensor, bias: Any, mode: str, x_scale: Any, device: str) -> Any:
    """Lazy ``linear(x, w, bias)`` for Dask (or in-memory) ``x`` and lazy or in-memory ``w``."""
    dev = resolve_device(device)
    x = whole(as_dask(x), 1, "x")
    ix = lead(x.ndim - 1)
    scales, scale_ix = _row_scales(x_scale, x), ix
    if scales is None:
        scale_ix = None
    if isinstance(w.packed.data, da.Array):
        weights = dask.delayed(_concrete, pure=True)(w.packed.data, w.scales, w.shape, w.format,
                                                     w.packed._valid, w.group_size)
    else:
        ensure_valid(w.packed, dev)  # once, here: the workers get checked weights
        weights = shared(w)
    return da.blockwise(_linear_block, (*ix, "o"), x, (*ix, "i"), scales, scale_ix, weights,
                        None, shared(bias), None, mode, None, dev, None,
                        new_axes={"o": w.shape[0]}, concatenate=True,
                        meta=meta(np.float32, x.ndim))


def _row_scales(x_scale: Any, x: Any) -> Any:
    """``x_scale`` as float32 of ``x.shape[:-1]``, chunked as the rows of ``x`` (or None)."""
    if x_scale is None:
        return None
    rows = x.shape[:-1]
    if isinstance(x_scale, da.Array):
        if x_scale.dtype.kind not in "fiu":
            raise TypeError(f"x_scale must be real numbers, got dtype {x_scale.dtype}")
        try:
            scales = da.broadcast_to(x_scale, rows).astype(np.float32)
        except ValueError:
            raise ShapeMismatchError(f"x_scale must have shape {rows}, got {x_scale.shape}",
                                     expected=rows, actual=x_scale.shape) from None
    else:
        scales = da.from_array(_vector(x_scale, "x_scale", rows))
    return scales.rechunk(x.chunks[:-1])


def _concrete(data: np.ndarray, scales: np.ndarray, shape: tuple[int, ...], format: str,
              valid: bool, group_size: int | None) -> TernaryTensor:
    """Lazy weights, gathered: the in-memory TernaryTensor every task reads."""
    packed = PackedTrits(data, shape, format, copy=False)
    packed._valid = valid
    return TernaryTensor(packed, scales, group_size, copy=False)


def _linear_block(x: np.ndarray, x_scale: np.ndarray | None, w: TernaryTensor, bias: Any,
                  mode: str, dev: str) -> np.ndarray:
    return linear_rows(x, w, bias, activations=mode, x_scale=x_scale, device=dev)
