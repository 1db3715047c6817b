"""Generation of ternary hypervectors: random, level, circular and the identity of binding."""

from __future__ import annotations

import hashlib
import numbers
from typing import Any, TypeAlias

import numpy as np

from .._dispatch import call, kernel
from .._interop import dask_layer
from .._kernels.shared import vsa as _hv_math
from .._validate import choice
from ..errors import FormatError
from ..typing import BindRule, Device, HVFormat
from ._hv import BITPLANE, Hypervectors, count, new, resolve
from ._hv import wrap as _wrap
from .algebra import _rule

# Internal API: the private names other modules use (tests/test_architecture_seams.py):
# vsa/memory.py.
_INTERNAL_API = ("_format", "_threshold")

__all__ = ["circular", "identity", "level", "random"]

_FORMATS = ("dense", "bitplane")


def _format(format: str) -> bool:
    """True for "bitplane", False for "dense"."""
    return choice(format, "format", _FORMATS, FormatError) == "bitplane"


def _threshold(density: Any) -> int:
    """``density`` in (0, 1] as the 32-bit threshold the generator compares against."""
    if not isinstance(density, numbers.Real) or isinstance(density, bool):
        raise TypeError(f"density must be a real number in (0, 1], got {density!r}")
    density = float(density)
    if not 0.0 < density <= 1.0:  # NaN fails too
        raise ValueError(f"density must be in (0, 1], got {density}")
    return max(1, min(1 << 32, round(density * 2.0**32)))


Seed: TypeAlias = int | np.random.SeedSequence | np.random.Generator | None
"""What the generators take as ``seed`` (see :func:`draw_seed`)."""

_SEED_KINDS = "an integer, None, a numpy.random.SeedSequence or a numpy.random.Generator"


def draw_seed(seed: Any) -> int:
    """``seed`` as an integer: an integer as given, else 64 bits drawn from it.

    ``None`` draws fresh entropy from the operating system, a
    :class:`numpy.random.SeedSequence` gives its first 64-bit word of state (the
    same for the same sequence) and a :class:`numpy.random.Generator` draws one
    64-bit integer (advancing it). Anything else, ``bool`` and floats included,
    raises TypeError.
    """
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
        return int(seed)
    if seed is None:
        seed = np.random.SeedSequence()
    if isinstance(seed, np.random.SeedSequence):
        return int(seed.generate_state(1, np.uint64)[0])
    if isinstance(seed, np.random.Generator):
        return int(seed.integers(0, 2**64, dtype=np.uint64))
    raise TypeError(f"seed must be {_SEED_KINDS}, got {seed!r}")


def _stream(name: str) -> int:
    """The 64-bit constant that sets the stream of the generator ``name`` apart."""
    return int.from_bytes(hashlib.blake2b(f"tritnum.vsa.{name}".encode(), digest_size=8).digest(),
                          "little")


# each generator draws from its own stream of a seed, so that no two agree by accident
# ("compress": the signs of tritnum.compress's projections); random's is the seed's plain
# key (its vectors for an integer seed are those of earlier releases)
_STREAMS = {"random": 0, **{name: _stream(name)
                            for name in ("level", "circular", "ItemMemory", "compress")}}


_MULTIPLIERS = (int(_hv_math._M1), int(_hv_math._M2))


def _fmix(x: int) -> int:
    """The kernels' ``fmix64`` of ``x mod 2**64`` on Python ints (a NumPy call costs 7 µs)."""
    x %= 2**64
    for multiplier in _MULTIPLIERS:
        x ^= x >> 33
        x = x * multiplier % 2**64
    return x ^ (x >> 33)


def seed_key(seed: Any, stream: str = "random") -> int:
    """The 64-bit generator key of ``seed`` (see :func:`draw_seed`) for the generator ``stream``.

    An integer seed is taken mod 2**64. The key of ``"random"`` is the mixed seed;
    every other stream mixes that with its own constant, so its rows are unrelated
    to random's (and to each other's) for the same seed.
    """
    key = _fmix(draw_seed(seed))
    return key if stream == "random" else _fmix(key ^ _STREAMS[stream])


def random_rows(row0: int, n: int, d: int, *, density: float, key: int, packed: bool,
                dev: str) -> Any:
    """Rows ``row0 .. row0 + n`` of the generator keyed ``key`` (host arrays unless CUDA)."""
    return kernel("vsa.random", dev)(row0, n, d, key, _threshold(density), packed)


