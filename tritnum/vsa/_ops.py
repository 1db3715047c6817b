"""Generation, algebra, similarity and search of ternary hypervectors."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from .. import _arrays
from .._dispatch import kernel
from .._formats import FORMATS as _ALL_FORMATS
from .._kernels.shared import vsa as _hv_math
from ..errors import FormatError, ShapeMismatchError
from ._hv import HV, Hypervectors, broadcast_rows, count, hypervectors, place_scores, resolve
from ._hv import same_kind as _same_kind
from ._hv import wrap as _wrap

__all__ = [
    "bind", "bundle", "circular", "identity", "level", "negate", "permute", "random",
    "search", "similarity", "unbind",
]

_RULES = ("mul", "mod3")
_FORMATS = ("dense", "bitplane")
SEARCH_BLOCK_SCORES = 1 << 22  # query x memory scores held at once by search
_BITPLANE = _ALL_FORMATS["bitplane"]


def _format(format: str) -> bool:
    """True for "bitplane", False for "dense"."""
    if format not in _FORMATS:
        raise FormatError(f"format must be 'dense' or 'bitplane', got {format!r}")
    return format == "bitplane"


def _threshold(density: Any) -> int:
    """``density`` in (0, 1] as the 32-bit threshold the generator compares against."""
    if not isinstance(density, numbers.Real) or isinstance(density, bool):
        raise TypeError(f"density must be a real number in (0, 1], got {density!r}")
    density = float(density)
    if not 0.0 < density <= 1.0:  # NaN fails too
        raise ValueError(f"density must be in (0, 1], got {density}")
    return max(1, min(1 << 32, round(density * 2.0**32)))


def seed_key(seed: Any) -> int:
    """The generator key of an integer ``seed`` (any integer; taken mod 2**64)."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an integer, got {seed!r}")
    return int(_hv_math.fmix64(np.array([int(seed) % 2**64], np.uint64))[0])


def random_rows(row0: int, n: int, d: int, *, density: float, seed: int, packed: bool,
                dev: str) -> Any:
    """Rows ``row0 .. row0 + n`` of the generator, on ``dev`` (host arrays unless CUDA)."""
    return kernel("vsa.random", dev)(row0, n, d, seed_key(seed), _threshold(density), packed)


