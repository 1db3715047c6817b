"""Checks at the public boundary: every dtype, rank and value before a kernel runs."""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import numpy as np

from ._interop import is_cuda_array, is_dask, native, to_host
from .errors import InvalidTritsError, ShapeMismatchError


def choice(value: Any, name: str, options: Iterable[str],
           error: type[ValueError] = ValueError) -> str:
    """``value`` if it is one of the string ``options``, else ``error`` (a ValueError).

    The one message of every named-choice argument (format, device, metric, ...):

    >>> choice("cosine", "metric", ("dot", "cosine"))
    'cosine'
    >>> choice("l2", "metric", ("dot", "cosine"))
    Traceback (most recent call last):
        ...
    ValueError: metric must be one of 'dot', 'cosine', got 'l2'
    """
    options = tuple(options)
    if isinstance(value, str) and value in options:
        return value
    raise error(f"{name} must be one of {', '.join(map(repr, options))}, got {value!r}")


def index_str(index: Any) -> str:
    """``(1, 2)`` as ``"1, 2"``, for messages like ``w[1, 2] = nan``."""
    return ", ".join(str(int(i)) for i in index)


def native_order(a: Any) -> Any:
    """``a`` in the machine's byte order (a converted copy of a big-endian NumPy array)."""
    if isinstance(a, np.ndarray) and not a.dtype.isnative:
        return a.astype(a.dtype.newbyteorder("="))
    return a


def shape_tuple(shape: Any) -> tuple[int, ...]:
    """``shape``, an int or a sequence of ints, as a tuple of rank >= 1 with no negative size.

    TypeError for anything but integers (a float size is not truncated),
    ShapeMismatchError for an empty or negative shape.
    """
    try:
        dims = (tuple(operator.index(s) for s in shape) if isinstance(shape, (tuple, list))
                else (operator.index(shape),))
    except TypeError:
        raise TypeError(f"shape must be an int or a tuple of ints, got {shape!r}") from None
    if not dims or min(dims) < 0:
        raise ShapeMismatchError(f"shape must have rank >= 1 and no negative sizes, got {dims}",
                                 expected="rank >= 1, sizes >= 0", actual=dims)
    return dims


PACK_HINT = "; ternary values are packed with tn.pack"


def float_array(x: Any, name: str, *, scalar: bool = False, hint: str = PACK_HINT) -> Any:
    """``x`` as a float16/32/64 array where it lives (host, GPU or Dask).

    TypeError for other dtypes (``hint`` appended for integer and bool input:
    by default it points to ``tn.pack``), ShapeMismatchError for a scalar unless
    ``scalar`` allows rank 0.
    """
    a = native(x)
    if not (is_cuda_array(a) or is_dask(a)):
        a = np.asarray(a)
    if a.dtype.kind != "f" or a.dtype.itemsize > 8:
        hint = hint if a.dtype.kind in "iub" else ""
        raise TypeError(f"{name} must be a float16/32/64 array, got dtype {a.dtype}{hint}")
    if a.ndim == 0 and not scalar:
        raise ShapeMismatchError(f"{name} must have at least one dimension, got a scalar",
                                 expected="ndim >= 1", actual=())
    return native_order(a)


def trit_array(x: Any, name: str = "trits") -> Any:
    """``x`` as an integer array of rank >= 1 that kernels can read.

    Raises TypeError for float, complex, bool and object input (pointing to
    ``tn.quantize``) and ShapeMismatchError for a scalar. Values are checked by
    the kernels, which report back; :func:`raise_invalid_trits` names the culprit.
    """
    a = native(x)
    if not (is_cuda_array(a) or is_dask(a)):  # a Dask array is checked here, not read
        a = np.asarray(a)
    kind = a.dtype.kind
    if kind in "fc":
        raise TypeError(
            f"{name} must be an integer array of trits in {{-1, 0, 1}}, got dtype "
            f"{a.dtype}; trits held as floats convert exactly with x.astype(np.int8), "
            "real-valued weights become trits with tn.quantize(w)"
        )
    if kind not in "iu":
        raise TypeError(
            f"{name} must be an integer array of trits in {{-1, 0, 1}}, got dtype {a.dtype}"
        )
    if a.ndim == 0:
        raise ShapeMismatchError(
            f"{name} must have at least one dimension, got a scalar",
            expected="ndim >= 1",
            actual=(),
        )
    a = native_order(a)
    if a.dtype == np.uint64 and not is_dask(a):  # uint64 + int mixes to float in numba
        host = to_host(a)
        if host.size and host.max() > 1:
            raise_invalid_trits(host, name)
        a = a.view(np.int64)
    return a