def random(n: int, d: int, *, density: float = 2 / 3, seed: Seed = None, format: HVFormat = "dense",
           chunks: Any = None, device: Device = "auto") -> Hypervectors:
    """Random hypervectors from a counter-based generator.

    The trit at row ``i``, column ``j`` is a hash of ``(seed, i, j)``: for an
    integer seed the same on every device and for any chunking, so
    ``random(5, d, seed=s)[:3]`` equals ``random(3, d, seed=s)`` and
    ``random(n, 100, seed=s)[:, :50]`` equals ``random(n, 50, seed=s)``.

    Parameters
    ----------
    n, d : int
        Number of hypervectors and their dimension.
    density : float
        Probability that a trit is non-zero, in (0, 1]; non-zero trits are +1
        or -1 with equal probability. The default 2/3 draws -1, 0, +1 uniformly.
    seed : int, numpy.random.SeedSequence, numpy.random.Generator or None
        An integer (any, taken mod 2**64) gives the same vectors on every device,
        for every chunking and in every session. ``None`` (the default) draws fresh
        entropy, so two calls differ. A ``SeedSequence`` gives a 64-bit seed from its
        state (the same sequence, the same vectors); a ``Generator`` gives one drawn
        from it, advancing it, so a seeded Generator makes a reproducible series of
        calls. bool, float and other types raise TypeError.
    format : {"dense", "bitplane"}
        An ``(n, d)`` int8 array, or a "bitplane" :class:`~tritnum.PackedTrits`.
    chunks : int, tuple, dict or str, optional
        The rows' chunks, in every form ``dask.array`` takes for an ``(n, d)``
        array: ``300``, ``-1``, ``"auto"``, ``(300,)``, ``(300, -1)``,
        ``(300, d)``, explicit block sizes ``((300, 300, 400),)`` (0 for an empty
        chunk), ``{0: 300}``. The trit axis is never split: a single value or
        ``"auto"`` chunks the rows alone (where Dask would chunk every axis), and
        an entry for the trit axis that splits it raises ValueError. A flat tuple
        of row block sizes adding up to ``n`` (``(50, 3)`` for 53 rows) is taken
        where it does not read per axis. The result is then lazy, a Dask array
        (or a PackedTrits whose ``data`` is one) whose chunks are generated by
        their tasks, on the workers, each equal to the same rows made in memory.
        Needs dask.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to generate; on ``"cuda"`` the result stays on the GPU (with
        ``chunks``, each task's rows come back to its host).

    Returns
    -------
    numpy.ndarray, PackedTrits or dask.array.Array

    Raises
    ------
    ValueError
        ``density`` outside (0, 1], a negative ``n`` or ``d``, or ``chunks`` that
        split the trit axis or do not fit ``n``.
    TypeError
        A ``seed`` of another type.

    Examples
    --------
    >>> import tritnum as tn
    >>> tn.vsa.random(2, 8, seed=1)
    array([[-1, -1,  1,  1,  1,  0, -1,  0],
           [-1,  0,  0,  1,  0,  1,  1,  0]], dtype=int8)
    >>> (tn.vsa.random(5, 8, seed=1)[:2] == tn.vsa.random(2, 8, seed=1)).all()
    np.True_
    >>> tn.vsa.random(3, 10_000, format="bitplane")
    PackedTrits(shape=(3, 10000), format='bitplane', nbytes=7536, device='cpu')
    """
    n, d = count(n, "n"), count(d, "d")
    packed = _format(format)
    dev = resolve(device)
    _threshold(density)  # checked before a Generator seed is drawn from
    if chunks is not None:
        return dask_layer().random(n, d, density, seed_key(seed), packed, chunks, dev)
    out = random_rows(0, n, d, density=density, key=seed_key(seed), packed=packed, dev=dev)
    return _wrap(out, (n,), d, packed, new(dev))


def _place_new(trits: Any, lead: tuple[int, ...], packed: bool, dev: str) -> Hypervectors:
    """int8 rows made for ``dev`` as the requested kind (bit planes packed on ``dev``)."""
    d = int(tuple(trits.shape)[-1])
    rows = call("pack", dev, trits, BITPLANE)[0] if packed else trits
    return _wrap(rows, lead, d, packed, new(dev))