def random(n: int, d: int, *, density: float = 2 / 3, seed: int = 0, format: str = "dense",
           device: str = "auto") -> Hypervectors:
    """Random hypervectors from a counter-based generator.

    The trit at row ``i``, column ``j`` is a hash of ``(seed, i, j)``: the same
    on every device and for any chunking, so ``random(5, d)[:3]`` equals
    ``random(3, d)`` and ``random(n, 100)[:, :50]`` equals ``random(n, 50)``.

    Parameters
    ----------
    n, d : int
        Number of hypervectors and their dimension.
    density : float
        Probability that a trit is non-zero, in (0, 1]; non-zero trits are +1
        or -1 with equal probability. The default 2/3 draws -1, 0, +1 uniformly.
    seed : int
        The generator's seed.
    format : {"dense", "bitplane"}
        An ``(n, d)`` int8 array, or a "bitplane" :class:`~tritnum.PackedTrits`.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to generate; on ``"cuda"`` the result stays on the GPU.

    Returns
    -------
    numpy.ndarray or PackedTrits

    Raises
    ------
    ValueError
        ``density`` outside (0, 1], or a negative ``n`` or ``d``.

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
    out = random_rows(0, n, d, density=density, seed=seed, packed=packed, dev=dev)
    return _wrap(out, (n,), d, packed, dev == "cuda")


def _place_new(trits: np.ndarray, packed: bool, dev: str) -> Hypervectors:
    """Host int8 ``(n, d)`` trits as the requested kind, on the GPU for ``dev == "cuda"``."""
    n, d = trits.shape
    rows = _hv_math.to_planes(trits) if packed else trits
    return _wrap(rows, (n,), d, packed, dev == "cuda")


def _mixed(n: Any, d: Any, density: float, seed: int, format: str, device: str,
           take_other: Any) -> Hypervectors:
    """``n`` rows mixing two random vectors (rows 0 and 1 of the generator) column by column.

    Row ``i`` takes column ``j`` from the second vector where ``take_other(u_j, i)``
    holds (``n`` given too), ``u_j`` a per-column uniform 32-bit number (from row 2).
    """
    n, d = count(n, "n"), count(d, "d")
    if n >= 2**31:
        raise ValueError(f"n must be below 2**31, got {n}")
    packed = _format(format)
    dev = resolve(device)
    key = seed_key(seed)
    base, other = _hv_math.random_trits(0, 2, d, key, _threshold(density))
    u = (_hv_math.hashes(2, 1, d, key)[0] >> np.uint64(32)).astype(np.int64)
    i = np.arange(n, dtype=np.int64)[:, None]
    trits = np.where(take_other(u[None, :], i, n), other, base).astype(np.int8)
    return _place_new(trits, packed, dev)


def level(n: int, d: int, *, density: float = 2 / 3, seed: int = 0, format: str = "dense",
          device: str = "auto") -> Hypervectors:
    """``n`` correlated level hypervectors, for encoding scalars on a line.

    Level 0 is a random hypervector; each further level takes a further share
    of its columns from a second, independent one, so nearby levels are similar
    and level ``n - 1`` is unrelated to level 0 (similarity falls linearly).

    Parameters
    ----------
    n, d : int
        Number of levels (below 2**31) and dimension.
    density, seed, format, device
        As for :func:`random`.

    Returns
    -------
    numpy.ndarray or PackedTrits
        ``(n, d)`` hypervectors.

    Examples
    --------
    >>> import tritnum as tn
    >>> L = tn.vsa.level(5, 10_000)
    >>> [round(float(tn.vsa.similarity(L[0], L[i])), 1) for i in range(5)]
    [1.0, 0.8, 0.5, 0.3, 0.0]
    """
    return _mixed(n, d, density, seed, format, device,
                  lambda u, i, n: u * max(n - 1, 1) < i << 32)


def circular(n: int, d: int, *, density: float = 2 / 3, seed: int = 0, format: str = "dense",
             device: str = "auto") -> Hypervectors:
    """``n`` hypervectors on a circle, for angles and other periodic values.

    Similarity depends only on the distance around the circle: neighbours are
    similar, opposite points (``n / 2`` apart) unrelated, and the last point
    leads back to the first.

    Parameters
    ----------
    n, d : int
        Number of points (below 2**31) and dimension.
    density, seed, format, device
        As for :func:`random`.

    Returns
    -------
    numpy.ndarray or PackedTrits
        ``(n, d)`` hypervectors.

    Examples
    --------
    >>> import tritnum as tn
    >>> C = tn.vsa.circular(8, 10_000)
    >>> [round(float(tn.vsa.similarity(C[0], C[i])), 1) for i in range(8)]
    [1.0, 0.8, 0.5, 0.3, 0.0, 0.3, 0.5, 0.7]
    """
    def take_other(u, i, n):
        return np.where(2 * i < n, u * n < (2 * i) << 32, u * n >= (2 * i - n) << 32)

    return _mixed(n, d, density, seed, format, device, take_other)


def identity(d: int, *, rule: str = "mul", format: str = "dense",
             device: str = "auto") -> Hypervectors:
    """The identity of :func:`bind`: all ones for ``rule="mul"``, all zeros for ``"mod3"``.

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
    rows = _hv_math.to_planes(trits) if packed else trits
    return _wrap(rows, (), d, packed, dev == "cuda")


def _rule(rule: str) -> str:
    if rule not in _RULES:
        raise ValueError(f"rule must be 'mul' or 'mod3', got {rule!r}")
    return rule


