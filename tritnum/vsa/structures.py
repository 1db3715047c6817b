"""Item memory, sequences, n-grams, key-value records and a centroid classifier."""

from __future__ import annotations

import json
import math
import numbers
import os
from collections.abc import Hashable, Iterable
from typing import Any

import numpy as np

from .._dispatch import kernel
from .._interop import to_host
from .._npz import reading
from .._validate import raise_invalid_trits
from ..errors import FormatError, InvalidTritsError, ShapeMismatchError
from ..packing import PackedTrits, ensure_valid, pack, unpack
from . import _ops
from ._hv import Hypervectors, count

__all__ = ["Centroid", "ItemMemory", "bundle_sequence", "hash_table", "ngrams"]

_FILE_VERSION = 1


def _rows(x: Hypervectors, sl: slice) -> Hypervectors:
    """``x[..., sl, :]``: a range of vectors along the second-to-last axis, of either kind."""
    if isinstance(x, PackedTrits):
        data = x.data[..., sl, :, :]
        return PackedTrits._encoded(data, (*tuple(data.shape)[:-2], x.shape[-1]), "bitplane")
    return x[..., sl, :]


def _length(x: Hypervectors) -> int:
    shape = x.shape
    if len(shape) < 2:
        raise ShapeMismatchError(
            f"expected a sequence of hypervectors (..., n, d), got shape {tuple(shape)}",
            expected="ndim >= 2", actual=tuple(shape))
    return shape[-2]


