"""Encoders from feature vectors to hypervectors."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._interop import to_host
from ..errors import ShapeMismatchError
from ..packing import PackedTrits, pack, unpack
from .algebra import bind, bundle

__all__ = ["encode_features"]

CHUNK_BYTES = 1 << 24  # bound hypervectors held at a time (bitplane bytes)


def encode_features(values: Any, levels: Any, keys: Any, *,
                    device: str = "auto") -> np.ndarray:
    """Record-encode rows of discrete features: ``bundle_i bind(keys[i], levels[values[:, i]])``.

    The classic HDC encoding of images, sensor readings or tabular rows: each
    feature position has a random key hypervector, each feature value a level
    hypervector (:func:`tritnum.vsa.level` keeps nearby values similar); a row
    is the majority bundle of its bound key-value pairs.

    Parameters
    ----------
    values : array_like of int, shape (n, features)
        Level indices, each in ``[0, len(levels))``.
    levels : array_like of int8 or bitplane PackedTrits, shape (L, d)
    keys : array_like of int8 or bitplane PackedTrits, shape (features, d)
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
    ValueError
        A value outside ``[0, len(levels))``.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> levels = tn.vsa.level(4, 1000, seed=1)
    >>> keys = tn.vsa.random(3, 1000, seed=2)
    >>> rows = tn.vsa.encode_features(np.array([[0, 1, 3], [0, 1, 2]]), levels, keys)
    >>> rows.shape, bool(tn.vsa.similarity(rows[0], rows[1]) > 0.5)
    ((2, 1000), True)
    """
    lv = unpack(levels) if isinstance(levels, PackedTrits) else np.asarray(levels)
    kv = keys if isinstance(keys, PackedTrits) else pack(np.asarray(keys), "bitplane")
    v = np.asarray(to_host(values))
    if v.ndim != 2 or lv.ndim != 2 or v.shape[1] != kv.shape[0]:
        raise ShapeMismatchError(
            f"values must be (n, features) with one column per key ({kv.shape[0]}), "
            f"levels (L, d); got values {v.shape}, levels {lv.shape}",
            expected=("n", kv.shape[0]), actual=v.shape)
    if lv.shape[1] != kv.shape[1]:
        raise ShapeMismatchError(f"levels have d = {lv.shape[1]} but keys d = {kv.shape[1]}",
                                 expected=kv.shape[1], actual=lv.shape[1])
    if v.dtype.kind not in "iu" or (v.size and (v.min() < 0 or v.max() >= lv.shape[0])):
        raise ValueError(f"values must be integer level indices in [0, {lv.shape[0]})")
    n, features = v.shape
    d = lv.shape[1]
    step = max(1, CHUNK_BYTES // max(features * (d // 4 + 16), 1))
    out = np.empty((n, d), np.int8)
    for r0 in range(0, n, step):
        pairs = pack(lv[v[r0:r0 + step]], "bitplane")  # (rows, features, d)
        bound = bind(kv, pairs, device=device)
        out[r0:r0 + step] = to_host(unpack(bundle(bound, axis=1, device=device)))
    return out