def _elementwise(a: Any, b: Any, code: int, name: str, device: str) -> Hypervectors:
    dev = resolve(device, a, b)
    ha = hypervectors(a, dev, "a")
    hb = hypervectors(b, dev, "b")
    _same_kind(ha, hb, name)
    lead, ia, ib = broadcast_rows(ha, hb, name)
    out = kernel("vsa.op", dev)(ha.rows, hb.rows, _arrays.for_device(ia, dev),
                                _arrays.for_device(ib, dev), code, ha.packed, ha.d)
    return _wrap(out, lead, ha.d, ha.packed, ha.on_gpu or hb.on_gpu)


def bind(a: Hypervectors, b: Hypervectors, *, rule: str = "mul",
         device: str = "auto") -> Hypervectors:
    """Bind hypervectors: the elementwise product (``rule="mul"``), or ``a - b`` mod 3.

    The product is commutative and associative, and ``bind(bind(a, b), b)``
    gives back ``a`` wherever ``b`` is non-zero. ``rule="mod3"`` is the exact
    cyclic group of the trit-vsa family: trits as integers mod 3 (-1 is 2),
    ``bind(a, b) = a - b``, undone exactly by ``unbind(c, b) = c + b``.

    Parameters
    ----------
    a, b : array_like of int or PackedTrits
        Dense trits or "bitplane" PackedTrits, both of the same kind, with
        the same last dimension; leading shapes broadcast.
    rule : {"mul", "mod3"}
        The binding rule.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    numpy.ndarray or PackedTrits
        The kind of the inputs (on the GPU when an input was).

    Raises
    ------
    ShapeMismatchError
        Different dimensions, or leading shapes that do not broadcast.
    InvalidTritsError
        A dense value outside {-1, 0, 1}.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> a = np.array([1, -1, 0, 1], dtype=np.int8)
    >>> b = np.array([-1, -1, 1, 0], dtype=np.int8)
    >>> tn.vsa.bind(a, b)
    array([-1,  1,  0,  0], dtype=int8)
    >>> tn.vsa.bind(a, b, rule="mod3")
    array([-1,  0, -1,  1], dtype=int8)
    >>> tn.unpack(tn.vsa.bind(tn.pack(a, "bitplane"), tn.pack(b, "bitplane")))
    array([-1,  1,  0,  0], dtype=int8)
    """
    code = _hv_math.MUL if _rule(rule) == "mul" else _hv_math.SUB3
    return _elementwise(a, b, code, "bind", device)


def unbind(c: Hypervectors, b: Hypervectors, *, rule: str = "mul",
           device: str = "auto") -> Hypervectors:
    """Undo :func:`bind`: ``unbind(bind(a, b), b)`` is ``a`` (wherever ``b != 0`` for "mul").

    Parameters
    ----------
    c, b : array_like of int or PackedTrits
        As for :func:`bind`.
    rule : {"mul", "mod3"}
        The rule ``c`` was bound with: "mul" multiplies again, "mod3" adds ``b`` mod 3.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    numpy.ndarray or PackedTrits

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> a = np.array([1, -1, 0, 1], dtype=np.int8)
    >>> b = np.array([-1, 1, 1, 0], dtype=np.int8)
    >>> tn.vsa.unbind(tn.vsa.bind(a, b, rule="mod3"), b, rule="mod3")
    array([ 1, -1,  0,  1], dtype=int8)
    >>> tn.vsa.unbind(tn.vsa.bind(a, b), b)  # the last trit of b is 0
    array([ 1, -1,  0,  0], dtype=int8)
    """
    code = _hv_math.MUL if _rule(rule) == "mul" else _hv_math.ADD3
    return _elementwise(c, b, code, "unbind", device)


def negate(v: Hypervectors, *, device: str = "auto") -> Hypervectors:
    """``-v``: the inverse of ``v`` under bundling (plus and minus planes swapped).

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> tn.vsa.negate(np.array([1, 0, -1], dtype=np.int8))
    array([-1,  0,  1], dtype=int8)
    """
    return _elementwise(v, v, _hv_math.NEG, "negate", device)


