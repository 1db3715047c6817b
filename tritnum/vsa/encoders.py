"""Encoders from feature vectors to hypervectors."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._interop import to_host
from ..errors import ShapeMismatchError
from ..packing import PackedTrits, pack, unpack
from ._hv import count
from .algebra import bind, bundle

__all__ = ["encode_features", "level_indices"]

CHUNK_BYTES = 1 << 24  # bound hypervectors held at a time (bitplane bytes)


def level_indices(values: Any, n_levels: int, low: Any, high: Any) -> np.ndarray:
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

    Returns
    -------
    numpy.ndarray of int64, the shape of ``values``

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
    v = np.asarray(to_host(values))
    if v.dtype.kind not in "iuf":
        raise TypeError(f"values must be real numbers, got dtype {v.dtype}")
    lo = np.asarray(low, np.float64)
    hi = np.asarray(high, np.float64)
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(lo < hi)):
        raise ValueError(f"need finite low < high, got low={low!r}, high={high!r}")
    for name, bound in (("low", lo), ("high", hi)):
        try:
            np.broadcast_shapes(bound.shape, v.shape)
        except ValueError:
            raise ShapeMismatchError(f"{name} of shape {bound.shape} does not broadcast against "
                                     f"values of shape {v.shape}", expected=v.shape[-1:],
                                     actual=bound.shape) from None
    v = v.astype(np.float64)
    if np.isnan(v).any():
        raise ValueError("values hold a NaN: it maps to no level")
    position = np.rint((v - lo) / (hi - lo) * (n_levels - 1))
    return np.clip(position, 0, n_levels - 1).astype(np.int64)


def encode_features(values: Any, levels: Any, keys: Any, *, low: Any = None, high: Any = None,
                    device: str = "auto") -> np.ndarray:
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
        The encoded rows, dense (ready for :class:`tritnum.vsa.Centroid`).

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
    lv = unpack(levels) if isinstance(levels, PackedTrits) else np.asarray(levels)
    kv = keys if isinstance(keys, PackedTrits) else pack(np.asarray(keys), "bitplane")
    v = np.asarray(to_host(values))
    if low is not None and v.ndim == 2:
        v = level_indices(v, lv.shape[0], low, high)
    if v.ndim != 2 or lv.ndim != 2 or v.shape[1] != kv.shape[0]:
        raise ShapeMismatchError(
            f"values must be (n, features) with one column per key ({kv.shape[0]}), "
            f"levels (L, d); got values {v.shape}, levels {lv.shape}",
            expected=("n", kv.shape[0]), actual=v.shape)
    if lv.shape[1] != kv.shape[1]:
        raise ShapeMismatchError(f"levels have d = {lv.shape[1]} but keys d = {kv.shape[1]}",
                                 expected=kv.shape[1], actual=lv.shape[1])
    if v.dtype.kind not in "iu" or (v.size and (v.min() < 0 or v.max() >= lv.shape[0])):
        raise ValueError(f"values must be integer level indices in [0, {lv.shape[0]}) "
                         "(real values need low= and high=)")
    n, features = v.shape
    d = lv.shape[1]
    step = max(1, CHUNK_BYTES // max(features * (d // 4 + 16), 1))
    out = np.empty((n, d), np.int8)
    for r0 in range(0, n, step):
        pairs = pack(lv[v[r0:r0 + step]], "bitplane")  # (rows, features, d)
        bound = bind(kv, pairs, device=device)
        out[r0:r0 + step] = to_host(unpack(bundle(bound, axis=1, device=device)))
    return out
