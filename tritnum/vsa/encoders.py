"""Encoders from feature vectors to hypervectors."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._dispatch import call, place
from .._interop import HOST, as_rows, is_cuda_array, native, origin, to_host
from .._kernels.shared import vsa as _hv_math
from ..errors import ShapeMismatchError
from ..typing import Device
from ._hv import BITPLANE, HV, count, hypervectors, resolve

__all__ = ["encode_features", "level_indices"]

CHUNK_BYTES = 1 << 24  # bound hypervectors held at a time (bitplane bytes)


def _real(values: Any) -> Any:
    """``values`` as kernels read them (NumPy or GPU), checked to hold real numbers."""
    v = native(values)
    if not (isinstance(v, np.ndarray) or is_cuda_array(v)):
        v = np.asarray(v)
    if v.dtype.kind not in "iuf":
        raise TypeError(f"values must be real numbers, got dtype {v.dtype}")
    return v


def _bounds(low: Any, high: Any, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """``low`` and ``high`` checked, as flat float64 over the last axes of ``shape`` they vary on.

    Element ``i`` of values of ``shape`` (flat) maps through bound ``i % len(bound)``.
    """
    lo = np.asarray(to_host(low), np.float64)
    hi = np.asarray(to_host(high), np.float64)
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(lo < hi)):
        raise ValueError(f"need finite low < high, got low={low!r}, high={high!r}")
    full = []
    for name, bound in (("low", lo), ("high", hi)):
        try:
            full.append(np.broadcast_to(bound, shape))
        except ValueError:
            raise ShapeMismatchError(f"{name} of shape {bound.shape} does not broadcast to "
                                     f"values of shape {shape}", expected=shape[-1:],
                                     actual=bound.shape) from None
    if not math.prod(shape):
        return np.zeros(1), np.ones(1)
    lead = 0  # the leading axes along which neither bound varies
    while lead < len(shape) and (shape[lead] == 1 or not (full[0].strides[lead]
                                                          or full[1].strides[lead])):
        lead += 1
    lo, hi = (np.ascontiguousarray(b[(0,) * lead]).reshape(-1) for b in full)
    return lo, hi


def _indices(v: Any, n_levels: int, low: Any, high: Any, dev: str) -> Any:
    """Flat int64 level indices of ``v`` on ``dev``: mapped through ``low``/``high``, or checked."""
    shape = tuple(v.shape)
    lo, hi = (None, None) if low is None else _bounds(low, high, shape)
    idx, ok = call("vsa.level_indices", dev, as_rows(v, 0), lo, hi, n_levels)
    if not ok:
        if low is not None:
            raise ValueError("values hold a NaN, or a value whose level "
                             "(v - low) / (high - low) * (n_levels - 1) is NaN (an infinity "
                             "with n_levels=1, or high - low beyond float64): it maps to no level")
        raise ValueError(f"values must be integer level indices in [0, {n_levels}) "
                         "(real values need low= and high=)")
    return idx


def level_indices(values: Any, n_levels: int, low: Any, high: Any, *,
                  device: Device = "auto") -> Any:
    """Map real values onto ``n_levels`` evenly spaced levels from ``low`` to ``high``.

    ``round((v - low) / (high - low) * (n_levels - 1))`` (half to even), clipped
    to ``[0, n_levels)``: values below ``low`` take the first level, above
    ``high`` the last (torchhd's ``Level(low, high)`` mapping).

    Parameters
    ----------
    values : array_like of real numbers, shape (..., features)
    n_levels : int
        The number of level hypervectors, >= 1.
    low, high : float or array_like, broadcastable to ``values``
        The values that map onto the first and the last level; ``low < high``.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    numpy.ndarray of int64, the shape of ``values``
        Where, and in the framework in which, ``values`` live (bfloat16 tensors
        are read as float32).

    Raises
    ------
    ShapeMismatchError
        ``low`` or ``high`` does not broadcast against ``values``.
    ValueError
        A NaN value, a non-finite or misordered ``low``/``high``.

    Examples
    --------
    >>> from tritnum.vsa import level_indices
    >>> level_indices([-1.0, 0.0, 0.24, 0.26, 1.0, 7.0], 5, low=0, high=1)
    array([0, 0, 1, 1, 4, 4])
    """
    n_levels = count(n_levels, "n_levels", 1)
    v = _real(values)
    dev = resolve(device, v)
    return place(_indices(v, n_levels, low, high, dev), values, tuple(v.shape))


def encode_features(values: Any, levels: Any, keys: Any, *, low: Any = None, high: Any = None,
                    device: Device = "auto") -> np.ndarray:
    """Record-encode rows of features: ``bundle_i bind(keys[i], levels[values[:, i]])``.

    The classic HDC encoding of images, sensor readings or tabular rows: each
    feature position has a random key hypervector, each feature value a level
    hypervector (:func:`tritnum.vsa.level` keeps nearby values similar); a row
    is the majority bundle of its bound key-value pairs. Continuous features
    map onto the levels through ``low``/``high`` (:func:`level_indices`).

    Parameters
    ----------
    values : array_like, shape (n, features)
        Level indices, each in ``[0, len(levels))``; or, with ``low`` and
        ``high``, real values mapped onto the levels.
    levels : array_like of int8 or bitplane PackedTrits, shape (L, d)
    keys : array_like of int8 or bitplane PackedTrits, shape (features, d)
    low, high : float or array_like of shape (features,), optional
        Give both to encode real values: ``low`` maps to ``levels[0]``,
        ``high`` to ``levels[-1]``, values beyond them to the end levels.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where bind and bundle run.

    Returns
    -------
    numpy.ndarray of int8, shape (n, d)
        The encoded rows, dense (ready for :class:`tritnum.vsa.Centroid`), where
        and in the framework in which the first input not on the host lives.

    Raises
    ------
    ShapeMismatchError
        ``values`` has not one column per key, or levels and keys differ in ``d``.
    TypeError
        Only one of ``low`` and ``high``.
    ValueError
        An index outside ``[0, len(levels))``, or non-integer values without
        ``low``/``high``; NaN values or misordered bounds with them.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> levels = tn.vsa.level(4, 1000, seed=1)
    >>> keys = tn.vsa.random(3, 1000, seed=2)
    >>> rows = tn.vsa.encode_features(np.array([[0, 1, 3], [0, 1, 2]]), levels, keys)
    >>> rows.shape, bool(tn.vsa.similarity(rows[0], rows[1]) > 0.5)
    ((2, 1000), True)
    >>> temperatures = np.array([[18.5, 0.31, 1012.0], [18.9, 0.33, 1011.0]])
    >>> rows = tn.vsa.encode_features(temperatures, levels, keys, low=[-10, 0, 950],
    ...                               high=[40, 1, 1050])
    >>> bool(tn.vsa.similarity(rows[0], rows[1]) > 0.5)
    True
    """
    if (low is None) != (high is None):
        raise TypeError("encode_features maps real values onto the levels with both low and "
                        "high; pass neither for level indices")
    dev = resolve(device, values, levels, keys)
    hl = hypervectors(levels, dev, "levels")
    hk = hypervectors(keys, dev, "keys")
    v = _real(values)
    if v.ndim != 2 or len(hl.lead) != 1 or len(hk.lead) != 1 or v.shape[1] != hk.lead[0]:
        raise ShapeMismatchError(
            f"values must be (n, features) with one column per key ({hk.shape[0]}), "
            f"levels (L, d); got values {tuple(v.shape)}, levels {hl.shape}",
            expected=("n", hk.shape[0]), actual=tuple(v.shape))
    if hl.d != hk.d:
        raise ShapeMismatchError(f"levels have d = {hl.d} but keys d = {hk.d}",
                                 expected=hk.d, actual=hl.d)
    if low is None and v.dtype.kind not in "iu":
        raise ValueError(f"values must be integer level indices in [0, {hl.lead[0]}) "
                         "(real values need low= and high=)")
    n, features = v.shape
    idx = _indices(v, hl.lead[0], low, high, dev).reshape((n, features))
    step = max(1, CHUNK_BYTES // max(features * (hl.d // 4 + 16), 1))
    level_planes, key_planes = _planes(hl, dev), _planes(hk, dev)  # packed once, not per chunk
    parts = tuple(_encode_rows(idx[r0:r0 + step], level_planes, key_planes, dev, hl.d)
                  for r0 in range(0, max(n, 1), step))
    like = next((o for o in (origin(values), hl.like, hk.like) if o != HOST), HOST)
    return place(call("vsa.concat", dev, parts), like, (n, hl.d))


def _planes(h: HV, dev: str) -> Any:
    """The rows of ``h`` as bit planes on ``dev``."""
    return h.rows if h.packed else call("pack", dev, h.rows, BITPLANE)[0]


def _encode_rows(idx: Any, levels: Any, keys: Any, dev: str, d: int) -> Any:
    """Rows of level indices ``idx`` ``(rows, features)`` encoded: dense int8 ``(rows, d)``."""
    rows, features = idx.shape
    by_feature = call("vsa.axis_first", dev, idx.reshape((rows, features, 1))).reshape(-1)
    key_of = np.repeat(np.arange(features, dtype=np.int64), rows)
    bound, _ = call("vsa.op", dev, keys, levels, key_of, by_feature, _hv_math.MUL, True, d)
    planes = call("vsa.bundle", dev, bound.reshape((features, rows, *tuple(bound.shape)[1:])),
                  None, True, d)
    return call("unpack", dev, planes, BITPLANE, d)[0]