def _weights(weights: Any, n: int, dev: str) -> Any:
    w = _arrays.to_host(weights)
    if w.dtype.kind not in "biuf":
        raise TypeError(f"weights must be integers or real numbers, got dtype {w.dtype}")
    if w.shape != (n,):
        raise ShapeMismatchError(
            f"bundle: weights must have shape ({n},), one per bundled vector, got {w.shape}",
            expected=(n,), actual=w.shape,
        )
    if w.dtype.kind == "f":
        if not np.isfinite(w).all():
            raise ValueError("bundle: weights must be finite")
        w = w.astype(np.float64)
    else:  # int64 votes: exact while sum(|w|) fits (checked exactly when it might not)
        if (np.abs(w.astype(np.float64)).sum() >= 2.0**62
                and sum(abs(int(v)) for v in w.tolist()) > np.iinfo(np.int64).max):
            raise ValueError("bundle: integer weights must have sum(|weights|) < 2**63")
        w = w.astype(np.int64)
    return _arrays.for_device(np.ascontiguousarray(w), dev)


def _axis_first(h: HV, axis: int) -> Any:
    """The rows of ``h`` as ``(n, R, ...)`` with ``axis`` of the leading shape first."""
    tail = tuple(h.rows.shape)[1:]
    n = h.lead[axis]
    rest = math.prod(h.lead[:axis] + h.lead[axis + 1:])
    if axis == 0:
        return h.rows.reshape((n, rest, *tail))
    on_gpu = not isinstance(h.rows, np.ndarray)
    rows = _arrays.to_host(h.rows).reshape((*h.lead, *tail))
    rows = np.ascontiguousarray(np.moveaxis(rows, axis, 0)).reshape((n, rest, *tail))
    return _arrays.place(rows, on_gpu)


def bundle(vs: Hypervectors, axis: int = 0, *, weights: Any = None,
           device: str = "auto") -> Hypervectors:
    """Bundle hypervectors by majority: the sign of their (weighted) sum, a tie giving 0.

    Zeros are kept: a column where the votes cancel is 0, not a coin flip.
    On bitplanes the votes are counted word-parallel (bit-sliced counters).

    Parameters
    ----------
    vs : array_like of int or PackedTrits
        Hypervectors ``(..., d)`` of rank >= 2.
    axis : int
        The axis that is summed over (any but the last, which holds the trits).
    weights : array_like of int or float, optional
        One finite weight per vector along ``axis``; the weighted sum is
        accumulated in vector order (float64 or int64), the same on every device.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    numpy.ndarray or PackedTrits
        ``vs`` without ``axis``; the kind of ``vs``.

    Raises
    ------
    ShapeMismatchError
        ``vs`` of rank 1, or weights of the wrong length.
    ValueError
        ``axis`` naming the last axis, or weights that are not finite.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> vs = np.array([[1, 1, -1, 0], [1, -1, -1, 0], [-1, 0, 1, 1]], dtype=np.int8)
    >>> tn.vsa.bundle(vs)
    array([ 1,  0, -1,  1], dtype=int8)
    >>> tn.vsa.bundle(vs, weights=[1, 1, 3])
    array([-1,  0,  1,  1], dtype=int8)
    """
    dev = resolve(device, vs)
    h = hypervectors(vs, dev, "vs")
    ndim = len(h.lead) + 1
    if ndim < 2:
        raise ShapeMismatchError(
            "bundle takes hypervectors of rank >= 2 (vectors along an axis, trits last), "
            f"got shape {h.shape}", expected="ndim >= 2", actual=h.shape)
    axis = count(axis, "axis", minimum=-ndim)
    axis += ndim if axis < 0 else 0
    if axis >= ndim - 1:
        raise ValueError(f"bundle: axis {axis} is the trit axis of shape {h.shape}; "
                         "bundle sums over an axis of vectors")
    n = h.lead[axis]
    rest = h.lead[:axis] + h.lead[axis + 1:]
    w = None if weights is None else _weights(weights, n, dev)
    rows = _axis_first(h, axis)
    packed = h.packed
    if packed and w is not None:  # weighted votes are counted on int8 rows
        flat = rows.reshape((n * math.prod(rest), *tuple(rows.shape)[2:]))
        rows = kernel("unpack", dev)(flat, _BITPLANE, h.d)[0].reshape((n, math.prod(rest), h.d))
        packed = False
    out = kernel("vsa.bundle", dev)(rows, w, packed, h.d)
    if packed != h.packed:
        out = kernel("pack", dev)(out, _BITPLANE)[0]
    return _wrap(out, rest, h.d, h.packed, h.on_gpu)