def raise_invalid_trits(a: Any, name: str = "trits") -> None:
    """Raise InvalidTritsError naming the first value of ``a`` outside {-1, 0, 1}."""
    host = to_host(a)
    flat = host.reshape(-1) if host.flags.c_contiguous else np.ravel(host)
    bad = np.flatnonzero((flat < -1) | (flat > 1))
    if not bad.size:  # pragma: no cover - kernels only report real offenders
        raise InvalidTritsError(f"{name} holds a value outside {{-1, 0, 1}}")
    idx = np.unravel_index(bad[0], host.shape)
    raise InvalidTritsError(
        f"{name}[{index_str(idx)}] = {flat[bad[0]]} is not a trit; "
        "values must be -1, 0 or +1"
    )


def _writable_elsewhere(a: np.ndarray) -> bool:
    """Whether the memory of ``a`` can be written through some other object."""
    obj: Any = a
    while isinstance(obj, np.ndarray):
        if obj.flags.writeable:
            return True
        obj = obj.base
    if obj is None or isinstance(obj, bytes):
        return False
    try:
        return not memoryview(obj).readonly
    except TypeError:  # no buffer protocol (an mmap opened read-only is one that has it)
        return False


def owned(a: np.ndarray, copy: bool | None, source: Any = None) -> np.ndarray:
    """A read-only array of ``a``'s values that nobody else can reshape or write.

    ``copy=None`` copies only when the memory can still be written through
    another reference (the caller's array, a writable base); ``copy=False``
    trusts the caller (tritnum's own fresh buffers); ``copy=True`` always copies.
    ``source`` is the caller's array that ``a`` was converted from: when the
    conversion already copied, nothing more is. The result is a new array
    object, so reshaping the caller's in place does not reach it.
    """
    if source is not None and not np.may_share_memory(a, source):
        copy = False  # a is a fresh conversion: nobody else holds it
    if copy or (copy is None and _writable_elsewhere(a)):
        a = a.copy()
    view = a.view()
    view.setflags(write=False)  # (the flags object costs twice this, on one-pair ops' path)
    return view


def leading_key(key: Any, lead: tuple[int, ...], kind: str) -> tuple[Any, ...]:
    """An index into the leading axes ``lead`` of a packed object, as a tuple.

    Integers, slices and integer arrays are taken (NumPy's meaning): index arrays
    may be lists, NumPy arrays, torch tensors or GPU arrays (search hits), and
    come back as host intp arrays (the leading index is small; the rows it picks
    are gathered where the data lives). Anything that would reach the packed last
    axis raises IndexError, other keys TypeError.
    """
    parts = key if isinstance(key, tuple) else (key,)
    out: list[Any] = []
    for k in parts:
        if isinstance(k, slice):
            out.append(k)
            continue
        k = native(k)  # a torch tensor as a NumPy or GPU array
        if isinstance(k, (list, np.ndarray)) or is_cuda_array(k):
            arr = np.asarray(to_host(k))
            if arr.dtype.kind not in "iu" and arr.size:
                raise TypeError(f"{kind} indices must be integers or slices, got {arr.dtype}")
            out.append(arr.astype(np.intp))
            continue
        if isinstance(k, (bool, np.bool_)):
            raise TypeError(f"{kind} indices must be integers or slices, got a bool")
        try:
            out.append(operator.index(k))
        except TypeError:
            raise TypeError(
                f"{kind} indices must be integers, slices or integer arrays, got "
                f"{type(k).__name__}"
            ) from None
    if len(out) > len(lead):
        raise IndexError(
            f"a {kind} of {len(lead) + 1} dimensions is indexed on its {len(lead)} leading "
            f"axes only (the last axis is packed); unpack it to index trits"
        )
    return tuple(out)
