"""Item memory: a codebook of symbols and hypervectors, with cleanup by nearest neighbour."""

from __future__ import annotations

import json
import math
import numbers
import os
from collections.abc import Hashable
from typing import Any

import numpy as np

from .._dispatch import call
from .._interop import dask_layer, to_host
from .._npz import MAX_BYTES, Archive, check_max_bytes, field, reading, unreadable
from .._validate import owned, raise_invalid_trits
from ..errors import FormatError, InvalidTritsError, ShapeMismatchError
from ..io.suffixes import check_writer_suffix
from ..packing import PackedTrits, ensure_valid, pack, unpack
from ..typing import Device, HVFormat, Metric
from ._hv import Hypervectors, count, hypervectors, resolve
from .generation import Seed, _format, _threshold, draw_seed, random_rows, seed_key
from .similarity_search import search

# Internal API: the private names other modules use (tests/test_architecture_seams.py):
# the Dask layer's memory vectors (_dask/vsa.py).
_INTERNAL_API = ("ItemMemory._count", "ItemMemory._given", "ItemMemory._key")

__all__ = ["ItemMemory"]

_FILE_VERSION = 1


def _as_format(v: Hypervectors, packed: bool, device: str) -> Hypervectors:
    """``v`` as a bitplane PackedTrits (``packed``) or as dense trits, converted on ``device``."""
    if isinstance(v, PackedTrits):
        return v.to("bitplane", device=device) if packed else unpack(v, device=device)
    return pack(v, "bitplane", device=device) if packed else v


