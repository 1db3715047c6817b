"""Resonator network: factorize a bound product of hypervectors drawn from known codebooks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._interop import to_host
from ..errors import ShapeMismatchError
from ..packing import PackedTrits
from ..typing import BindRule, Device
from ._hv import Hypervectors, count
from .algebra import _rule, bind, bundle, unbind
from .sequences import _sequence
from .similarity_search import similarity

__all__ = ["Factorization", "resonator"]


@dataclass(frozen=True)
class Factorization:
    """What :func:`resonator` found (its fields are these parameters).

    Parameters
    ----------
    indices : numpy.ndarray
        ``(n_factors,)`` int64: for each factor, the codebook row most similar
        (integer dot) to what the last iteration unbound for it, ties to the
        lower row.
    estimates : list
        The last estimate of each factor, ``(d,)`` hypervectors of the
        product's kind and device.
    iterations : int
        How many update sweeps ran (1 to ``max_iter``).
    converged : bool
        Whether the last sweep left every estimate unchanged (a fixed point);
        False when ``max_iter`` sweeps ran without reaching one.
    """

    indices: np.ndarray
    estimates: list[Any]
    iterations: int
    converged: bool


def _unbound(product: Hypervectors, estimates: list[Any], i: int, rule: str,
             device: str) -> Hypervectors:
    """Factor ``i`` of ``product`` given the others' estimates.

    "mul": ``product`` bound with every other estimate. "mod3": the product is
    ``f0 - f1 - ... - f[n-1]``, so ``f0 = product + f1 + ...`` and, for ``i >= 1``,
    ``fi = f0 - product - (the other f's after f0)``.
    """
    others = [e for j, e in enumerate(estimates) if j not in (0, i)]
    if rule == "mul":
        out = product if i == 0 else unbind(product, estimates[0], device=device)
        for e in others:
            out = unbind(out, e, device=device)
        return out
    if i == 0:
        out = product
        for e in estimates[1:]:
            out = unbind(out, e, rule="mod3", device=device)
        return out
    out = bind(estimates[0], product, rule="mod3", device=device)
    for e in others:
        out = bind(out, e, rule="mod3", device=device)
    return out


def _same(a: Hypervectors, b: Hypervectors) -> bool:
    if isinstance(a, PackedTrits):
        return bool(np.array_equal(to_host(a.data), to_host(b.data)))
    return bool(np.array_equal(to_host(a), to_host(b)))


def _shape(x: Hypervectors) -> tuple[int, ...]:
    return tuple(int(s) for s in x.shape)


def _codebooks(product: Hypervectors, codebooks: Any) -> list[Hypervectors]:
    """The codebooks, checked against ``product`` from their shapes (no kernel runs)."""
    if not isinstance(codebooks, Sequence) or isinstance(codebooks, str):
        raise TypeError("resonator: codebooks must be a sequence (list or tuple) of (m, d) "
                        f"hypervector arrays, one per factor, got {type(codebooks).__name__}")
    books = [_sequence(c) for c in codebooks]
    if len(books) < 2:
        raise ValueError(f"resonator: a product of at least 2 factors has at least 2 "
                         f"codebooks, got {len(books)}")
    if len(_shape(product)) != 1:
        raise ShapeMismatchError(
            f"resonator: product must be one hypervector (d,), got shape {_shape(product)}",
            expected="(d,)", actual=_shape(product))
    d = _shape(product)[0]
    for i, book in enumerate(books):
        if isinstance(book, PackedTrits) != isinstance(product, PackedTrits):
            raise TypeError("resonator: the product and the codebooks must all be dense "
                            "int8 arrays or all 'bitplane' PackedTrits")
        if len(_shape(book)) != 2 or _shape(book)[1] != d or _shape(book)[0] == 0:
            raise ShapeMismatchError(
                f"resonator: codebook {i} must be (m, {d}) with m >= 1, got {_shape(book)}",
                expected=("m >= 1", d), actual=_shape(book))
    return books


def resonator(product: Hypervectors, codebooks: Sequence[Hypervectors], *,
              rule: BindRule = "mul", max_iter: int = 100,
              device: Device = "auto") -> Factorization:
    """Factorize ``product``, a bound product of one row from each codebook.

    ``product = bind(bind(f0, f1), f2) ...`` (folded left to right with
    ``rule``) where ``f_i`` is a row of ``codebooks[i]``. The resonator network
    (Frady et al. 2020; torchhd's ``resonator`` step for MAP) starts each
    estimate at the bundle of its codebook and then, in every sweep, for
    every factor at once: unbinds the other factors' current estimates from
    the product; scores each codebook row by its integer dot product with
    what is left; and makes the new estimate the bundle of the codebook
    weighted by those scores (the sign of their weighted sum, a tie giving
    0). It stops at a fixed point (a sweep that changes no estimate) or after
    ``max_iter`` sweeps. Everything is integer and in a fixed order: the same
    inputs give the same result on every device.

    Parameters
    ----------
    product : array_like of int or PackedTrits
        ``(d,)``: the hypervector to factorize.
    codebooks : sequence of array_like of int or PackedTrits
        One ``(m_i, d)`` codebook per factor, at least two, the kind of ``product``.
    rule : {"mul", "mod3"}
        How the factors were bound (:func:`bind`). With ``"mul"`` positions where
        a factor is 0 carry nothing; with ``"mod3"`` every position is kept.
    max_iter : int
        The most sweeps, >= 1.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    Factorization
        ``indices`` (one codebook row per factor), the last ``estimates``,
        ``iterations`` and ``converged``.

    Raises
    ------
    ShapeMismatchError
        ``product`` not ``(d,)``, or a codebook not ``(m, d)`` with ``m >= 1``.
    TypeError
        Codebooks that are not a sequence, or of another kind than ``product``.
    ValueError
        Fewer than two codebooks, ``max_iter < 1`` or an unknown ``rule``.

    Examples
    --------
    >>> import tritnum as tn
    >>> books = [tn.vsa.random(10, 2000, density=1.0, seed=s) for s in (1, 2, 3)]
    >>> product = tn.vsa.bind(tn.vsa.bind(books[0][4], books[1][7]), books[2][2])
    >>> found = tn.vsa.resonator(product, books)
    >>> found.indices, found.converged, found.iterations
    (array([4, 7, 2]), True, 3)
    """
    rule = _rule(rule)
    max_iter = count(max_iter, "max_iter", 1)
    product = _sequence(product)
    books = _codebooks(product, codebooks)
    estimates = [bundle(book, device=device) for book in books]
    indices = np.zeros(len(books), np.int64)
    converged, sweeps = False, 0
    while not converged and sweeps < max_iter:
        sweeps += 1
        new = []
        for i, book in enumerate(books):
            left = _unbound(product, estimates, i, rule, device)
            scores = to_host(similarity(left, book, "dot", device=device)).reshape(-1)
            indices[i] = int(np.argmax(scores))
            new.append(bundle(book, weights=scores, device=device))
        converged = all(_same(a, b) for a, b in zip(new, estimates, strict=True))
        estimates = new
    return Factorization(indices, estimates, sweeps, converged)
