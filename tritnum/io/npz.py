"""tritnum's own files: PackedTrits and TernaryTensor (or dicts of them) in a .npz, no pickle."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from .._npz import reading
from ..errors import FormatError
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


def _load_item(name: str, entry: dict[str, Any], files: Any) -> Any:
    packed = PackedTrits(files[f"{name}/data"], tuple(entry["shape"]), entry["format"])
    if f"{name}/scales" not in files.files:
        return packed
    return TernaryTensor(packed, files[f"{name}/scales"], entry["group_size"])


def load(path: str | os.PathLike[str]) -> Any:
    """Load what :func:`save` wrote: one object, or a dict of them.

    Raises
    ------
    FormatError
        Not a tritnum file, a newer format version, or a truncated or corrupt file.

    Examples
    --------
    >>> import os, tempfile, tritnum as tn
    >>> path = os.path.join(tempfile.mkdtemp(), "mask.npz")
    >>> tn.save(path, tn.pack([1, 0, -1], "bitplane"))
    >>> tn.load(path)
    PackedTrits(shape=(3,), format='bitplane', nbytes=16, device='cpu')
    >>> with open(path, "wb") as f:
    ...     _ = f.write(b"not a zip")
    >>> tn.load(path)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tritnum.errors.FormatError: '...mask.npz' is not a readable tritnum file: ...
    """
    with reading(path, "tritnum file"), np.load(path, allow_pickle=False) as files:
        header = json.loads(str(files[_META][()]))
        if header.get("version", 0) > FILE_VERSION:
            raise FormatError(
                f"{os.fspath(path)!r} is format version {header['version']}; this tritnum "
                f"reads up to version {FILE_VERSION}")
        items = {name: _load_item(name, entry, files) for name, entry in header["items"].items()}
    return items[""] if header["single"] else items
