"""Algebra of ternary hypervectors: bind, unbind, negate, bundle and permute."""

from __future__ import annotations

import functools
import math
import numbers
from typing import Any

import numpy as np

from .._dispatch import call, host_cpu, kernel
from .._interop import HOST, dask_layer, to_host
from .._kernels.shared import vsa as _hv_math
from .._validate import choice
from ..errors import ShapeMismatchError
from ..packing import PackedTrits
from ..typing import BindRule, Device
from ._hv import (
    BITPLANE,
    HV,
    Hypervectors,
    broadcast_rows,
    count,
    either,
    hypervectors,
    lazy,
    resolve,
)
from ._hv import same_kind as _same_kind
from ._hv import wrap as _wrap

# Internal API: the private names other modules use (tests/test_architecture_seams.py):
# vsa/generation.py (_rule) and the Dask layer's VSA ops (_dask/vsa.py).
_INTERNAL_API = ("_elementwise", "_host_pair", "_rule", "_weights")

__all__ = ["bind", "bundle", "negate", "permute", "unbind"]

_RULES = ("mul", "mod3")


def _rule(rule: str) -> str:
    return choice(rule, "rule", _RULES)


def _host_pair(a: Any, b: Any, device: str) -> tuple[Any, Any, np.ndarray, bool] | None:
    """Rows of ``a`` and ``b`` for a CPU kernel, or None when they need the general route.

    The fast route of one or a few hypervectors: both C-contiguous int8 NumPy arrays,
    or both host "bitplane" PackedTrits with checked codes that unpack to NumPy, of the
    same non-empty shape, on the CPU. Classified once here; anything else (and every
    bad input) takes the general route and its typed errors. Returns the two ``(R, ...)``
    row views, the row index ``arange(R)`` both sides read, and whether they are packed.
    """
    if not host_cpu(device):
        return None  # as resolve_device: "auto" runs on the CPU for host data
    ta = type(a)
    if ta is not type(b):
        return None
    if ta is np.ndarray:
        if (a.dtype is not _INT8 or b.dtype is not _INT8 or a.shape != b.shape or not a.size
                or not a.ndim or not (a.flags.c_contiguous and b.flags.c_contiguous)):
            return None
        ra = a if a.ndim == 2 else _rows(a, 1)
        rb = b if b.ndim == 2 else _rows(b, 1)
        packed = False
    elif ta is PackedTrits:  # rows of the data as _hv.hypervectors reads them (as_rows)
        da, db = a._data, b._data
        if (a._format is not BITPLANE or b._format is not BITPLANE or type(da) is not np.ndarray
                or type(db) is not np.ndarray or a._shape != b._shape or not da.size
                or not (a._valid and b._valid) or a._like is not HOST or b._like is not HOST):
            return None
        ra = da if da.ndim == 3 else _rows(da, 2)
        rb = db if db.ndim == 3 else _rows(db, 2)
        packed = True
    else:
        return None
    n = len(ra)
    return ra, rb, _row_index(n) if n <= _KEPT_INDEX else np.arange(n, dtype=np.int64), packed


_INT8 = np.dtype(np.int8)
_KEPT_INDEX = 1 << 12  # rows of the largest index kept (32 KiB; more rows are more work)


@functools.lru_cache(maxsize=64)
def _row_index(n: int) -> np.ndarray:
    """``arange(n)``, made once for each of the last sizes: the kernels only read it.

    ``np.arange(1000)`` took 0.7 µs of a 12 µs bind of 1,000 rows at d = 256. Left
    writeable: numba compiles the kernels again for read-only arrays.
    """
    return np.arange(n, dtype=np.int64)


def _rows(a: np.ndarray, tail: int) -> np.ndarray:
    """``a``, not ``(rows, ...)`` yet, as ``(rows, *a.shape[-tail:])`` (as ``as_rows``)."""
    return a[None] if a.ndim == tail else a.reshape(-1, *a.shape[-tail:])


def _shaped(rows: np.ndarray, like: np.ndarray) -> np.ndarray:
    """A host kernel's int8 rows shaped as the fast route's input ``like``."""
    return rows if rows.ndim == like.ndim else rows.reshape(like.shape)