def bundle_sequence(vs: Hypervectors, *, device: str = "auto") -> Hypervectors:
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
    >>> a, b, c = tn.vsa.random(3, 10_000)
    >>> abc = tn.vsa.bundle_sequence(tn.vsa.random(3, 10_000))
    >>> tn.vsa.similarity(abc, tn.vsa.permute(a, 2)) > 0.3
    np.True_
    """
    n = _length(vs)
    shifts = np.arange(n - 1, -1, -1, dtype=np.int64)
    return _ops.bundle(_ops.permute(vs, shifts, device=device), -2, device=device)


def ngrams(vs: Hypervectors, n: int = 3, *, device: str = "auto") -> Hypervectors:
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
    m = _length(vs)
    if m < n:
        raise ValueError(f"ngrams: a sequence of {m} hypervectors has no window of {n}")
    windows = m - n + 1
    out = None
    for j in range(n):
        part = _ops.permute(_rows(vs, slice(j, j + windows)), n - 1 - j, device=device)
        out = part if out is None else _ops.bind(out, part, device=device)
    return _ops.bundle(out, -2, device=device)


def hash_table(keys: Hypervectors, values: Hypervectors, *, device: str = "auto") -> Hypervectors:
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
    _length(keys)
    return _ops.bundle(_ops.bind(keys, values, device=device), -2, device=device)


def _as_format(v: Hypervectors, packed: bool) -> Hypervectors:
    """``v`` as a bitplane PackedTrits (``packed``) or as dense trits."""
    if isinstance(v, PackedTrits):
        return v.to("bitplane") if packed else unpack(v)
    return pack(v, "bitplane") if packed else v


class ItemMemory:
    """A codebook: symbols and their random hypervectors, with cleanup by nearest neighbour.

    Symbol ``i`` (in the order added) gets row ``i`` of
    ``tn.vsa.random(n, d, density=density, seed=seed)`` unless a vector is given,
    so two memories with the same seed agree on every device.

    Parameters
    ----------
    d : int
        Dimension of the hypervectors.
    seed : int
        Seed of the generated vectors.
    density : float
        Their share of non-zero trits, in (0, 1].
    format : {"dense", "bitplane"}
        How vectors are stored and returned.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where vectors are generated and cleanup searches run.

    Examples
    --------
    >>> import tritnum as tn
    >>> mem = tn.vsa.ItemMemory(1000, seed=1)
    >>> for name in ("a", "b", "c"):
    ...     _ = mem.add(name)
    >>> noisy = mem["b"].copy()
    >>> noisy[:300] = 0
    >>> mem.cleanup(noisy), mem.cleanup(noisy, k=2)
    ('b', ['b', 'a'])
    >>> len(mem), "c" in mem, mem.symbols
    (3, True, ['a', 'b', 'c'])
    """

    def __init__(self, d: int, *, seed: int = 0, density: float = 2 / 3,
                 format: str = "dense", device: str = "auto") -> None:
        self.d = count(d, "d")
        self._packed = _ops._format(format)
        _ops._threshold(density)
        _ops.seed_key(seed)
        self.seed = seed
        self.density = density
        self.format = format
        self.device = device
        self._symbols: list[Hashable] = []
        self._index: dict[Hashable, int] = {}
        self._rows = np.empty(self._row_shape(0), self._dtype())
        self._count = 0

    def _row_shape(self, n: int) -> tuple[int, ...]:
        return (n, 2, -(-self.d // 64)) if self._packed else (n, self.d)

    def _dtype(self) -> type:
        return np.uint64 if self._packed else np.int8

    def __len__(self) -> int:
        return self._count

    def __contains__(self, symbol: object) -> bool:
        return symbol in self._index

    @property
    def symbols(self) -> list[Hashable]:
        """The symbols in the order they were added."""
        return list(self._symbols)

    @property
    def vectors(self) -> Hypervectors:
        """All vectors, ``(len(self), d)``, in the order of :attr:`symbols`."""
        return self._wrap(self._rows[: self._count], (self._count,))

    def _wrap(self, rows: np.ndarray, lead: tuple[int, ...]) -> Hypervectors:
        if self._packed:
            return PackedTrits._encoded(rows.reshape((*lead, *tuple(rows.shape)[1:])),
                                        (*lead, self.d), "bitplane")
        return rows.reshape((*lead, self.d))

    def _append(self, symbol: Hashable, row: np.ndarray) -> None:
        if self._count == len(self._rows):
            grown = np.empty(self._row_shape(max(8, 2 * self._count)), self._dtype())
            grown[: self._count] = self._rows[: self._count]
            self._rows = grown
        self._rows[self._count] = row
        self._index[symbol] = self._count
        self._symbols.append(symbol)
        self._count += 1

    def add(self, symbol: Hashable, vector: Hypervectors | None = None) -> Hypervectors:
        """Store ``symbol`` and return its vector (the existing one if already stored).

        Without ``vector`` the next row of the memory's generator is used.
        """
        if symbol in self._index:
            return self[symbol]
        if vector is None:
            dev = _ops.resolve(self.device)
            row = _ops.random_rows(self._count, 1, self.d, density=self.density,
                                   seed=self.seed, packed=self._packed, dev=dev)
            row = to_host(row)[0]
        else:
            h = _ops.hypervectors(_as_format(vector, self._packed), "numpy", "vector")
            if h.shape != (self.d,):
                raise ShapeMismatchError(
                    f"ItemMemory.add: vector must have shape ({self.d},), got {h.shape}",
                    expected=(self.d,), actual=h.shape)
            row = to_host(h.rows)[0]
        self._append(symbol, row)
        return self[symbol]

    def __getitem__(self, symbol: Hashable) -> Hypervectors:
        try:
            i = self._index[symbol]
        except KeyError:
            raise KeyError(f"{symbol!r} is not in this ItemMemory (add it first)") from None
        return self._wrap(self._rows[i:i + 1].copy(), ())

    def cleanup(self, v: Hypervectors, k: int = 1, *, metric: str = "cosine") -> Any:
        """The symbol(s) whose vectors are most similar to ``v``.

        Parameters
        ----------
        v : array_like of int or PackedTrits
            One hypervector ``(d,)`` or a batch ``(..., d)``, of either kind.
        k : int
            How many symbols, best first.
        metric : {"cosine", "dot", "hamming"}
            As for :func:`tritnum.vsa.similarity`.

        Returns
        -------
        symbol, list of symbols, or nested lists
            One symbol for ``k == 1`` and one vector, a list of ``k`` otherwise;
            a list of those for a batch.

        Raises
        ------
        ValueError
            An empty memory, or ``k`` larger than it.
        """
        if self._count == 0:
            raise ValueError("ItemMemory.cleanup: the memory is empty; add symbols first")
        idx, _ = _ops.search(_as_format(v, self._packed), self.vectors, k, metric,
                             device=self.device)
        idx = to_host(idx)
        picked = [self._symbols[r[0]] if k == 1 else [self._symbols[i] for i in r]
                  for r in idx.reshape(-1, k).tolist()]
        return _nest(picked, idx.shape[:-1])

    def save(self, path: str | os.PathLike) -> None:
        """Write the memory to an ``.npz`` file (no pickle); symbols must be str or int.

        Examples
        --------
        >>> import os, tempfile, tritnum as tn
        >>> mem = tn.vsa.ItemMemory(100, format="bitplane")
        >>> _ = mem.add("x"), mem.add(7)
        >>> path = os.path.join(tempfile.mkdtemp(), "mem.npz")
        >>> mem.save(path)
        >>> back = tn.vsa.ItemMemory.load(path)
        >>> back.symbols, back[7] == mem[7]
        (['x', 7], True)
        """
        for s in self._symbols:
            if isinstance(s, bool) or not isinstance(s, (str, numbers.Integral)):
                raise TypeError(f"ItemMemory.save: symbols must be str or int, got {s!r}")
        meta = {"version": _FILE_VERSION, "d": self.d, "seed": int(self.seed),
                "density": float(self.density), "format": self.format,
                "symbols": [s if isinstance(s, str) else int(s) for s in self._symbols]}
        with open(path, "wb") as f:
            np.savez(f, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8),
                     rows=self._rows[: self._count])

    @classmethod
    def load(cls, path: str | os.PathLike, *, device: str = "auto") -> ItemMemory:
        """Read a memory written by :meth:`save`."""
        with reading(path, "ItemMemory file"):
            with np.load(path, allow_pickle=False) as f:
                meta = json.loads(f["meta"].tobytes().decode())
                rows = f["rows"]
            if meta.get("version") != _FILE_VERSION:
                raise FormatError(
                    f"{path}: unsupported ItemMemory file version {meta.get('version')}")
            mem = cls(meta["d"], seed=meta["seed"], density=meta["density"],
                      format=meta["format"], device=device)
            symbols = list(meta["symbols"])
        if rows.shape != mem._row_shape(len(symbols)) or rows.dtype != mem._dtype():
            raise FormatError(f"{path}: vectors of shape {rows.shape} and dtype {rows.dtype} do "
                              f"not fit {len(symbols)} symbols of dimension {mem.d}")
        try:
            if mem._packed:
                ensure_valid(PackedTrits(rows, (len(rows), mem.d), "bitplane"), "cpu")
            elif ((rows < -1) | (rows > 1)).any():
                raise_invalid_trits(rows, "rows")
        except InvalidTritsError as exc:
            raise FormatError(f"{path}: the stored vectors are not trits ({exc})") from None
        mem._rows = rows.copy()
        mem._count = len(rows)
        mem._symbols = symbols
        mem._index = {s: i for i, s in enumerate(mem._symbols)}
        return mem


class Centroid:
    """A centroid (prototype) classifier on hypervectors, with optional retraining.

    ``fit`` adds up the hypervectors of each class into an integer prototype;
    ``predict`` picks the class whose prototype has the largest cosine with the
    sample. ``epochs`` rounds of retraining then move misclassified training
    samples from the prototype they were given to toward their own class
    (the perceptron-style refinement common in hyperdimensional computing).

    Parameters
    ----------
    epochs : int
        Retraining rounds after the first pass (0: plain centroids).

    Attributes
    ----------
    classes_ : numpy.ndarray
        The class labels, sorted.
    sums_ : numpy.ndarray
        ``(n_classes, d)`` float64 prototypes (integer valued).

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> protos = tn.vsa.random(3, 2000, seed=1)
    >>> y = np.repeat([0, 1, 2], 20)
    >>> X = tn.vsa.bundle(np.stack([protos[y], tn.vsa.random(60, 2000, seed=2)]))
    >>> clf = tn.vsa.Centroid().fit(X, y)
    >>> clf.predict(protos), clf.score(X, y)
    (array([0, 1, 2]), 1.0)
    """

    def __init__(self, *, epochs: int = 0) -> None:
        self.epochs = count(epochs, "epochs")
        self.classes_: np.ndarray = np.empty(0, np.int64)
        self.sums_: np.ndarray | None = None

    @staticmethod
    def _dense(X: Hypervectors, name: str = "X") -> np.ndarray:
        h = _ops.hypervectors(X, "numpy", name)
        rows = to_host(h.rows)
        if h.packed:
            rows = kernel("unpack", "cpu")(rows, _ops._BITPLANE, h.d)[0]
        if len(h.lead) != 1:
            raise ShapeMismatchError(f"{name} must be (n_samples, d), got shape {h.shape}",
                                     expected="(n, d)", actual=h.shape)
        return rows

    def _check_d(self, X: np.ndarray) -> None:
        if self.sums_ is not None and X.shape[1] != self.sums_.shape[1]:
            raise ShapeMismatchError(
                f"hypervectors of dimension {X.shape[1]}; this classifier was fit on "
                f"{self.sums_.shape[1]}", expected=self.sums_.shape[1], actual=X.shape[1])

    def _labels(self, y: Any, n: int) -> np.ndarray:
        y = np.asarray(y)
        if y.shape != (n,):
            raise ShapeMismatchError(f"y must have shape ({n},), one label per sample, "
                                     f"got {y.shape}", expected=(n,), actual=y.shape)
        return y

    def partial_fit(self, X: Hypervectors, y: Iterable[Any]) -> Centroid:
        """Add samples ``X`` ``(n, d)`` with labels ``y`` to the class prototypes."""
        X = self._dense(X)
        y = self._labels(y, len(X))
        self._check_d(X)
        classes = np.union1d(self.classes_, y)
        sums = np.zeros((len(classes), X.shape[1]))
        if self.sums_ is not None:
            sums[np.searchsorted(classes, self.classes_)] = self.sums_
        np.add.at(sums, np.searchsorted(classes, y), X)
        self.classes_, self.sums_ = classes, sums
        return self

    def fit(self, X: Hypervectors, y: Iterable[Any]) -> Centroid:
        """Start over: prototypes from ``X`` and ``y``, then ``epochs`` of retraining."""
        self.classes_, self.sums_ = np.empty(0, np.asarray(y).dtype), None
        self.partial_fit(X, y)
        X = self._dense(X)
        target = np.searchsorted(self.classes_, np.asarray(y))
        for _ in range(self.epochs):
            guess = self._scores(X).argmax(axis=1)
            wrong = guess != target
            if not wrong.any():
                break
            np.add.at(self.sums_, target[wrong], X[wrong])
            np.subtract.at(self.sums_, guess[wrong], X[wrong])
        return self

    def _scores(self, X: np.ndarray) -> np.ndarray:
        if self.sums_ is None:
            raise ValueError("Centroid has no classes yet: call fit or partial_fit first")
        self._check_d(X)
        norms = np.linalg.norm(self.sums_, axis=1)
        return (X @ self.sums_.T) / np.where(norms > 0, norms, 1.0)

    def decision_function(self, X: Hypervectors) -> np.ndarray:
        """``(n, n_classes)`` similarity of each sample to each prototype (cosine times |x|)."""
        return self._scores(self._dense(X).astype(np.float64))

    def predict(self, X: Hypervectors) -> np.ndarray:
        """The class of each sample ``(n, d)``: the prototype of largest cosine."""
        return self.classes_[self.decision_function(X).argmax(axis=1)]

    def score(self, X: Hypervectors, y: Iterable[Any]) -> float:
        """Accuracy of :meth:`predict` on ``X`` against labels ``y``."""
        pred = self.predict(X)
        return float((pred == self._labels(y, len(pred))).mean())



def _nest(items: list[Any], shape: tuple[int, ...]) -> Any:
    """A flat list as nested lists of ``shape`` (the single item for shape ``()``)."""
    if not shape:
        return items[0]
    if len(shape) == 1:
        return items
    step = math.prod(shape[1:])
    return [_nest(items[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]
