"""BitNet b1.58 quantization: float weights to ternary tensors, activations to int8.

Weights (absmean): ``scale = max(mean|w|, 1e-5)`` per tensor, per row or per group
of ``group_size`` consecutive elements along the last axis, and
``t = clip(round_half_even(w / scale), -1, 1)``. Activations (absmax per token,
as bitnet.cpp's ``quantize_row_i8_s``): ``amax = max(max|x|, 1e-5)``,
``q = clip(round_half_even(x * (127 / amax)), -128, 127)`` and ``x ≈ q * amax / 127``.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from ._dispatch import call, implementation, place, resolve_device
from ._formats import get_format
from ._interop import as_rows, dask_layer, is_dask, origin, to_host
from ._kernels.shared.quantize import EPS
from ._validate import float_array, index_str, leading_key, native_order, owned
from .errors import ShapeMismatchError
from .packing import PackedTrits, ensure_valid
from .typing import Device, Format

# Internal API: the private names other modules use (tests/test_architecture_seams.py):
# matmul (the kernels' per-weight cache; NaN/Inf errors) and io/gguf/blocks.py (NaN/Inf errors).
_INTERNAL_API = ("TernaryTensor._cache", "TernaryTensor._cached", "_raise_not_finite")

__all__ = ["TernaryTensor", "dequantize", "quantize", "quantize_activations"]


class TernaryTensor:
    """Ternary weights: packed trits and float32 scales, ``w ≈ trits * scale``.

    Made by :func:`quantize`, or built here from packed trits and their scales.

    Parameters
    ----------
    packed : PackedTrits
        The trits; the tensor's shape is ``packed.shape``.
    scales : array_like of float32
        A 0-d scale for the whole tensor when ``group_size`` is None, else an
        array of shape ``(*shape[:-1], shape[-1] // group_size)``.
    group_size : int, optional
        None for one scale per tensor, else the number of consecutive elements
        along the last axis sharing a scale (the whole row for per-row scales);
        it must divide the last axis.
    copy : bool, optional
        Like :class:`PackedTrits`, the tensor owns its scales, read-only: by
        default they are copied only when the caller could still write them,
        ``copy=False`` wraps them as they are, ``copy=True`` always copies.

    Raises
    ------
    TypeError
        ``packed`` is not a :class:`PackedTrits`, or the scales are not float32.
    ShapeMismatchError
        A ``group_size`` that does not divide the last axis, or scales of
        another shape.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> w = np.array([[0.5, -2.0, 0.1, 1.0]], dtype=np.float32)
    >>> t = tn.quantize(w)
    >>> t
    TernaryTensor(shape=(1, 4), format='2bit', group_size=None, 10.0 bits/weight, 5 bytes)
    >>> t.scales
    array(0.9, dtype=float32)
    >>> t.dequantize()
    array([[ 0.9, -0.9,  0. ,  0.9]], dtype=float32)
    """

    __slots__ = ("_cache", "_group_size", "_packed", "_scales")
    __array_ufunc__ = None  # ``x @ w`` is a TypeError (the product is ``x @ w.T``)

    def __init__(self, packed: PackedTrits, scales: Any, group_size: int | None = None, *,
                 copy: bool | None = None) -> None:
        if not isinstance(packed, PackedTrits):
            raise TypeError(f"packed must be a tn.PackedTrits, got {type(packed).__name__}")
        if not is_dask(scales):  # a lazy tensor's scales stay lazy
            src = np.asarray(scales)
            scales = owned(native_order(src), copy, source=src)
        if scales.dtype != np.float32:
            raise TypeError(f"scales must be float32, got {scales.dtype}")
        n = packed.shape[-1]
        if group_size is None:
            expected: tuple[int, ...] = ()
        else:
            group_size = operator.index(group_size)
            if group_size < 1 or n % group_size:
                raise ShapeMismatchError(
                    f"group_size must divide the last axis ({n}), got {group_size}",
                    expected=f"a divisor of {n}", actual=group_size)
            if n == 0:  # no groups: as tn.quantize, one scale (group_size=None) or none
                raise ShapeMismatchError(
                    "per-row or per-group scales need a non-empty last axis (an empty "
                    "tensor takes group_size=None)", expected="shape[-1] > 0",
                    actual=packed.shape)
            expected = (*packed.shape[:-1], n // group_size)
        if scales.shape != expected:
            raise ShapeMismatchError(
                f"scales must have shape {expected}, got {scales.shape}",
                expected=expected, actual=scales.shape)
        self._packed = packed
        self._scales = scales
        self._group_size = group_size
        self._cache: dict[Any, Any] = {}

    def _cached(self, key: Any, make: Any) -> Any:
        """``make()``, computed once per ``key`` for this tensor (device copies, layouts).

        Never stale: the packed trits and the scales are fixed for the tensor's life
        (its scales are owned and read-only; slicing or unpickling makes a new tensor).
        """
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = make()
        return hit

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle the packed trits and the scales (owned and read-only once unpickled)."""
        return TernaryTensor._restore, (self._packed, self._scales, self._group_size)

    @classmethod
    def _restore(cls, packed: PackedTrits, scales: Any, group_size: int | None) -> TernaryTensor:
        return cls(packed, scales, group_size, copy=False)  # fresh unpickled scales: owned

    @property
    def packed(self) -> PackedTrits:
        """The packed trits."""
        return self._packed

    @property
    def scales(self) -> np.ndarray:
        """float32 scales: 0-d per tensor, else ``(*shape[:-1], groups)``."""
        return self._scales

    @property
    def group_size(self) -> int | None:
        """Elements per scale along the last axis (None: one scale for the tensor)."""
        return self._group_size

    @property
    def shape(self) -> tuple[int, ...]:
        """The logical shape of the weights."""
        return self._packed.shape

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return self._packed.ndim

    @property
    def format(self) -> str:
        """Packed format of the trits."""
        return self._packed.format

    @property
    def nbytes(self) -> int:
        """Bytes held: packed trits plus scales."""
        return self._packed.nbytes + self._scales.nbytes

    @property
    def T(self) -> TransposedTernaryTensor:
        """A transposed view of a 2-D tensor (``x @ w.T`` in the matmul API)."""
        return TransposedTernaryTensor(self)

    def dequantize(self, *, device: Device = "auto") -> Any:
        """float32 weights ``trits * scale`` (see :func:`dequantize`), where the trits live.

        Parameters
        ----------
        device : {"auto", "cpu", "cuda", "numpy"}
            Where to run; ``"auto"`` follows the default device and the data.

        Returns
        -------
        numpy.ndarray, GPU array or Dask array
            float32 weights of :attr:`shape`.
        """
        if is_dask(self._packed.data):
            return dask_layer().dequantize(self, device)
        dev = resolve_device(device, self._packed.data)
        n = self.shape[-1]
        groups = 1 if self._group_size is None else n // self._group_size
        scales = self._scales.reshape(-1 if self._group_size else 1, groups)
        packed = self._packed
        ensure_valid(packed, dev)  # bad codes raise here, as unpack would
        fmt = packed._format
        w = call("dequantize_packed", dev, as_rows(packed.data, fmt.planes), fmt, n, scales)
        return place(w, packed._like, self.shape)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise TypeError(
            "a TernaryTensor is not an array: call tn.dequantize(w) (or w.dequantize()) for "
            "float32 weights, or w.packed.unpack() for the trits"
        )

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> TernaryTensor:
        """Rows on the leading axes with their scales, still packed: ``w[0]``, ``w[:16]``."""
        key = leading_key(key, self.shape[:-1], "TernaryTensor")
        scales = self._scales if self._group_size is None else self._scales[key]
        return TernaryTensor(self._packed[key], scales, self._group_size)

    def __repr__(self) -> str:
        size = max(self._packed.size, 1)
        return (
            f"TernaryTensor(shape={self.shape}, format={self.format!r}, "
            f"group_size={self._group_size}, {8 * self.nbytes / size:.1f} bits/weight, "
            f"{self.nbytes} bytes)"
        )


class TransposedTernaryTensor:
    """The transpose of a 2-D :class:`TernaryTensor`; ``.T`` gives the tensor back."""

    __slots__ = ("_base",)
    __array_ufunc__ = None  # ``x @ w.T`` with a NumPy x comes to __rmatmul__

    def __init__(self, base: TernaryTensor) -> None:
        if base.ndim != 2:
            raise ShapeMismatchError(
                f".T needs a 2-D TernaryTensor, got shape {base.shape}",
                expected="ndim == 2", actual=base.shape)
        self._base = base

    @property
    def T(self) -> TernaryTensor:
        """The untransposed tensor."""
        return self._base

    @property
    def shape(self) -> tuple[int, int]:
        """The transposed shape."""
        rows, cols = self._base.shape
        return cols, rows

    def dequantize(self, *, device: Device = "auto") -> Any:
        """float32 weights of the transpose."""
        return self._base.dequantize(device=device).T

    def __rmatmul__(self, x: Any) -> Any:
        """``x @ w.T``: :func:`tritnum.linear` with float activations."""
        return implementation("matmul")(x, self._base)

    def __repr__(self) -> str:
        return f"{self._base!r}.T"


def _raise_not_finite(a: Any, name: str, *, in_float32: bool = False) -> None:
    """Name the first value that is not finite (``in_float32``: once converted to float32)."""
    host = to_host(a)
    with np.errstate(over="ignore"):
        bad = np.flatnonzero(~np.isfinite(host.astype(np.float32) if in_float32 else host))
    if not bad.size:
        raise ValueError(f"the sum of |{name}| overflows float64")
    value = host.reshape(-1)[bad[0]]
    what = "is not finite" if not np.isfinite(value) else "overflows float32"
    raise ValueError(f"{name}[{index_str(np.unravel_index(bad[0], host.shape))}] = {value} {what}")


def _raise_scale_overflow(means: np.ndarray, scales: np.ndarray, shape: tuple[int, ...],
                          group_size: int | None) -> None:
    """Name the first tensor, row or group whose mean |w| is beyond float32's range."""
    r, k = np.argwhere(~np.isfinite(scales))[0]
    where = "w"
    if group_size is not None:
        lead = ", ".join(str(i) for i in np.unravel_index(r, shape[:-1]))
        where = f"w[{lead}{', ' if lead else ''}{k * group_size}:{(k + 1) * group_size}]"
    raise ValueError(f"the scale mean(|{where}|) = {means[r, k]:.6g} overflows float32")


def abs_sums(rows: Any, dev: str, w: Any, groups: int = 1) -> np.ndarray:
    """float64 sums of |w| over ``groups`` groups of each of ``rows`` (``w`` seen as rows).

    ValueError naming the first value of ``w`` that is not finite.
    """
    sums = to_host(call("abs_sums", dev, rows, groups))
    if not np.isfinite(sums).all():
        _raise_not_finite(w, "w")
    return sums


HALF_BLOCK = 1 << 20  # float16 values widened to float32 at once (whole rows): 4 MiB


def _widened_rows(rows: np.ndarray) -> Any:
    """``(first row, float32 rows)`` of float16 ``rows``, a block of rows at a time.

    Each block is widened exactly into one reused buffer of about ``HALF_BLOCK``
    values (one row where a row is longer): the kernels' float32 input without a
    float32 copy of the whole tensor.
    """
    count, n = rows.shape
    per = max(1, HALF_BLOCK // max(n, 1))
    buf = np.empty((min(per, count), n), np.float32)
    for r0 in range(0, count, per):
        block = buf[:min(per, count - r0)]
        np.copyto(block, rows[r0:r0 + per])
        yield r0, block


# float64 values from here up round to infinity in float32: half its last step above its largest
F32_OVERFLOW = 2.0 ** 128 - 2.0 ** 103


def scales_of(sums: np.ndarray, shape: tuple[int, ...], group_size: int | None) -> np.ndarray:
    """float32 scales ``max(mean|w|, 1e-5)`` of the sums of :func:`abs_sums`, ``(rows, groups)``.

    Per tensor (``group_size`` None) the row sums are added up in row order: ``(1, 1)``.
    ValueError naming the first scale beyond float32's range.
    """
    if group_size is None:
        means = np.array([[sums.sum() / max(math.prod(shape), 1)]])
    else:
        means = sums / group_size
    if not means.max(initial=0.0) < F32_OVERFLOW:  # checked before the cast: no errstate
        with np.errstate(over="ignore"):
            _raise_scale_overflow(means, np.maximum(means, EPS).astype(np.float32), shape,
                                  group_size)
    return np.maximum(means, EPS).astype(np.float32)


def quantize(w: Any, *, axis: int | None = None, group_size: int | None = None,
             format: Format = "2bit", device: Device = "auto") -> TernaryTensor:
    """Quantize float weights to ternary, BitNet b1.58 absmean style.

    Parameters
    ----------
    w : array_like of float16, float32 or float64
        Weights of any rank >= 1 (2-D ``(out, in)`` is the common case). float16
        weights on the host are widened to float32 (exactly) a block of rows of
        about 4 MiB at a time, never whole (a single row is widened whole).
    axis : {None, -1}
        None: one scale for the tensor; -1: one scale per row (last axis).
    group_size : int, optional
        One scale per ``group_size`` consecutive elements along the last axis
        (must divide it).
    format : {"2bit", "base3", "bitplane"}
        Packed format of the trits.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    TernaryTensor

    Raises
    ------
    ValueError
        NaN or infinity in ``w`` (naming the first), or a bad ``axis``.
    ShapeMismatchError
        ``group_size`` does not divide the last axis.
    TypeError
        ``w`` is not a float array.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> w = np.array([[0.4, -0.1, 0.0, -1.0], [2.0, 2.0, 0.0, 1.0]])
    >>> tn.quantize(w, axis=-1).packed.unpack()
    array([[ 1,  0,  0, -1],
           [ 1,  1,  0,  1]], dtype=int8)
    >>> tn.quantize(w, axis=-1).scales.ravel()
    array([0.375, 1.25 ], dtype=float32)
    """
    fmt = get_format(format)
    like = origin(w)
    w = float_array(w, "w")
    shape = tuple(w.shape)  # GPU arrays' shapes may refuse negative indices
    n = shape[-1]
    if axis not in (None, -1, w.ndim - 1):
        raise ValueError(f"axis must be None (per tensor) or -1 (per row), got {axis!r}")
    if group_size is not None:
        if axis is not None and group_size != n:
            raise ValueError("give either axis=-1 or group_size, not both")
        group_size = operator.index(group_size)
        if group_size < 1 or n % group_size:
            raise ShapeMismatchError(
                f"group_size must divide the last axis ({n}), got {group_size}",
                expected=f"a divisor of {n}", actual=group_size)
    elif axis is not None:
        group_size = n
    if group_size is not None and n == 0:
        raise ShapeMismatchError("per-row or per-group scales need a non-empty last axis",
                                 expected="shape[-1] > 0", actual=shape)
    if is_dask(w):
        return dask_layer().quantize(w, group_size, fmt, device)
    dev = resolve_device(device, w)
    rows = as_rows(w)
    groups = 1 if group_size is None else n // group_size
    # float16 on the host: a block of rows at a time (the same per-row sums and trits)
    blockwise = (isinstance(rows, np.ndarray) and rows.dtype == np.float16
                 and rows.shape[0] > 1 and rows.size > HALF_BLOCK)
    if blockwise:
        sums = np.concatenate([abs_sums(b, dev, w, groups) for _, b in _widened_rows(rows)])
    else:
        sums = abs_sums(rows, dev, w, groups)
    scales = scales_of(sums, shape, group_size)
    if group_size is None:
        kept = np.asarray(scales[0, 0])
        scales = np.full((rows.shape[0], 1), scales[0, 0], np.float32)
    else:
        kept = scales.reshape(*shape[:-1], groups)
    if blockwise:
        data = np.empty(fmt.data_shape(rows.shape), fmt.dtype)
        for r0, b in _widened_rows(rows):
            data[r0:r0 + b.shape[0]] = call("quantize_pack", dev, b, scales[r0:r0 + b.shape[0]],
                                            fmt)
    else:
        data = call("quantize_pack", dev, rows, scales, fmt)
    packed = PackedTrits._encoded(data, shape, fmt.name, like)
    return TernaryTensor(packed, kept, group_size, copy=False)


def dequantize(t: TernaryTensor, *, device: Device = "auto") -> Any:
    """float32 weights ``trits * scale`` of a :class:`TernaryTensor`.

    Parameters
    ----------
    t : TernaryTensor
        From :func:`quantize`.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run; ``"auto"`` follows the default device and the data.

    Returns
    -------
    numpy.ndarray, GPU array or Dask array
        float32 weights of ``t.shape``, on the GPU when the trits are there, lazy
        when they are a Dask array.

    Raises
    ------
    TypeError
        ``t`` is not a :class:`TernaryTensor`.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> tn.dequantize(tn.quantize(np.array([3.0, -3.0, 0.0])))
    array([ 2., -2.,  0.], dtype=float32)
    """
    if not isinstance(t, TernaryTensor):
        raise TypeError(f"dequantize takes a tn.TernaryTensor, got {type(t).__name__}")
    return t.dequantize(device=device)


def in_memory(t: TernaryTensor) -> TernaryTensor:
    """``t`` itself, or read into memory where its trits and scales are lazy (Dask)."""
    return dask_layer().in_memory(t) if is_dask(t.packed.data) or is_dask(t.scales) else t


def quantize_rows(rows: Any, per_tensor: bool, device: str, x: Any) -> tuple[Any, np.ndarray]:
    """int8 rows and their float32 scales, where the kernel of ``device`` leaves them.

    ``rows`` are checked float activations ``(m, n)`` (of the caller's ``x``, which
    a NaN or infinity is reported against).
    """
    q, amax = call("quantize_activations", device, rows, per_tensor)
    amax = to_host(amax)
    if not np.isfinite(amax).all():
        _raise_not_finite(x, "x", in_float32=True)
    return q, (amax / np.float32(127)).astype(np.float32)


def quantize_activations(x: Any, *, axis: int | None = -1,
                         device: Device = "auto") -> tuple[Any, Any]:
    """Quantize activations to int8 with absmax scales (bitnet.cpp ``quantize_row_i8_s``).

    Parameters
    ----------
    x : array_like of float
        Activations, one token per row (last axis); computed in float32.
    axis : {-1, None}
        -1: one scale per row (token); None: one scale for the whole tensor.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    q : numpy.ndarray of int8
        ``clip(round_half_even(x * 127 / amax), -128, 127)``, the shape of ``x``.
    scale : numpy.ndarray of float32
        ``amax / 127`` per row (shape ``x.shape[:-1]``), or 0-d per tensor, so that
        ``x ≈ q * scale[..., None]``.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> q, scale = tn.quantize_activations(np.array([[0.5, -1.0, 0.25]]))
    >>> q
    array([[ 64, -127,   32]], dtype=int8)
    >>> scale * 127
    array([1.], dtype=float32)
    """
    like = origin(x)
    x = float_array(x, "x")
    if axis not in (None, -1, x.ndim - 1):
        raise ValueError(f"axis must be -1 (per row) or None (per tensor), got {axis!r}")
    if is_dask(x):
        return dask_layer().quantize_activations(x, axis, device)
    dev = resolve_device(device, x)
    q, scale = quantize_rows(as_rows(x), axis is None, dev, x)
    shape = tuple(x.shape)
    return (place(q, like, shape),
            place(scale, like, () if axis is None else shape[:-1]))