def _elementwise(a: Any, b: Any, code: int, name: str, device: str) -> Hypervectors:
    host = _host_pair(a, b, device)
    if host is not None:
        ra, rb, rows, packed = host
        out, ok = kernel("vsa.op", "cpu")(ra, rb, rows, rows, code, packed, a.shape[-1])
        if ok:  # else a value outside {-1, 0, 1}: the general route names it
            return a._result_like(out) if packed else _shaped(out, a)
    if lazy(a, b):
        return dask_layer().elementwise(a, b, code, name, device)
    dev = resolve(device, a, b)
    ha = hypervectors(a, dev, "a", kernel_checks=True)
    hb = hypervectors(b, dev, "b", kernel_checks=True)
    _same_kind(ha, hb, name)
    lead, ia, ib = broadcast_rows(ha, hb, name)
    out, ok = call("vsa.op", dev, ha.rows, hb.rows, ia, ib, code, ha.packed, ha.d)
    if not ok:  # the kernel met a value outside {-1, 0, 1}: name the first one
        hypervectors(a, dev, "a")
        hypervectors(b, dev, "b")
    return _wrap(out, lead, ha.d, ha.packed, either(ha, hb))


def bind(a: Hypervectors, b: Hypervectors, *, rule: BindRule = "mul",
         device: Device = "auto") -> Hypervectors:
    """Bind hypervectors: the elementwise product (``rule="mul"``), or ``a - b`` mod 3.

    The product is commutative and associative, and ``bind(bind(a, b), b)``
    gives back ``a`` wherever ``b`` is non-zero. ``rule="mod3"`` is the exact
    cyclic group of the trit-vsa family: trits as integers mod 3 (-1 is 2),
    ``bind(a, b) = a - b``, undone exactly by ``unbind(c, b) = c + b``.

    Parameters
    ----------
    a, b : array_like of int or PackedTrits
        Dense trits or "bitplane" PackedTrits, both of the same kind, with
        the same last dimension; leading shapes broadcast.
    rule : {"mul", "mod3"}
        The binding rule.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    numpy.ndarray or PackedTrits
        The kind of the inputs (on the GPU when an input was).

    Raises
    ------
    ShapeMismatchError
        Different dimensions, or leading shapes that do not broadcast.
    InvalidTritsError
        A dense value outside {-1, 0, 1}.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> a = np.array([1, -1, 0, 1], dtype=np.int8)
    >>> b = np.array([-1, -1, 1, 0], dtype=np.int8)
    >>> tn.vsa.bind(a, b)
    array([-1,  1,  0,  0], dtype=int8)
    >>> tn.vsa.bind(a, b, rule="mod3")
    array([-1,  0, -1,  1], dtype=int8)
    >>> tn.unpack(tn.vsa.bind(tn.pack(a, "bitplane"), tn.pack(b, "bitplane")))
    array([-1,  1,  0,  0], dtype=int8)
    """
    mul = (type(rule) is str and rule == "mul") or _rule(rule) == "mul"  # checked if not "mul"
    code = _hv_math.MUL if mul else _hv_math.SUB3
    return _elementwise(a, b, code, "bind", device)


def unbind(c: Hypervectors, b: Hypervectors, *, rule: BindRule = "mul",
           device: Device = "auto") -> Hypervectors:
    """Undo :func:`bind`: ``unbind(bind(a, b), b)`` is ``a`` (wherever ``b != 0`` for "mul").

    Parameters
    ----------
    c, b : array_like of int or PackedTrits
        As for :func:`bind`.
    rule : {"mul", "mod3"}
        The rule ``c`` was bound with: "mul" multiplies again, "mod3" adds ``b`` mod 3.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    numpy.ndarray or PackedTrits

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> a = np.array([1, -1, 0, 1], dtype=np.int8)
    >>> b = np.array([-1, 1, 1, 0], dtype=np.int8)
    >>> tn.vsa.unbind(tn.vsa.bind(a, b, rule="mod3"), b, rule="mod3")
    array([ 1, -1,  0,  1], dtype=int8)
    >>> tn.vsa.unbind(tn.vsa.bind(a, b), b)  # the last trit of b is 0
    array([ 1, -1,  0,  0], dtype=int8)
    """
    mul = (type(rule) is str and rule == "mul") or _rule(rule) == "mul"  # checked if not "mul"
    code = _hv_math.MUL if mul else _hv_math.ADD3
    return _elementwise(c, b, code, "unbind", device)


