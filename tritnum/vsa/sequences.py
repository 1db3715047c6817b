"""Sequences of ternary hypervectors: ordered bundles, n-grams and key-value records."""

from __future__ import annotations

import numpy as np

from ..errors import ShapeMismatchError
from ..packing import PackedTrits
from ..typing import Device
from ._hv import Hypervectors, count
from .algebra import bind, bundle, permute

__all__ = ["bundle_sequence", "hash_table", "ngrams"]


def _rows(x: Hypervectors, sl: slice) -> Hypervectors:
    """``x[..., sl, :]``: a range of vectors along the second-to-last axis, of either kind."""
    if isinstance(x, PackedTrits):  # still packed; its codes as checked (or not) as x's
        return x[(slice(None),) * (len(x.shape) - 2) + (sl,)]
    return x[..., sl, :]


def _sequence(x: Hypervectors) -> Hypervectors:
    """``x`` as an array when it is a nested list (every VSA op takes array_like)."""
    return x if isinstance(x, PackedTrits) or hasattr(x, "shape") else np.asarray(x)


def _length(x: Hypervectors) -> int:
    shape = x.shape
    if len(shape) < 2:
        raise ShapeMismatchError(
            f"expected a sequence of hypervectors (..., n, d), got shape {tuple(shape)}",
            expected="ndim >= 2", actual=tuple(shape))
    return shape[-2]


def bundle_sequence(vs: Hypervectors, *, device: Device = "auto") -> Hypervectors:
    """Encode an ordered sequence: ``bundle(permute(vs[i], n - 1 - i))``.

    Each position is rolled by its distance from the end, so order matters:
    the same vectors in another order give an unrelated hypervector.

    Parameters
    ----------
    vs : array_like of int or PackedTrits
        ``(..., n, d)``: sequences of ``n`` hypervectors.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    numpy.ndarray or PackedTrits
        ``(..., d)``.

    Examples
    --------
    >>> import tritnum as tn
    >>> letters = tn.vsa.random(3, 10_000)
    >>> a, b, c = letters
    >>> abc = tn.vsa.bundle_sequence(letters)
    >>> tn.vsa.similarity(abc, tn.vsa.permute(a, 2)) > 0.3
    np.True_
    """
    vs = _sequence(vs)
    n = _length(vs)
    shifts = np.arange(n - 1, -1, -1, dtype=np.int64)
    return bundle(permute(vs, shifts, device=device), -2, device=device)


def ngrams(vs: Hypervectors, n: int = 3, *, device: Device = "auto") -> Hypervectors:
    """The n-gram statistics of a sequence: the bundle of every window's bound, rolled members.

    Window ``w`` is ``bind(permute(vs[w], n - 1), permute(vs[w + 1], n - 2), ..., vs[w + n - 1])``.

    Parameters
    ----------
    vs : array_like of int or PackedTrits
        ``(..., m, d)`` with ``m >= n``.
    n : int
        The window length, >= 1.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    numpy.ndarray or PackedTrits
        ``(..., d)``.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> letters = tn.vsa.random(26, 10_000, seed=1)
    >>> text = lambda s: letters[[ord(ch) - 97 for ch in s]]
    >>> a, b = tn.vsa.ngrams(text("thequickbrownfox")), tn.vsa.ngrams(text("thequickbrowncat"))
    >>> float(tn.vsa.similarity(a, b)) > 0.5
    True
    """
    n = count(n, "n", 1)
    vs = _sequence(vs)
    m = _length(vs)
    if m < n:
        raise ValueError(f"ngrams: a sequence of {m} hypervectors has no window of {n}")
    windows = m - n + 1
    out = None
    for j in range(n):
        part = permute(_rows(vs, slice(j, j + windows)), n - 1 - j, device=device)
        out = part if out is None else bind(out, part, device=device)
    return bundle(out, -2, device=device)


def hash_table(keys: Hypervectors, values: Hypervectors, *,
               device: Device = "auto") -> Hypervectors:
    """A key-value record: the bundle of ``bind(keys[i], values[i])``.

    Look a value up with ``unbind(record, key)`` and clean the noisy result up
    in an :class:`ItemMemory` of the values.

    Parameters
    ----------
    keys, values : array_like of int or PackedTrits
        ``(..., n, d)`` each, of the same kind.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    numpy.ndarray or PackedTrits
        ``(..., d)``.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> mem = tn.vsa.ItemMemory(10_000)
    >>> keys = [mem.add(k) for k in ("name", "colour", "shape")]
    >>> vals = [mem.add(v) for v in ("apple", "red", "round")]
    >>> record = tn.vsa.hash_table(np.stack(keys), np.stack(vals))
    >>> mem.cleanup(tn.vsa.unbind(record, mem["colour"]))
    'red'
    """
    keys = _sequence(keys)
    _length(keys)
    return bundle(bind(keys, values, device=device), -2, device=device)
