"""tritnum's .npz files: PackedTrits, TernaryTensor, plain arrays or dicts of them; no pickle."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from .._interop import to_host
from .._npz import Archive, check_max_bytes, field, reading, sizes
from ..packing import PackedTrits
from ..quantize import TernaryTensor, in_memory
from .arrays import PLAIN_DTYPES, bfloat16_to_float32, is_array, plain_array

__all__ = ["FILE_VERSION", "load_npz", "save_npz"]

#: Version 2 added plain arrays; files of version 1 are read as before.
FILE_VERSION = 2
_META = "__tritnum__"
# the most bytes of a zip member's name, and the longest member suffix tn.save adds
_MAX_MEMBER_NAME, _SUFFIX = 0xFFFF, "/scales.npy"
# the .npy dtypes of plain arrays, in either byte order (bool and bytes have none)
_ARRAY_DTYPES = {d.newbyteorder(order).str for d in PLAIN_DTYPES for order in "<>"}


def _arrays(name: str, obj: Any, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    if is_array(obj):
        a, bfloat16 = plain_array(obj, f"{name!r}")
        a = bfloat16_to_float32(a) if bfloat16 else a  # NumPy has no bfloat16: exact float32
        arrays[f"{name}/array"] = a
        meta[name] = {"dtype": a.dtype.str, "shape": list(a.shape)}
        return
    if isinstance(obj, TernaryTensor):
        obj = in_memory(obj)  # a lazy one: its trits and scales from one compute
    packed = obj.packed if isinstance(obj, TernaryTensor) else obj
    if not isinstance(packed, PackedTrits):
        raise TypeError(f"save takes arrays, PackedTrits, TernaryTensor or a dict of them; "
                        f"{name!r} is a {type(obj).__name__}")
    arrays[f"{name}/data"] = to_host(packed.data)
    entry: dict[str, Any] = {"shape": list(packed.shape), "format": packed.format}
    if isinstance(obj, TernaryTensor):
        arrays[f"{name}/scales"] = obj.scales
        entry["group_size"] = obj.group_size
    meta[name] = entry


def _check_length(name: str) -> None:
    """ValueError for a name a zip member cannot hold (before any file is created)."""
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError as exc:  # a lone surrogate
        raise ValueError(f"name {name!r:.80} is not valid Unicode: {exc.reason}") from None
    if size + len(_SUFFIX) > _MAX_MEMBER_NAME:
        raise ValueError(f"name {name!r:.40}... is {size} bytes in UTF-8: an .npz (zip) member "
                         f"name holds at most {_MAX_MEMBER_NAME - len(_SUFFIX)} with the "
                         f"{_SUFFIX!r} tn.save adds")


def save_npz(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` (see :func:`tritnum.save`) to an ``.npz`` file at ``path`` exactly."""
    single = not isinstance(obj, dict)
    items = {"": obj} if single else obj
    meta: dict[str, Any] = {}
    arrays: dict[str, np.ndarray] = {}
    for name, value in items.items():
        if not isinstance(name, str) or "/" in name or name == _META:
            raise ValueError(f"names must be strings without '/', got {name!r:.80}")
        _check_length(name)
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


def _is_array(entry: Any) -> bool:
    """Whether a header item is a plain array (it has a dtype) rather than trits."""
    return isinstance(entry, dict) and "dtype" in entry


def _check_names(files: Archive, items: dict[str, Any]) -> None:
    """Refuse an array the header does not name (a renamed one, or a foreign file)."""
    named = {_META} | {f"{name}/{part}" for name, entry in items.items()
                       for part in (("array",) if _is_array(entry) else ("data", "scales"))}
    extra = sorted(files.names() - named)
    if extra:
        files.fail(f"array {extra[0]!r} is not one its header names")


def _item_shape(files: Archive, entry: Any, where: str) -> tuple[int, ...]:
    shape = field(files, entry, "shape", list, where)
    if not sizes(shape):
        files.fail(f"{where}: key 'shape' is {shape!r:.60}, not a list of ints >= 0")
    return tuple(shape)


def _load_array(files: Archive, name: str, entry: Any, where: str) -> np.ndarray:
    dtype = field(files, entry, "dtype", str, where)
    if dtype not in _ARRAY_DTYPES:
        files.fail(f"{where}: key 'dtype' is {dtype!r:.60}, not a dtype of bool, integers or "
                   "float16/32/64")
    shape = _item_shape(files, entry, where)
    a = files.array(f"{name}/array")
    if a.dtype.str != dtype or a.shape != shape:
        files.fail(f"array {name + '/array'!r} is {a.dtype.str} of shape {a.shape}; {where} "
                   f"has dtype {dtype!r} and shape {list(shape)}")
    return a


def _load_item(files: Archive, name: str, entry: Any) -> Any:
    where = f"the header's item {name!r}"
    if _is_array(entry):
        return _load_array(files, name, entry, where)
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


def load_npz(path: str | os.PathLike[str], max_bytes: int) -> Any:
    """Read what :func:`save_npz` wrote (see :func:`tritnum.load`)."""
    max_bytes = check_max_bytes(max_bytes)
    with reading(path, "tritnum file"), Archive(path, "tritnum file", max_bytes) as files:
        header = _header(files)
        items = {name: _load_item(files, name, entry)
                 for name, entry in header["items"].items()}
    return items[""] if header["single"] else items