def negate(v: Hypervectors, *, device: Device = "auto") -> Hypervectors:
    """``-v``: the inverse of ``v`` under bundling (plus and minus planes swapped).

    Parameters
    ----------
    v : array_like of int or PackedTrits
        Hypervectors ``(..., d)``.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    numpy.ndarray or PackedTrits
        In the format of ``v``.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> tn.vsa.negate(np.array([1, 0, -1], dtype=np.int8))
    array([-1,  0,  1], dtype=int8)
    """
    return _elementwise(v, v, _hv_math.NEG, "negate", device)


def _weights(weights: Any, n: int, dev: str) -> Any:
    w = to_host(weights)
    if w.dtype.kind not in "biuf":
        raise TypeError(f"weights must be integers or real numbers, got dtype {w.dtype}")
    if w.shape != (n,):
        raise ShapeMismatchError(
            f"bundle: weights must have shape ({n},), one per bundled vector, got {w.shape}",
            expected=(n,), actual=w.shape,
        )
    if w.dtype.kind == "f":
        if not np.isfinite(w).all():
            raise ValueError("bundle: weights must be finite")
        w = w.astype(np.float64)
    else:  # int64 votes: exact while sum(|w|) fits (checked exactly when it might not)
        if (np.abs(w.astype(np.float64)).sum() >= 2.0**62
                and sum(abs(int(v)) for v in w.tolist()) > np.iinfo(np.int64).max):
            raise ValueError("bundle: integer weights must have sum(|weights|) < 2**63")
        w = w.astype(np.int64)
    return np.ascontiguousarray(w)


def _axis_first(h: HV, axis: int, dev: str) -> Any:
    """The rows of ``h`` as ``(n, R, ...)``, ``axis`` of the leading shape first, on ``dev``."""
    tail = tuple(h.rows.shape)[1:]
    n = h.lead[axis]
    before, after = math.prod(h.lead[:axis]), math.prod(h.lead[axis + 1:])
    rows = h.rows
    if before > 1:
        rows = call("vsa.axis_first", dev, rows.reshape((before, n, after * math.prod(tail))))
    return rows.reshape((n, before * after, *tail))


def bundle_axis(shape: tuple[int, ...], axis: Any) -> int:
    """The non-negative axis of vectors that :func:`bundle` sums over in ``shape``."""
    ndim = len(shape)
    if ndim < 2:
        raise ShapeMismatchError(
            "bundle takes hypervectors of rank >= 2 (vectors along an axis, trits last), "
            f"got shape {shape}", expected="ndim >= 2", actual=shape)
    axis = count(axis, "axis", minimum=-ndim)
    axis += ndim if axis < 0 else 0
    if axis >= ndim - 1:
        raise ValueError(f"bundle: axis {axis} is the trit axis of shape {shape}; "
                         "bundle sums over an axis of vectors")
    return axis


def bundle(vs: Hypervectors, axis: int = 0, *, weights: Any = None,
           device: Device = "auto") -> Hypervectors:
    """Bundle hypervectors by majority: the sign of their (weighted) sum, a tie giving 0.

    Zeros are kept: a column where the votes cancel is 0, not a coin flip.
    On bitplanes the votes are counted word-parallel (bit-sliced counters).

    Parameters
    ----------
    vs : array_like of int or PackedTrits
        Hypervectors ``(..., d)`` of rank >= 2.
    axis : int
        The axis that is summed over (any but the last, which holds the trits):
        the leading one by default; ``axis=-2`` bundles each set of a batch
        ``(batch, n, d)``, the axis :func:`bundle_sequence` uses.
    weights : array_like of int or float, optional
        One finite weight per vector along ``axis``; the weighted sum is
        accumulated in vector order (float64 or int64), the same on every device.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    numpy.ndarray or PackedTrits
        ``vs`` without ``axis``; the kind of ``vs``.

    Raises
    ------
    ShapeMismatchError
        ``vs`` of rank 1, or weights of the wrong length.
    ValueError
        ``axis`` naming the last axis, or weights that are not finite.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> vs = np.array([[1, 1, -1, 0], [1, -1, -1, 0], [-1, 0, 1, 1]], dtype=np.int8)
    >>> tn.vsa.bundle(vs)
    array([ 1,  0, -1,  1], dtype=int8)
    >>> tn.vsa.bundle(vs, weights=[1, 1, 3])
    array([-1,  0,  1,  1], dtype=int8)
    """
    host = (_host_pair(vs, vs, device)
            if weights is None and type(axis) is int and axis in (0, -2) and len(vs.shape) == 2
            else None)
    if host is not None:  # one stack of (n, d) hypervectors, unweighted
        rows, _, _, packed = host
        if packed or kernel("vsa.check", "cpu")(rows):  # else the general route names the value
            d = vs.shape[-1]
            out = kernel("vsa.bundle", "cpu")(rows[:, None], None, packed, d)
            return _wrap(out, (), d, packed, HOST)
    if lazy(vs):
        return dask_layer().bundle(vs, axis, weights, device)
    dev = resolve(device, vs)
    h = hypervectors(vs, dev, "vs")
    axis = bundle_axis(h.shape, axis)
    n = h.lead[axis]
    rest = h.lead[:axis] + h.lead[axis + 1:]
    w = None if weights is None else _weights(weights, n, dev)
    rows = _axis_first(h, axis, dev)
    packed = h.packed
    if packed and w is not None:  # weighted votes are counted on int8 rows
        flat = rows.reshape((n * math.prod(rest), *tuple(rows.shape)[2:]))
        rows = call("unpack", dev, flat, BITPLANE, h.d)[0].reshape((n, math.prod(rest), h.d))
        packed = False
    out = call("vsa.bundle", dev, rows, w, packed, h.d)
    if packed != h.packed:
        out = call("pack", dev, out, BITPLANE)[0]
    return _wrap(out, rest, h.d, h.packed, h.like)


