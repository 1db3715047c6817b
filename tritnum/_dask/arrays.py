"""Packing of Dask arrays: pack, unpack, format conversion and dequantization, chunk by chunk."""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
from dask.base import normalize_token

from .._dispatch import resolve_device
from .._formats import Format
from ..packing import PackedTrits
from ..packing import pack as pack_trits
from ..packing import unpack as unpack_trits
from ..quantize import TernaryTensor
from .chunks import as_dask, block_of, lazy_packed, lead, meta, tail, tail_sizes, whole


def pack(a: Any, fmt: Format, device: str) -> PackedTrits:
    """A lazy PackedTrits of the Dask trits ``a`` (integer dtype, checked by the caller)."""
    dev = resolve_device(device)
    a = whole(a, 1, "trits")
    ix, out = lead(a.ndim - 1), tail(fmt)
    data = da.blockwise(_pack_block, ix + out, a, (*ix, "t"), fmt.name, None, dev, None,
                        new_axes=dict(zip(out, tail_sizes(fmt, a.shape[-1]), strict=True)),
                        concatenate=True, meta=meta(fmt.dtype, len(ix + out)))
    return lazy_packed(data, a.shape, fmt)


def _pack_block(trits: np.ndarray, format: str, dev: str) -> np.ndarray:
    return pack_trits(trits, format, device=dev).data


def unpack(packed: PackedTrits, device: str) -> Any:
    """The int8 trits of a lazy PackedTrits, lazily."""
    dev = resolve_device(device)
    fmt, n = packed._format, packed.shape[-1]
    ix = lead(packed.ndim - 1)
    return da.blockwise(_unpack_block, (*ix, "t"), packed.data, ix + tail(fmt), n, None,
                        fmt.name, None, packed._valid, None, dev, None, new_axes={"t": n},
                        concatenate=True, meta=meta(np.int8, packed.ndim))


def _unpack_block(data: np.ndarray, n: int, format: str, valid: bool, dev: str) -> np.ndarray:
    return unpack_trits(block_of(data, n, format, valid), device=dev)


def convert(packed: PackedTrits, dst: Format, device: str) -> PackedTrits:
    """A lazy PackedTrits re-encoded in ``dst``, chunk by chunk."""
    dev = resolve_device(device)
    src, n = packed._format, packed.shape[-1]
    ix, out = lead(packed.ndim - 1), tail(dst, "o")
    data = da.blockwise(_convert_block, ix + out, packed.data, ix + tail(src), n, None,
                        src.name, None, dst.name, None, packed._valid, None, dev, None,
                        new_axes=dict(zip(out, tail_sizes(dst, n), strict=True)),
                        concatenate=True, meta=meta(dst.dtype, len(ix + out)))
    return lazy_packed(data, packed.shape, dst)


def _convert_block(data: np.ndarray, n: int, src: str, dst: str, valid: bool,
                   dev: str) -> np.ndarray:
    return block_of(data, n, src, valid).to(dst, device=dev).data


def dequantize(t: TernaryTensor, device: str) -> Any:
    """The float32 weights of a lazy TernaryTensor, lazily (scales lazy or in memory)."""
    dev = resolve_device(device)
    packed = t.packed
    fmt, n = packed._format, packed.shape[-1]
    ix = lead(packed.ndim - 1)
    scales = as_dask(t.scales)
    if t.group_size is None:
        scale_ix: tuple[str, ...] = ()
    else:
        scales = scales.rechunk((*packed.data.chunks[: len(ix)], -1))
        scale_ix = (*ix, "g")
    return da.blockwise(_dequantize_block, (*ix, "t"), packed.data, ix + tail(fmt), scales,
                        scale_ix, n, None, fmt.name, None, packed._valid, None, t.group_size,
                        None, dev, None, new_axes={"t": n}, concatenate=True,
                        meta=meta(np.float32, packed.ndim))


def _dequantize_block(data: np.ndarray, scales: np.ndarray, n: int, format: str, valid: bool,
                      group_size: int | None, dev: str) -> np.ndarray:
    packed = block_of(data, n, format, valid)
    return TernaryTensor(packed, scales, group_size, copy=False).dequantize(device=dev)


def packed_token(data: Any, shape: tuple[int, ...], fmt: str, valid: Any) -> tuple[Any, ...]:
    """Dask's token of a PackedTrits over the Dask array ``data`` (``__dask_tokenize__``)."""
    return ("PackedTrits", normalize_token(data), shape, fmt, valid)
