"""Sparse distributed memory (Kanerva): ternary addresses, integer counters, ternary read-out."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._dispatch import call, place
from .._interop import origin, take, to_host
from ..errors import ShapeMismatchError
from ..packing import PackedTrits, pack
from ..typing import Device
from ._hv import BITPLANE, Hypervectors, count, hypervectors, resolve
from .generation import Seed, _threshold, draw_seed, random
from .sequences import _sequence
from .similarity_search import similarity

__all__ = ["SparseDistributedMemory"]


class SparseDistributedMemory:
    """A sparse distributed memory: fixed random addresses, each with integer counters.

    ``locations`` hard locations get random ternary addresses (dimension ``d``,
    from ``seed``: :func:`random`'s vectors) and a row of ``value_d`` integer
    counters, all zero at first. An address is *active* for a key when they
    differ in at most ``radius`` of their ``d`` positions (Hamming distance on
    trits). :meth:`write` adds each value to the counters of every location its
    key activates (clipped to ``[-kappa, kappa]`` after each write when
    ``kappa`` is given); :meth:`read` sums the counters of the locations a query
    activates and returns their signs, a tie (or no active location) giving 0.
    torchhd's ``SparseDistributed``, on ternary vectors with integer counters.

    Two random trit vectors of density 2/3 agree in a third of their positions
    on average: a radius a little below ``2 d / 3`` activates a small share of
    the locations (for ``d = 1000``, 640 activates about 4 %, 620 about 0.1 %).

    Parameters
    ----------
    locations : int
        The number of hard locations, >= 1.
    d : int
        The dimension of addresses and keys, >= 1.
    radius : int
        The activation radius: the most positions a key and an address may differ in, >= 0.
    value_d : int, optional
        The dimension of the stored values (``d`` by default).
    kappa : int, optional
        Counters are clipped to ``[-kappa, kappa]`` (>= 1); unclipped by default.
    density : float
        The share of non-zero trits of the addresses, in (0, 1].
    seed : int, numpy.random.SeedSequence, numpy.random.Generator or None
        Seed of the addresses, as for :func:`random` (the ``seed`` attribute holds
        the integer used).
    device : {"auto", "cpu", "cuda", "numpy"}
        Where the addresses are made and keys compared with them.

    Attributes
    ----------
    addresses : PackedTrits
        ``(locations, d)`` bitplane addresses.
    counters : numpy.ndarray
        ``(locations, value_d)`` int64 counters, kept on the host.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> sdm = tn.vsa.SparseDistributedMemory(2000, 1000, radius=640, seed=0)
    >>> keys = tn.vsa.random(20, 1000, seed=1)
    >>> sdm.write(keys, keys)                   # auto-associative
    >>> int(sdm.active(keys[0]).sum())          # locations written for the first key
    72
    >>> noisy = keys.copy()
    >>> noisy[:, :150] = 0                      # 15 % of each key lost
    >>> back = sdm.read(noisy)
    >>> bool((tn.vsa.cleanup(back, keys)[0] == np.arange(20)).all())
    True
    """

    def __init__(self, locations: int, d: int, radius: int, *, value_d: int | None = None,
                 kappa: int | None = None, density: float = 2 / 3, seed: Seed = None,
                 device: Device = "auto") -> None:
        self.locations = count(locations, "locations", 1)
        self.d = count(d, "d", 1)
        self.radius = count(radius, "radius", 0)
        self.value_d = self.d if value_d is None else count(value_d, "value_d", 1)
        self.kappa = None if kappa is None else count(kappa, "kappa", 1)
        _threshold(density)
        self.density = density
        self.seed = draw_seed(seed)
        self.device = device
        self.addresses = random(self.locations, self.d, density=density, seed=self.seed,
                                format="bitplane", device=device)
        self.counters = np.zeros((self.locations, self.value_d), np.int64)

    def __repr__(self) -> str:
        return (f"SparseDistributedMemory(locations={self.locations}, d={self.d}, "
                f"radius={self.radius}, value_d={self.value_d}, kappa={self.kappa})")

    def _keys(self, keys: Hypervectors, name: str) -> tuple[Hypervectors, tuple[int, ...]]:
        keys = _sequence(keys)
        shape = tuple(int(s) for s in keys.shape)
        if not shape or shape[-1] != self.d:
            raise ShapeMismatchError(
                f"SparseDistributedMemory: {name} must be (..., {self.d}), got shape {shape}",
                expected=("...", self.d), actual=shape)
        return keys, shape[:-1]

    def active(self, keys: Hypervectors) -> np.ndarray:
        """Which locations each key activates: Hamming distance to their address <= ``radius``.

        Parameters
        ----------
        keys : array_like of int or PackedTrits
            ``(..., d)`` keys.

        Returns
        -------
        numpy.ndarray
            ``(..., locations)`` bool, on the host.

        Raises
        ------
        ShapeMismatchError
            Keys of another dimension than ``d``.

        Examples
        --------
        >>> import tritnum as tn
        >>> sdm = tn.vsa.SparseDistributedMemory(4, 6, radius=0, seed=2)
        >>> sdm.active(tn.unpack(sdm.addresses[[2, 0]]))
        array([[False, False,  True, False],
               [ True, False, False, False]])
        """
        keys, lead = self._keys(keys, "keys")
        if not isinstance(keys, PackedTrits):
            keys = pack(keys, "bitplane", device=resolve(self.device, keys))
        same = to_host(similarity(keys, self.addresses, "hamming", pairwise=True,
                                  device=self.device))
        differ = self.d - np.rint(np.asarray(same, np.float64) * self.d)
        return (differ <= self.radius).reshape((*lead, self.locations))

    def write(self, keys: Hypervectors, values: Hypervectors) -> None:
        """Add each value to the counters of the locations its key activates.

        Parameters
        ----------
        keys : array_like of int or PackedTrits
            ``(n, d)`` keys (or one ``(d,)``).
        values : array_like of int or PackedTrits
            ``(n, value_d)`` trits (or one ``(value_d,)``), one per key.

        Raises
        ------
        ShapeMismatchError
            Keys or values of the wrong dimension, or not one value per key.
        InvalidTritsError
            A value outside {-1, 0, 1}.

        Examples
        --------
        >>> import numpy as np, tritnum as tn
        >>> sdm = tn.vsa.SparseDistributedMemory(3, 4, radius=4, value_d=2, seed=0)
        >>> sdm.write(np.ones((2, 4), np.int8), np.array([[1, -1], [1, 0]], np.int8))
        >>> sdm.counters                            # radius 4 of 4: every location active
        array([[ 2, -1],
               [ 2, -1],
               [ 2, -1]])
        """
        keys, lead = self._keys(keys, "keys")
        values = _sequence(values)
        want = (*lead, self.value_d)
        if tuple(int(s) for s in values.shape) != want:
            raise ShapeMismatchError(
                f"SparseDistributedMemory.write: values must have shape {want} (one "
                f"value of dimension {self.value_d} per key), got {tuple(values.shape)}",
                expected=want, actual=tuple(values.shape))
        dev = resolve(self.device, keys, values)
        h = hypervectors(values, dev, "values")
        rows = h.rows
        if h.packed:
            rows = call("unpack", dev, rows, BITPLANE, h.d)[0]
        act = self.active(keys).reshape(math.prod(lead), self.locations)
        which, where = np.nonzero(act)
        if len(which) == 0:
            return
        picked = take(rows, (which,), 1)
        self.counters += to_host(call("vsa.class_sums", dev, picked, where.astype(np.int64),
                                      self.locations))
        if self.kappa is not None:
            np.clip(self.counters, -self.kappa, self.kappa, out=self.counters)

    def read(self, queries: Hypervectors) -> Hypervectors:
        """The sign of the summed counters of the locations each query activates.

        Parameters
        ----------
        queries : array_like of int or PackedTrits
            ``(..., d)`` keys.

        Returns
        -------
        numpy.ndarray or PackedTrits
            ``(..., value_d)`` trits, the kind of ``queries`` (on their device); 0
            where the counters cancel or no location is active.

        Raises
        ------
        ShapeMismatchError
            Queries of another dimension than ``d``.

        Examples
        --------
        >>> import numpy as np, tritnum as tn
        >>> sdm = tn.vsa.SparseDistributedMemory(3, 4, radius=4, value_d=3, seed=0)
        >>> sdm.write(np.ones((3, 4), np.int8), np.array([[1, -1, 1], [1, 1, -1], [1, 0, 0]],
        ...                                              np.int8))
        >>> sdm.read(np.zeros(4, np.int8))          # the majority of what was written
        array([1, 0, 0], dtype=int8)
        """
        queries, lead = self._keys(queries, "queries")
        act = self.active(queries).reshape(math.prod(lead), self.locations)
        sums = np.zeros((len(act), self.value_d), np.int64)
        for row, hits in zip(sums, act, strict=True):  # a few active locations each
            self.counters[hits].sum(axis=0, out=row)
        out = place(np.sign(sums).astype(np.int8), _origin(queries), (*lead, self.value_d))
        return pack(out, "bitplane") if isinstance(queries, PackedTrits) else out


def _origin(x: Any) -> Any:
    """Where results for ``x`` go (a PackedTrits by its buffer)."""
    return origin(x.data if isinstance(x, PackedTrits) else x)
