"""tritnum's own files: PackedTrits and TernaryTensor (or dicts of them) in a .npz, no pickle."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from .._npz import MAX_BYTES, Archive, check_max_bytes, field, reading
from ..packing import PackedTrits
from ..quantize import TernaryTensor

__all__ = ["FILE_VERSION", "load", "save"]

FILE_VERSION = 1
_META = "__tritnum__"


def _arrays(name: str, obj: Any, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    packed = obj.packed if isinstance(obj, TernaryTensor) else obj
    if not isinstance(packed, PackedTrits):
        raise TypeError(f"save takes PackedTrits, TernaryTensor or a dict of them; "
                        f"{name!r} is a {type(obj).__name__}")
    from .._interop import to_host

    arrays[f"{name}/data"] = to_host(packed.data)
    entry: dict[str, Any] = {"shape": list(packed.shape), "format": packed.format}
    if isinstance(obj, TernaryTensor):
        arrays[f"{name}/scales"] = obj.scales
        entry["group_size"] = obj.group_size
    meta[name] = entry


def save(path: str | os.PathLike[str], obj: Any) -> None:
    """Save a PackedTrits, a TernaryTensor, or a dict of them to an ``.npz`` file.

    The file holds plain arrays and a JSON header with a format version; nothing is
    pickled. It is written at ``path`` exactly (unlike ``np.savez``, no ``.npz`` is
    appended), so that ``load(path)`` reads it back.

    Examples
    --------
    >>> import os, tempfile, numpy as np, tritnum as tn
    >>> path = os.path.join(tempfile.mkdtemp(), "layer.npz")
    >>> t = tn.quantize(np.arange(-4.0, 4.0).reshape(2, 4), axis=-1, format="base3")
    >>> tn.save(path, {"w": t, "mask": tn.pack([1, 0, -1])})
    >>> back = tn.load(path)
    >>> back["w"].packed == t.packed, back["mask"].unpack()
    (True, array([ 1,  0, -1], dtype=int8))
    """
    single = not isinstance(obj, dict)
    items = {"": obj} if single else obj
    meta: dict[str, Any] = {}
    arrays: dict[str, np.ndarray] = {}
    for name, value in items.items():
        if not isinstance(name, str) or "/" in name or name == _META:
            raise ValueError(f"names must be strings without '/', got {name!r}")
        _arrays(name, value, meta, arrays)
    header = {"version": FILE_VERSION, "single": single, "items": meta}
    with open(path, "wb") as f:
        np.savez(f, **{_META: np.array(json.dumps(header))}, **arrays)


def _header(files: Archive) -> dict[str, Any]:
    """The JSON header, its version, ``single`` and ``items`` keys checked."""
    text = files.array(_META)
    if text.shape != () or text.dtype.kind != "U":
        files.fail(f"array {_META!r} is {text.dtype} of shape {text.shape}, not a string")
    header = files.parse_json(_META, str(text[()]))
    version = field(files, header, "version", int)
    if version > FILE_VERSION:
        files.fail(f"it is format version {version}; this tritnum reads up to version "
                   f"{FILE_VERSION}")
    items = field(files, header, "items", dict)
    if field(files, header, "single", bool) and "" not in items:
        files.fail("the header says 'single' but its 'items' has no key ''")
    _check_names(files, items)
    return header


def _check_names(files: Archive, items: dict[str, Any]) -> None:
    """Refuse an array the header does not name (a renamed one, or a foreign file)."""
    named = {_META} | {f"{name}/{part}" for name in items for part in ("data", "scales")}
    extra = sorted(files.names() - named)
    if extra:
        files.fail(f"array {extra[0]!r} is not one its header names")


def _item_shape(files: Archive, entry: Any, where: str) -> tuple[int, ...]:
    shape = field(files, entry, "shape", list, where)
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
        files.fail(f"{where}: key 'shape' is {shape!r:.60}, not a list of ints >= 0")
    return tuple(shape)


def _load_item(files: Archive, name: str, entry: Any) -> Any:
    where = f"the header's item {name!r}"
    shape = _item_shape(files, entry, where)
    fmt = field(files, entry, "format", str, where)
    # a TernaryTensor has both (a renamed scales array must not make it a PackedTrits)
    scaled = f"{name}/scales" in files.names() or "group_size" in entry
    group_size = field(files, entry, "group_size", (int, type(None)), where) if scaled else None
    data = files.array(f"{name}/data")
    scales = files.array(f"{name}/scales") if scaled else None
    try:
        packed = PackedTrits(data, shape, fmt, copy=False)  # fresh from the file
        return packed if scales is None else TernaryTensor(packed, scales, group_size, copy=False)
    except (ValueError, TypeError) as exc:
        files.fail(f"item {name!r} does not fit its arrays: {exc}")


def load(path: str | os.PathLike[str], *, max_bytes: int = MAX_BYTES) -> Any:
    """Load what :func:`save` wrote: one object, or a dict of them.

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    max_bytes : int, optional
        The most bytes the file's arrays may declare in all, uncompressed (default
        ``MAX_BYTES``, 16 GiB). A larger file is refused before anything is read: pass a
        larger ``max_bytes`` to load it. Whatever the limit, a compressed member may not
        expand more than 100 times (``tn.save`` writes uncompressed files).

    Raises
    ------
    FormatError
        Not a tritnum file, a newer format version, a truncated, corrupt or hostile file
        (a missing or ill-typed header key, an array larger than ``max_bytes`` or than its
        member, a zip bomb), naming the array or header key at fault.

    Examples
    --------
    >>> import os, tempfile, tritnum as tn
    >>> path = os.path.join(tempfile.mkdtemp(), "mask.npz")
    >>> tn.save(path, tn.pack([1, 0, -1], "bitplane"))
    >>> tn.load(path)
    PackedTrits(shape=(3,), format='bitplane', nbytes=16, device='cpu')
    >>> tn.load(path, max_bytes=100)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tritnum.errors.FormatError: '...mask.npz' is not a readable tritnum file: ... max_bytes=100 ...
    >>> with open(path, "wb") as f:
    ...     _ = f.write(b"not a zip")
    >>> tn.load(path)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tritnum.errors.FormatError: '...mask.npz' is not a readable tritnum file: ...
    """
    max_bytes = check_max_bytes(max_bytes)
    with reading(path, "tritnum file"), Archive(path, "tritnum file", max_bytes) as files:
        header = _header(files)
        items = {name: _load_item(files, name, entry)
                 for name, entry in header["items"].items()}
    return items[""] if header["single"] else items