def permute(v: Hypervectors, shifts: Any = 1, *, device: str = "auto") -> Hypervectors:
    """Roll hypervectors cyclically along the last axis (``np.roll``); negative shifts undo it.

    Parameters
    ----------
    v : array_like of int or PackedTrits
        Hypervectors ``(..., d)``.
    shifts : int or array_like of int
        The roll, one for all or one per vector (broadcast against ``v.shape[:-1]``).
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    numpy.ndarray or PackedTrits

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> v = np.array([[1, 0, -1, 0, 0], [1, 1, 0, 0, -1]], dtype=np.int8)
    >>> tn.vsa.permute(v)
    array([[ 0,  1,  0, -1,  0],
           [-1,  1,  1,  0,  0]], dtype=int8)
    >>> tn.vsa.permute(v, [0, -2])
    array([[ 1,  0, -1,  0,  0],
           [ 0,  0, -1,  1,  1]], dtype=int8)
    """
    dev = resolve(device, v)
    h = hypervectors(v, dev, "v")
    s = np.asarray(shifts)
    d = max(h.d, 1)
    if s.dtype == object and all(isinstance(x, numbers.Integral) and not isinstance(x, bool)
                                 for x in s.flat):  # Python ints beyond int64
        s = np.array([int(x) % d for x in s.flat], np.int64).reshape(s.shape)
    elif s.dtype == np.uint64:
        s = s % np.uint64(d)
    if s.dtype.kind not in "iu":
        raise TypeError(f"shifts must be integers, got {shifts!r}")
    try:
        s = np.broadcast_to(s.astype(np.int64), h.lead)
    except ValueError:
        raise ShapeMismatchError(
            f"permute: shifts of shape {s.shape} do not broadcast to {h.lead}",
            expected=h.lead, actual=s.shape) from None
    s = np.ascontiguousarray(s.reshape(-1) % d)
    out = kernel("vsa.permute", dev)(h.rows, _arrays.for_device(s, dev), h.packed, h.d)
    return _wrap(out, h.lead, h.d, h.packed, h.on_gpu)


def _metric(metric: str) -> int:
    if metric not in _hv_math.METRICS:
        raise ValueError(f"metric must be 'dot', 'cosine' or 'hamming', got {metric!r}")
    return _hv_math.METRICS[metric]


def _scores_out(s: Any, metric: int) -> Any:
    return s.astype(np.int64) if metric == _hv_math.DOT and isinstance(s, np.ndarray) else s