class ItemMemory:
    """A codebook: symbols and their random hypervectors, with cleanup by nearest neighbour.

    Symbol ``i`` (in the order added) gets row ``i`` of the memory's generator
    unless a vector is given, so two memories with the same integer seed agree on
    every device. The generator is the seed's own ItemMemory stream: its rows are
    unrelated to those of ``tn.vsa.random`` (and ``level``, ``circular``) with the
    same seed.

    Parameters
    ----------
    d : int
        Dimension of the hypervectors.
    seed : int, numpy.random.SeedSequence, numpy.random.Generator or None
        Seed of the generated vectors, as for :func:`tritnum.vsa.random`: ``None``
        (the default) draws fresh entropy, a ``SeedSequence`` or a ``Generator``
        (advanced) gives a 64-bit seed. Either way the ``seed`` attribute holds the integer
        used, which :meth:`save` stores, so a loaded memory goes on generating the
        same vectors.
    density : float
        Their share of non-zero trits, in (0, 1].
    format : {"dense", "bitplane"}
        How vectors are stored and returned.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where vectors are generated and cleanup searches run.
    chunks : int, tuple of int or "auto", optional
        A sharded memory (needs dask): the generated vectors are never held
        here; :attr:`vectors` is a lazy Dask array (or PackedTrits over one) with
        chunks of these many rows, made by their tasks, and :meth:`cleanup` runs
        the sharded search (on the distributed client, if one is the scheduler).
        Vectors given to :meth:`add` are kept here and patched into their chunk.

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

    def __init__(self, d: int, *, seed: Seed = None, density: float = 2 / 3,
                 format: HVFormat = "dense", device: Device = "auto", chunks: Any = None) -> None:
        self.d = count(d, "d")
        self._packed = _format(format)
        _threshold(density)
        self.seed = draw_seed(seed)  # the integer used (None etc. drawn once), saved
        self.density = density
        self.format = format
        self.device = device
        self._symbols: list[Hashable] = []
        self._index: dict[Hashable, int] = {}
        self._rows = np.empty(self._row_shape(0), self._dtype())
        self._count = 0
        self.chunks = chunks
        self._given: dict[int, np.ndarray] = {}  # sharded: the rows given to add, by index

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle the symbols and the rows packed (2 bits a trit), not the int8 buffer."""
        rows = self._rows[: self._count]
        if not self._packed:
            rows = pack(rows, "2bit") if rows.size else rows
        state = {"chunks": self.chunks, "symbols": self._symbols, "rows": rows,
                 "given": self._given}
        return _restore, (self.d, self.seed, self.density, self.format, self.device, state)

    def _row_shape(self, n: int) -> tuple[int, ...]:
        return (n, 2, -(-self.d // 64)) if self._packed else (n, self.d)

    def _dtype(self) -> type:
        return np.uint64 if self._packed else np.int8

    def __len__(self) -> int:
        return self._count

    def __repr__(self) -> str:
        return (f"ItemMemory(d={self.d}, format={self.format!r}, {self._count} symbols, "
                f"device={self.device!r})")

    def __contains__(self, symbol: object) -> bool:
        return symbol in self._index

    @property
    def symbols(self) -> list[Hashable]:
        """The symbols in the order they were added."""
        return list(self._symbols)

    @property
    def vectors(self) -> Hypervectors:
        """All vectors, ``(len(self), d)``, in the order of :attr:`symbols` (read-only).

        Lazy (a Dask array, or a PackedTrits over one) for a sharded memory.
        """
        if self.chunks is not None:
            return dask_layer().memory_vectors(self)
        return self._wrap(owned(self._rows[: self._count], copy=False), (self._count,))

    def _key(self) -> int:
        """The generator key of this memory's vectors."""
        return seed_key(self.seed, "ItemMemory")

    def _wrap(self, rows: np.ndarray, lead: tuple[int, ...]) -> Hypervectors:
        if self._packed:
            return PackedTrits._encoded(rows.reshape((*lead, *tuple(rows.shape)[1:])),
                                        (*lead, self.d), "bitplane")
        return rows.reshape((*lead, self.d))

    def _append(self, symbol: Hashable, row: np.ndarray | None) -> None:
        """Add ``symbol`` and its ``row`` (None: a sharded memory's, made by its task)."""
        if self.chunks is not None:
            if row is not None:
                self._given[self._count] = row
        else:
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

        Parameters
        ----------
        symbol : hashable
            The symbol.
        vector : array_like of int or PackedTrits, optional
            Its hypervector, shape ``(d,)``; without it the next row of the
            memory's generator is used.

        Returns
        -------
        numpy.ndarray or PackedTrits
            The symbol's vector, in the memory's format.

        Raises
        ------
        ShapeMismatchError
            A vector of another shape than ``(d,)``.
        """
        if symbol in self._index:
            return self[symbol]
        if vector is None:  # a sharded memory's rows are made by their tasks
            row = None if self.chunks is not None else self._generated(self._count)
        else:
            dev = resolve(self.device, vector)
            h = hypervectors(_as_format(vector, self._packed, dev), dev, "vector")
            if h.shape != (self.d,):
                raise ShapeMismatchError(
                    f"ItemMemory.add: vector must have shape ({self.d},), got {h.shape}",
                    expected=(self.d,), actual=h.shape)
            row = to_host(h.rows)[0]
        self._append(symbol, row)
        return self[symbol]

    def _generated(self, i: int) -> np.ndarray:
        """Row ``i`` of this memory's generator."""
        row = random_rows(i, 1, self.d, density=self.density, key=self._key(),
                          packed=self._packed, dev=resolve(self.device))
        return to_host(row)[0]

    def __getitem__(self, symbol: Hashable) -> Hypervectors:
        try:
            i = self._index[symbol]
        except KeyError:
            raise KeyError(f"{symbol!r} is not in this ItemMemory (add it first)") from None
        if self.chunks is None:
            row = self._rows[i]
        else:  # a sharded memory's: given, or made here (one row)
            row = self._given[i] if i in self._given else self._generated(i)
        return self._wrap(row[None].copy(), ())

    def cleanup(self, v: Hypervectors, k: int = 1, *, metric: Metric = "cosine") -> Any:
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
        idx, _ = search(_as_format(v, self._packed, self.device), self.vectors, k, metric,
                        device=self.device)
        idx = to_host(idx)
        picked = [self._symbols[r[0]] if k == 1 else [self._symbols[i] for i in r]
                  for r in idx.reshape(-1, k).tolist()]
        return _nest(picked, idx.shape[:-1])

    def save(self, path: str | os.PathLike) -> None:
        """Write the memory to an ``.npz`` file (no pickle); symbols must be str or int.

        Parameters
        ----------
        path : str or os.PathLike
            The file, written as it is.

        Raises
        ------
        FormatError
            A ``.safetensors`` or ``.gguf`` extension (the file would not be what
            its name says).
        TypeError
            A symbol that is not a str or an int.

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
        check_writer_suffix(path, "ItemMemory.save", "npz")
        for s in self._symbols:
            if isinstance(s, bool) or not isinstance(s, (str, numbers.Integral)):
                raise TypeError(f"ItemMemory.save: symbols must be str or int, got {s!r}")
        meta = {"version": _FILE_VERSION, "d": self.d, "seed": int(self.seed),
                "density": float(self.density), "format": self.format,
                "symbols": [s if isinstance(s, str) else int(s) for s in self._symbols]}
        if self.chunks is None:
            rows = self._rows[: self._count]
        else:  # a sharded memory's rows, computed
            v = self.vectors
            rows = to_host(v.data if self._packed else v)
        with open(path, "wb") as f:
            np.savez(f, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8), rows=rows)

    @classmethod
    def load(cls, path: str | os.PathLike, *, device: Device = "auto",
             max_bytes: int = MAX_BYTES) -> ItemMemory:
        """Read a memory written by :meth:`save`.

        Parameters
        ----------
        path : str or os.PathLike
            The file.
        device : str, optional
            Where the memory's vectors live (as for the constructor).
        max_bytes : int, optional
            The most bytes the file's arrays may declare in all, uncompressed (default
            16 GiB). A larger file is refused before anything is read: pass a larger
            ``max_bytes`` to load it. Whatever the limit, a compressed member may not
            expand more than 100 times (:meth:`save` writes uncompressed files).

        Raises
        ------
        FormatError
            Not an ItemMemory file, another version, a missing or ill-typed header key,
            vectors that do not fit the header or are not trits, a truncated, corrupt or
            hostile file (an array larger than ``max_bytes`` or than its member, a zip
            bomb), naming the array or header key at fault.
        OSError
            The file cannot be opened: ``FileNotFoundError``, ``PermissionError``,
            ``IsADirectoryError``, raised unchanged (not a FormatError).
        """
        max_bytes = check_max_bytes(max_bytes)
        with reading(path, "ItemMemory file"), Archive(path, "ItemMemory file", max_bytes) as f:
            meta = _meta(f)
            if meta["version"] != _FILE_VERSION:
                f.fail(f"header key 'version' is {meta['version']}; this tritnum reads "
                       f"version {_FILE_VERSION}")
            mem = cls(meta["d"], seed=meta["seed"], density=meta["density"],
                      format=meta["format"], device=device)
            symbols = meta["symbols"]
            rows = f.array("rows")
        if rows.shape != mem._row_shape(len(symbols)) or rows.dtype != mem._dtype():
            unreadable(path, "ItemMemory file", f"array 'rows' of shape {rows.shape} and dtype "
                       f"{rows.dtype} does not fit {len(symbols)} symbols of dimension {mem.d}")
        dev = resolve(device)
        try:
            if mem._packed:
                ensure_valid(PackedTrits(rows, (len(rows), mem.d), "bitplane", copy=False), dev)
            elif rows.size and not call("vsa.check", dev, rows):
                raise_invalid_trits(rows, "rows")
        except InvalidTritsError as exc:
            raise FormatError(f"{path}: the stored vectors are not trits ({exc})") from None
        mem._rows = rows.copy()
        mem._count = len(rows)
        mem._symbols = symbols
        mem._index = {s: i for i, s in enumerate(mem._symbols)}
        return mem


def _restore(d: int, seed: int, density: float, format: str, device: str,
             state: dict[str, Any]) -> ItemMemory:
    """Unpickle an ItemMemory (see ``ItemMemory.__reduce__``)."""
    mem = ItemMemory(d, seed=seed, density=density, format=format, device=device,
                     chunks=state["chunks"])
    rows = state["rows"]
    mem._rows = unpack(rows) if isinstance(rows, PackedTrits) else rows
    mem._symbols = list(state["symbols"])
    mem._index = {s: i for i, s in enumerate(mem._symbols)}
    mem._count = len(mem._symbols)
    mem._given = state["given"]
    return mem


def _meta(f: Archive) -> dict[str, Any]:
    """The JSON header of an ItemMemory file, each key checked for presence and type."""
    raw = f.array("meta")
    if raw.ndim != 1 or raw.dtype != np.uint8:
        f.fail(f"array 'meta' is {raw.dtype} of shape {raw.shape}, not bytes")
    try:
        text = raw.tobytes().decode()
    except UnicodeDecodeError as exc:
        f.fail(f"array 'meta' is not UTF-8 text: {exc}")
    extra = sorted(f.names() - {"meta", "rows"})
    if extra:
        f.fail(f"array {extra[0]!r} is not one of 'meta' and 'rows'")
    meta = f.parse_json("meta", text)
    kinds = {"version": int, "d": int, "seed": int, "density": (int, float), "format": str,
             "symbols": list}
    meta = {key: field(f, meta, key, kind) for key, kind in kinds.items()}
    seen: dict[Any, int] = {}
    for i, s in enumerate(meta["symbols"]):
        if isinstance(s, bool) or not isinstance(s, (str, int)):
            f.fail(f"the header: key 'symbols' holds {s!r:.60} at index {i}, not a str or int")
        if s in seen:
            f.fail(f"the header: key 'symbols' holds {s!r:.60} twice (at {seen[s]} and {i})")
        seen[s] = i
    return meta


def _nest(items: list[Any], shape: tuple[int, ...]) -> Any:
    """A flat list as nested lists of ``shape`` (the single item for shape ``()``)."""
    if not shape:
        return items[0]
    if len(shape) == 1:
        return items
    step = math.prod(shape[1:])
    return [_nest(items[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]