def permute(v: Hypervectors, shifts: Any = 1, *, device: Device = "auto") -> Hypervectors:
    """Roll hypervectors cyclically along the last axis (``np.roll``); negative shifts undo it.

    Parameters
    ----------
    v : array_like of int or PackedTrits
        Hypervectors ``(..., d)``.
    shifts : int or array_like of int
        The roll, one for all or one per vector (broadcast against ``v.shape[:-1]``).
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    numpy.ndarray or PackedTrits

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> v = np.array([[1, 0, -1, 0, 0], [1, 1, 0, 0, -1]], dtype=np.int8)
    >>> tn.vsa.permute(v)
    array([[ 0,  1,  0, -1,  0],
           [-1,  1,  1,  0,  0]], dtype=int8)
    >>> tn.vsa.permute(v, [0, -2])
    array([[ 1,  0, -1,  0,  0],
           [ 0,  0, -1,  1,  1]], dtype=int8)
    """
    host = _host_pair(v, v, device)
    if host is not None:
        rows, _, _, packed = host
        d = v.shape[-1]
        try:
            s = shift_rows(shifts, v.shape[:-1], d)
        except (TypeError, ValueError):  # bad shifts: the general route checks v first
            s = None
        out = None if s is None else kernel("vsa.permute", "cpu")(rows, s, packed, d)
        if out is not None:  # else a value outside {-1, 0, 1}: the general route names it
            return v._result_like(out) if packed else _shaped(out, v)
    if lazy(v):
        return dask_layer().permute(v, shifts, device)
    dev = resolve(device, v)
    h = hypervectors(v, dev, "v")
    out = call("vsa.permute", dev, h.rows, shift_rows(shifts, h.lead, h.d), h.packed, h.d)
    return _wrap(out, h.lead, h.d, h.packed, h.like)


def shift_rows(shifts: Any, lead: tuple[int, ...], d: int) -> np.ndarray:
    """:func:`permute`'s ``shifts`` broadcast to ``lead`` and taken mod ``d``, one per row."""
    d = max(d, 1)
    if type(shifts) is int:  # one for all (Python's % is exact for any int)
        return np.full(math.prod(lead), shifts % d, np.int64)
    s = np.asarray(shifts)
    if s.dtype == object and all(isinstance(x, numbers.Integral) and not isinstance(x, bool)
                                 for x in s.flat):  # Python ints beyond int64
        s = np.array([int(x) % d for x in s.flat], np.int64).reshape(s.shape)
    elif s.dtype == np.uint64:
        s = s % np.uint64(d)
    if s.dtype.kind not in "iu":
        raise TypeError(f"shifts must be integers, got {shifts!r}")
    try:
        s = np.broadcast_to(s.astype(np.int64), lead)
    except ValueError:
        raise ShapeMismatchError(
            f"permute: shifts of shape {s.shape} do not broadcast to {lead}",
            expected=lead, actual=s.shape) from None
    return np.ascontiguousarray(s.reshape(-1) % d)