def similarity(a: Hypervectors, b: Hypervectors, metric: str = "cosine", *,
               device: str = "auto") -> Any:
    """Similarity of hypervectors, pair by pair (leading shapes broadcast).

    ``"dot"``: the integer dot product. ``"cosine"``: ``dot / sqrt(nnz(a) nnz(b))``,
    0 when either is all zero. ``"hamming"``: the fraction of equal positions.

    Parameters
    ----------
    a, b : array_like of int or PackedTrits
        Same kind and dimension ``d``; ``a[..., None, :]`` against ``b[None]`` gives
        all pairs.
    metric : {"cosine", "dot", "hamming"}
        The measure.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    numpy.ndarray or scalar
        int64 for "dot", float64 otherwise, of the broadcast leading shape.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> a = np.array([1, -1, 0, 1], dtype=np.int8)
    >>> b = np.array([[1, 1, 0, 1], [0, 0, 1, 0]], dtype=np.int8)
    >>> tn.vsa.similarity(a, b, "dot")
    array([1, 0])
    >>> tn.vsa.similarity(a, b)
    array([0.33333333, 0.        ])
    >>> tn.vsa.similarity(a, b[0], "hamming")
    np.float64(0.75)
    """
    code = _metric(metric)
    dev = resolve(device, a, b)
    ha = hypervectors(a, dev, "a")
    hb = hypervectors(b, dev, "b")
    _same_kind(ha, hb, "similarity")
    lead, ia, ib = broadcast_rows(ha, hb, "similarity")
    s = kernel("vsa.similarity", dev)(ha.rows, hb.rows, _arrays.for_device(ia, dev),
                                      _arrays.for_device(ib, dev), code, ha.packed, ha.d)
    if code == _hv_math.DOT:
        s = _arrays.place(_arrays.to_host(s).astype(np.int64), not isinstance(s, np.ndarray))
    return place_scores(s, lead, ha.on_gpu or hb.on_gpu)


def search(queries: Hypervectors, memory: Hypervectors, k: int = 1, metric: str = "cosine",
           *, device: str = "auto") -> tuple[Any, Any]:
    """The ``k`` most similar memory rows for each query, best first, ties to the lower index.

    Parameters
    ----------
    queries : array_like of int or PackedTrits
        ``(..., d)`` query hypervectors.
    memory : array_like of int or PackedTrits
        ``(m, d)`` stored hypervectors, the same kind as ``queries``, ``m >= 1``.
    k : int
        How many matches per query, ``1 <= k <= m``.
    metric : {"cosine", "dot", "hamming"}
        As for :func:`similarity`.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    indices : numpy.ndarray
        ``(..., k)`` int64 rows of ``memory``.
    scores : numpy.ndarray
        ``(..., k)`` their similarity (int64 for "dot", else float64).

    Raises
    ------
    ValueError
        An empty memory, or ``k`` outside ``1 .. m``.
    ShapeMismatchError
        A memory that is not 2-D, or a different dimension ``d``.

    Examples
    --------
    >>> import tritnum as tn
    >>> memory = tn.vsa.random(100, 1000, seed=3)
    >>> idx, scores = tn.vsa.search(memory[[42, 7]], memory, k=2)
    >>> idx[:, 0], scores[:, 0]
    (array([42,  7]), array([1., 1.]))
    """
    code = _metric(metric)
    dev = resolve(device, queries, memory)
    hq = hypervectors(queries, dev, "queries")
    hm = hypervectors(memory, dev, "memory")
    _same_kind(hq, hm, "search")
    if len(hm.lead) != 1:
        raise ShapeMismatchError(
            f"search: memory must be (m, d), got shape {hm.shape}",
            expected="(m, d)", actual=hm.shape)
    m = hm.lead[0]
    if m == 0:
        raise ValueError("search: the memory is empty (0 stored hypervectors); "
                         "add hypervectors before searching")
    k = count(k, "k", 1)
    if k > m:
        raise ValueError(f"search: k={k} is larger than the memory ({m} hypervectors)")
    q = math.prod(hq.lead)
    step = max(1, SEARCH_BLOCK_SCORES // m)
    search_kernel = kernel("vsa.search", dev)
    parts = [search_kernel(hq.rows[q0:q0 + step], hm.rows, k, code, hq.packed, hq.d)
             for q0 in range(0, q, step)]
    if parts:
        idx = np.concatenate([p[0] for p in parts])
        s = np.concatenate([p[1] for p in parts])
    else:
        idx, s = np.zeros((0, k), np.int64), np.zeros((0, k))
    s = _scores_out(s, code)
    on_gpu = hq.on_gpu or hm.on_gpu
    return (_arrays.place(idx.reshape((*hq.lead, k)), on_gpu),
            _arrays.place(s.reshape((*hq.lead, k)), on_gpu))

