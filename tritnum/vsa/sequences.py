"""Sequences of ternary hypervectors: ordered bundles, n-grams and key-value records."""

from __future__ import annotations

import numpy as np

from ..errors import ShapeMismatchError
from ..packing import PackedTrits
from ..typing import BindRule, Device
from ._hv import Hypervectors, count
from .algebra import _rule, bind, bundle, permute

# Internal API: the private names other modules use (tests/test_architecture_seams.py):
# vsa/structures.py (_sequence).
_INTERNAL_API = ("_sequence",)

__all__ = ["bind_sequence", "bundle_sequence", "hash_table", "ngrams"]


def _rows(x: Hypervectors, sl: slice | int) -> Hypervectors:
    """``x[..., sl, :]``: vectors along the second-to-last axis (a range or one), of either kind."""
    if isinstance(x, PackedTrits):  # still packed; its codes as checked (or not) as x's
        return x[(slice(None),) * (len(x.shape) - 2) + (sl,)]
    return x[..., sl, :]


def _sequence(x: Hypervectors) -> Hypervectors:
    """``x`` as an array when it is a nested list (every VSA op takes array_like)."""
    return x if isinstance(x, PackedTrits) or hasattr(x, "shape") else np.asarray(x)


def _length(x: Hypervectors) -> int:
    shape = tuple(x.shape)  # a GPU array's shape may refuse negative indices
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


def bind_sequence(vs: Hypervectors, *, rule: BindRule = "mul",
                  device: Device = "auto") -> Hypervectors:
    """Encode an ordered sequence by binding: ``bind(permute(vs[0], n - 1), ..., vs[n - 1])``.

    torchhd's ``bind_sequence``: position ``i`` is rolled by its distance from
    the end, ``n - 1 - i``, and the rolled vectors are bound left to right,
    ``bind(bind(p[0], p[1]), p[2]) ...``. Unlike :func:`bundle_sequence` the
    result is like none of its members: it stands for the whole sequence, and
    unbinding all but one rolled member gives that member back (exactly for
    ``rule="mod3"``, wherever the others are non-zero for ``"mul"``).

    Parameters
    ----------
    vs : array_like of int or PackedTrits
        ``(..., n, d)`` with ``n >= 1``: sequences of ``n`` hypervectors.
    rule : {"mul", "mod3"}
        The binding rule, as for :func:`bind` (``"mod3"`` binds as ``a - b``,
        so the fold is ``p[0] - p[1] - ... - p[n-1]`` mod 3).
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    numpy.ndarray or PackedTrits
        ``(..., d)``.

    Raises
    ------
    ShapeMismatchError
        ``vs`` of rank < 2.
    ValueError
        An empty sequence (``n == 0``).

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> vs = np.array([[1, 0, -1, 1], [1, 1, -1, -1], [-1, 1, 1, 1]], dtype=np.int8)
    >>> tn.vsa.bind_sequence(vs)
    array([-1,  1,  1,  0], dtype=int8)
    >>> a, b = tn.vsa.random(2, 1000, seed=3)
    >>> ab, ba = tn.vsa.bind_sequence(np.stack([a, b])), tn.vsa.bind_sequence(np.stack([b, a]))
    >>> float(tn.vsa.similarity(ab, ba)) < 0.2
    True
    """
    _rule(rule)
    vs = _sequence(vs)
    n = _length(vs)
    if n == 0:
        raise ValueError("bind_sequence: the sequence is empty (n == 0); "
                         "give at least one hypervector")
    rolled = permute(vs, np.arange(n - 1, -1, -1, dtype=np.int64), device=device)
    out = _rows(rolled, 0)
    for i in range(1, n):
        out = bind(out, _rows(rolled, i), rule=rule, device=device)
    return out


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
