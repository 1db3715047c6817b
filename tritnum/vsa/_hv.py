"""Hypervector inputs at the public boundary: checked, seen as rows, and results wrapped back."""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._dispatch import call, place, resolve_device
from .._formats import FORMATS
from .._interop import (
    HOST,
    Origin,
    as_rows,
    contiguous,
    for_device,
    is_dask,
    native,
    origin,
    to_host,
)
from .._validate import raise_invalid_trits, trit_array
from ..errors import FormatError, ShapeMismatchError
from ..packing import PackedTrits, ensure_valid

Hypervectors = Any  # an int8 array (NumPy or GPU) or a "bitplane" PackedTrits
BITPLANE = FORMATS["bitplane"]  # the format of packed hypervectors, for the pack/unpack ops


@dataclass
class HV:
    """Validated hypervectors: ``rows`` of ``d`` trits with leading shape ``lead``."""

    rows: Any  # (R, d) int8, or (R, 2, nw) uint64 when packed; host or GPU
    lead: tuple[int, ...]
    d: int
    packed: bool
    like: Origin  # where, and in which framework, results go back

    @property
    def shape(self) -> tuple[int, ...]:
        return (*self.lead, self.d)


def _int8_rows(a: Any, lead: tuple[int, ...], d: int) -> Any:
    """``a`` as C-contiguous int8 ``(rows, d)`` where it lives (a view when it already is)."""
    return contiguous(a, np.int8).reshape(math.prod(lead), d)


def lazy(*xs: Any) -> bool:
    """Whether any of ``xs`` is a Dask array or a lazy PackedTrits (the Dask layer's to run)."""
    return any(is_dask(x.data if isinstance(x, PackedTrits) else x) for x in xs)


def resolve(device: str, *xs: Any) -> str:
    """The device an operation on hypervectors ``xs`` runs on (see ``resolve_device``)."""
    return resolve_device(device, *(x.data if isinstance(x, PackedTrits) else native(x)
                                    for x in xs))


def bitplane_only(x: PackedTrits, name: str) -> None:
    """FormatError unless ``x`` is packed in "bitplane", the format of packed hypervectors."""
    if x.format != "bitplane":
        raise FormatError(
            f"{name}: VSA operations take dense int8 trits or 'bitplane' PackedTrits, "
            f"got {x.format!r}; convert with .to('bitplane')"
        )


def hypervectors(x: Any, dev: str, name: str = "hypervectors", *, kernel_checks: bool = False
                 ) -> HV:
    """Check ``x`` (dense trits or bitplane PackedTrits) and see it as rows on ``dev``.

    ``kernel_checks``: int8 values are left to the kernel that reads them, which
    reports bad ones back (one pass over the data instead of two); other dtypes
    are still checked here, before they are narrowed to int8.
    """
    if isinstance(x, PackedTrits):
        bitplane_only(x, name)
        ensure_valid(x, dev)
        rows = for_device(as_rows(x.data, 2), dev)
        return HV(rows, x.shape[:-1], x.shape[-1], True, x._like)
    a = trit_array(x, name)
    if is_dask(a):  # an op without a Dask layer of its own (Centroid, encode_features) reads it
        a = to_host(a)
    lead, d = tuple(a.shape)[:-1], int(tuple(a.shape)[-1])
    if a.size and not (kernel_checks and a.dtype == np.int8) and not call(
            "vsa.check", dev, as_rows(a)):
        raise_invalid_trits(a, name)
    rows = for_device(_int8_rows(a, lead, d), dev)
    return HV(rows, lead, d, False, origin(x))


def either(a: HV, b: HV) -> Origin:
    """Where the result of an operation on ``a`` and ``b`` goes: the first not on the host."""
    return a.like if a.like != HOST else b.like


def new(dev: str) -> Origin:
    """Where new hypervectors made on ``dev`` go: the GPU for ``"cuda"``, else NumPy."""
    return Origin("numba", True) if dev == "cuda" else HOST


def same_kind(a: HV, b: HV, op: str) -> None:
    """Both dense or both bitplane, of the same dimension ``d``."""
    if a.packed != b.packed:
        raise TypeError(
            f"{op}: both operands must be dense int8 arrays or both 'bitplane' PackedTrits; "
            "convert with tn.pack(x, 'bitplane') or tn.unpack(p)"
        )
    if a.d != b.d:
        raise ShapeMismatchError(
            f"{op}: hypervectors of dimension {a.d} and {b.d} do not match",
            expected=a.d, actual=b.d,
        )


def broadcast_lead(a: HV, b: HV, op: str) -> tuple[int, ...]:
    """The broadcast leading shape of ``a`` and ``b`` (ShapeMismatchError if none)."""
    if a.lead == b.lead:
        return a.lead
    try:
        return np.broadcast_shapes(a.lead, b.lead)
    except ValueError:
        raise ShapeMismatchError(
            f"{op}: leading shapes {a.lead} and {b.lead} do not broadcast",
            expected=a.lead, actual=b.lead,
        ) from None


def broadcast_rows(a: HV, b: HV, op: str) -> tuple[tuple[int, ...], np.ndarray, np.ndarray]:
    """Broadcast leading shape and the row of ``a`` and of ``b`` behind each output row."""
    lead = broadcast_lead(a, b, op)

    def index(h: HV) -> np.ndarray:
        rows = np.arange(math.prod(h.lead), dtype=np.int64)
        if h.lead == lead:  # row i meets row i: no broadcasting to do
            return rows
        return np.ascontiguousarray(np.broadcast_to(rows.reshape(h.lead), lead).reshape(-1))

    return lead, index(a), index(b)


def wrap(rows: Any, lead: tuple[int, ...], d: int, packed: bool, like: Origin) -> Any:
    """Kernel output rows as the caller's kind: int8 array or bitplane PackedTrits."""
    if packed:
        if like is HOST and type(rows) is np.ndarray:
            return PackedTrits._host_result(rows, (*lead, d), BITPLANE)
        return PackedTrits._encoded(rows, (*lead, d), "bitplane", like)
    return place(rows, like, (*lead, d))


def place_scores(scores: Any, lead: tuple[int, ...], like: Origin) -> Any:
    """Scores of shape ``lead``; a NumPy scalar for a single pair on the host."""
    if like == HOST and lead == ():
        return to_host(scores).reshape(())[()]
    return place(scores, like, lead)


def count(value: Any, name: str, minimum: int = 0) -> int:
    """An integer argument >= ``minimum`` (TypeError or ValueError otherwise)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got a bool")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value