def _mixed(n: Any, d: Any, density: float, seed: Seed, format: str, device: str,
           circle: bool) -> Hypervectors:
    """``n`` rows mixing two random vectors (rows 0 and 1 of the generator) column by column.

    The generator is the seed's level or circular stream (:func:`seed_key`), not
    random's, so ``level(n, d, seed=s)[0]`` is not ``random(1, d, seed=s)[0]``.

    Row ``i`` takes column ``j`` from the second vector where its share of the
    columns (a line for level, a circle for circular) says so, by a per-column
    uniform 32-bit number (from row 2): the ``vsa.mixed`` kernel.
    """
    n, d = count(n, "n"), count(d, "d")
    if n >= 2**31:
        raise ValueError(f"n must be below 2**31, got {n}")
    packed = _format(format)
    dev = resolve(device)
    thr = _threshold(density)
    key = seed_key(seed, "circular" if circle else "level")
    trits = call("vsa.mixed", dev, n, d, key, thr, circle)
    return _place_new(trits, (n,), packed, dev)


def level(n: int, d: int, *, density: float = 2 / 3, seed: Seed = None, format: HVFormat = "dense",
          device: Device = "auto") -> Hypervectors:
    """``n`` correlated level hypervectors, for encoding scalars on a line.

    Level 0 is a random hypervector; each further level takes a further share
    of its columns from a second, independent one, so nearby levels are similar
    and level ``n - 1`` is unrelated to level 0 (similarity falls linearly).

    Parameters
    ----------
    n, d : int
        Number of levels (below 2**31) and dimension.
    density, seed, format, device
        As for :func:`random`. The same seed gives vectors unrelated to those of
        :func:`random`, :func:`level` and :func:`circular` alike: each draws from
        its own stream of the seed.

    Returns
    -------
    numpy.ndarray or PackedTrits
        ``(n, d)`` hypervectors.

    Examples
    --------
    >>> import tritnum as tn
    >>> L = tn.vsa.level(5, 10_000, seed=0)
    >>> [round(float(tn.vsa.similarity(L[0], L[i])), 2) for i in range(5)]
    [1.0, 0.76, 0.51, 0.26, 0.01]
    """
    return _mixed(n, d, density, seed, format, device, circle=False)


def circular(n: int, d: int, *, density: float = 2 / 3, seed: Seed = None,
             format: HVFormat = "dense", device: Device = "auto") -> Hypervectors:
    """``n`` hypervectors on a circle, for angles and other periodic values.

    Similarity depends only on the distance around the circle: neighbours are
    similar, opposite points (``n / 2`` apart) unrelated, and the last point
    leads back to the first.

    Parameters
    ----------
    n, d : int
        Number of points (below 2**31) and dimension.
    density, seed, format, device
        As for :func:`random`. The same seed gives vectors unrelated to those of
        :func:`random`, :func:`level` and :func:`circular` alike: each draws from
        its own stream of the seed.

    Returns
    -------
    numpy.ndarray or PackedTrits
        ``(n, d)`` hypervectors.

    Examples
    --------
    >>> import tritnum as tn
    >>> C = tn.vsa.circular(8, 10_000, seed=0)
    >>> [round(float(tn.vsa.similarity(C[0], C[i])), 2) for i in range(8)]
    [1.0, 0.74, 0.49, 0.23, -0.02, 0.24, 0.48, 0.75]
    """
    return _mixed(n, d, density, seed, format, device, circle=True)


def identity(d: int, *, rule: BindRule = "mul", format: HVFormat = "dense",
             device: Device = "auto") -> Hypervectors:
    """The identity of :func:`bind`: all ones for ``rule="mul"``, all zeros for ``"mod3"``.

    Parameters
    ----------
    d : int
        Dimension.
    rule : {"mul", "mod3"}
        The binding rule it is the identity of.
    format : {"dense", "bitplane"}
        Dense int8 trits or a bitplane PackedTrits.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to make it.

    Returns
    -------
    numpy.ndarray or PackedTrits
        One hypervector, shape ``(d,)``.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> tn.vsa.identity(4)
    array([1, 1, 1, 1], dtype=int8)
    >>> v = np.array([1, 0, -1, 1], dtype=np.int8)
    >>> tn.vsa.bind(v, tn.vsa.identity(4, rule="mod3"), rule="mod3")
    array([ 1,  0, -1,  1], dtype=int8)
    """
    d = count(d, "d")
    packed = _format(format)
    _rule(rule)
    dev = resolve(device)
    trits = np.full((1, d), 1 if rule == "mul" else 0, np.int8)
    return _place_new(trits, (), packed, dev)
