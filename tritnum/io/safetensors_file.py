"""safetensors files (Hugging Face and PyTorch checkpoints): plain and ternary tensors.

A ternary tensor ``NAME`` is stored as plain tensors that any safetensors reader
loads (docs/formats.md):

- ``NAME.tritnum.packed``: the packed buffer as :attr:`PackedTrits.data` holds it,
  ``U8`` of shape ``(..., nbytes)`` for "2bit" and "base3", ``U64`` of shape
  ``(..., 2, nwords)`` for "bitplane";
- ``NAME.tritnum.scales``: the ``F32`` scales as :attr:`TernaryTensor.scales` holds
  them (a TernaryTensor only);
- the header's metadata ``NAME.tritnum``: JSON ``{"shape": [...], "format": "2bit",
  "group_size": 256}`` (``group_size`` for a TernaryTensor only, ``null`` for one
  scale per tensor), and ``tritnum.format_version``: ``"1"``.

Writing goes through the ``safetensors`` package (the ``safetensors`` extra).
Reading needs no package: the file is memory-mapped and checked first
(:mod:`tritnum.io.safetensors_header`), then each tritnum entry, and the trits.
"""

from __future__ import annotations

import json
import mmap
import os
from collections.abc import Callable, Mapping
from typing import Any, Literal

import numpy as np

from .._dispatch import resolve_device
from .._npz import check_max_bytes, field, reading, sizes, unreadable
from .._validate import choice
from ..errors import FormatError, InvalidTritsError, ShapeMismatchError
from ..packing import PackedTrits, ensure_valid
from ..quantize import TernaryTensor
from .arrays import bfloat16_to_float32, float32_to_bfloat16, is_array, plain_array
from .safetensors_header import (
    DTYPES,
    FILE,
    Header,
    TensorInfo,
    check_buffer,
    json_object,
)
from .suffixes import check_writer_suffix

__all__ = ["FORMAT_VERSION", "SafetensorsFile", "read_safetensors", "write_safetensors"]

#: The version of the naming scheme, in the metadata key ``tritnum.format_version``.
FORMAT_VERSION = 1
VERSION_KEY = "tritnum.format_version"
PACKED, SCALES, ENTRY = ".tritnum.packed", ".tritnum.scales", ".tritnum"
_WHAT = "safetensors file"
_FLOATS = ("F64", "F32", "F16", "BF16")
_CODES = {dtype: code for code, dtype in DTYPES.items() if code != "BF16"}


class SafetensorsFile(dict[str, Any]):
    """What :func:`~tritnum.io.read_safetensors` returns: a dict of the tensors, in file order.

    Values are NumPy arrays, :class:`~tritnum.TernaryTensor` and
    :class:`~tritnum.PackedTrits`. ``metadata`` and ``dtypes`` are kept as
    attributes of the same names (plain dicts).

    Parameters
    ----------
    tensors : mapping or iterable of (str, value) pairs, optional
        The tensors, by name, as for ``dict``.
    metadata : mapping of str to str, optional
        The header's ``__metadata__`` without tritnum's own keys.
    dtypes : mapping of str to str, optional
        The safetensors dtype each plain tensor is stored as (``"BF16"`` for those
        read as float32), which :func:`~tritnum.io.write_safetensors` takes back to
        write them the same way.
    """

    def __init__(self, tensors: Any = (), *, metadata: Mapping[str, str] | None = None,
                 dtypes: Mapping[str, str] | None = None) -> None:
        super().__init__(tensors)
        self.metadata: dict[str, str] = dict(metadata or {})
        self.dtypes: dict[str, str] = dict(dtypes or {})

    def __repr__(self) -> str:
        return f"SafetensorsFile({dict.__repr__(self)}, metadata={self.metadata!r})"


def _package() -> Any:
    try:
        import safetensors
    except ImportError:
        from .._extras import missing

        raise ImportError(missing("Writing safetensors files", "safetensors")) from None
    return safetensors


def _user_metadata(metadata: Any) -> dict[str, str]:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise TypeError(f"metadata must be a mapping of str to str, got {type(metadata).__name__}")
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"metadata must map str to str, got {key!r:.60}: {value!r:.60}")
        if key == VERSION_KEY or key.endswith(ENTRY):
            raise ValueError(f"metadata key {key!r} is tritnum's own (tritnum.format_version "
                             "and NAME.tritnum describe ternary tensors)")
    return dict(metadata)


def _stored_dtypes(dtypes: Any) -> dict[str, str]:
    if dtypes is None:
        return {}
    if not isinstance(dtypes, Mapping):
        raise TypeError(f"dtypes must be a mapping of tensor names to safetensors dtypes, "
                        f"got {type(dtypes).__name__}")
    return {name: choice(code, f"dtypes[{name!r}]", DTYPES) for name, code in dtypes.items()}


def _as_stored(name: str, a: np.ndarray, bfloat16: bool,
               code: str | None) -> tuple[np.ndarray, str]:
    """``a`` as the dtype ``code`` asks for (its own by default) and that dtype's NumPy name.

    A float array is stored as another float dtype only where every value is exact there.
    """
    own = "BF16" if bfloat16 else _CODES[a.dtype]
    if code == "BF16" and own == "U16":  # bfloat16 bits, as tritnum holds them
        return a, "bfloat16"
    if code is None or code == own:
        return a, "bfloat16" if bfloat16 else a.dtype.name
    if own not in _FLOATS or code not in _FLOATS:
        raise TypeError(f"dtypes[{name!r}] is {code!r}, but tensor {name!r} is {own}: only a "
                        f"float tensor is stored as another float dtype ({', '.join(_FLOATS)})")
    values = bfloat16_to_float32(a) if bfloat16 else a
    with np.errstate(over="ignore", invalid="ignore"):
        if code == "BF16":
            out = float32_to_bfloat16(values.astype(np.float32))
            back = bfloat16_to_float32(out)
        else:
            out = back = values.astype(DTYPES[code])
    lost = np.count_nonzero((back != values) & ~(np.isnan(back) & np.isnan(values)))
    if lost:
        raise FormatError(f"tensor {name!r}: {lost} of its {a.size} values are not exact in "
                          f"{code}; round them to {code} first to store them so")
    return out, "bfloat16" if code == "BF16" else out.dtype.name


def _ternary_parts(name: str, value: PackedTrits | TernaryTensor,
                   buffers: dict[str, tuple[np.ndarray, str]]) -> dict[str, Any]:
    """Put the packed buffer (and scales) of ``value`` in ``buffers``; return its entry."""
    packed = value.packed if isinstance(value, TernaryTensor) else value
    data, _ = plain_array(packed.data, f"tensor {name!r}")
    buffers[name + PACKED] = (data, data.dtype.name)
    entry: dict[str, Any] = {"shape": list(packed.shape), "format": packed.format}
    if isinstance(value, TernaryTensor):
        scales, _ = plain_array(value.scales, f"tensor {name!r}")
        buffers[name + SCALES] = (scales, "float32")
        entry["group_size"] = value.group_size
    return entry


def write_safetensors(path: str | os.PathLike[str], tensors: Mapping[str, Any],
                      metadata: Mapping[str, str] | None = None, *,
                      dtypes: Mapping[str, str] | None = None) -> None:
    """Write arrays and ternary tensors to a safetensors file.

    Plain arrays (NumPy, PyTorch, GPU) keep their dtype and bits, bfloat16 tensors
    included. :class:`~tritnum.TernaryTensor` and :class:`~tritnum.PackedTrits`
    values become ``NAME.tritnum.packed`` (and ``NAME.tritnum.scales``) tensors
    with a ``NAME.tritnum`` metadata entry (see docs/formats.md), which any
    safetensors reader loads as plain tensors.

    Parameters
    ----------
    path : path-like
        The file, written at this path exactly; an ``.npz`` or ``.gguf`` extension is
        refused (any other name is written). It is written beside, then renamed over:
        the file that ``tensors`` were read from can be overwritten.
    tensors : mapping of str to array, TernaryTensor or PackedTrits
        Arrays of bool, (unsigned) integers of 8-64 bits, float16/32/64, or bfloat16
        tensors. Names ending in ``.tritnum.packed`` or ``.tritnum.scales`` are
        tritnum's own.
    metadata : mapping of str to str, optional
        The header's ``__metadata__`` (``transformers`` wants ``{"format": "pt"}``);
        the keys ``tritnum.format_version`` and ``NAME.tritnum`` are tritnum's own.
    dtypes : mapping of str to str, optional
        The safetensors dtype to store a plain float tensor as (``"F64"``, ``"F32"``,
        ``"F16"``, ``"BF16"``) where it is not its own; every value must be exact
        there; a uint16 array given ``"BF16"`` holds bfloat16 bits, stored as they
        are. The ``dtypes`` of a :class:`SafetensorsFile` give a file's back; names
        that are not plain arrays in ``tensors`` are ignored.

    Raises
    ------
    TypeError
        A value that is not an array, TernaryTensor or PackedTrits, an array of
        another dtype, metadata that is not str to str.
    ValueError
        A name or metadata key of tritnum's own, an unknown dtype in ``dtypes``.
    FormatError
        A path with another format's extension; a value not exact in the dtype
        ``dtypes`` asks for.
    ImportError
        The ``safetensors`` package is missing.
    OSError
        The file cannot be written.

    Examples
    --------
    >>> import os, tempfile, numpy as np, tritnum as tn
    >>> from safetensors.numpy import load_file
    >>> path = os.path.join(tempfile.mkdtemp(), "model.safetensors")
    >>> w = tn.quantize(np.arange(-4.0, 4.0).reshape(2, 4), axis=-1)
    >>> tn.io.write_safetensors(path, {"w": w, "norm": np.ones(4, np.float32)},
    ...                         metadata={"format": "pt"})
    >>> plain = load_file(path)  # any safetensors reader
    >>> {name: (a.dtype.name, a.shape) for name, a in sorted(plain.items())}
    {'norm': ('float32', (4,)), 'w.tritnum.packed': ('uint8', (2, 1)), \
'w.tritnum.scales': ('float32', (2, 1))}
    """
    check_writer_suffix(path, "write_safetensors", "safetensors")
    safetensors = _package()
    if not isinstance(tensors, Mapping):
        raise TypeError(f"write_safetensors takes a mapping of names to arrays and ternary "
                        f"tensors, got {type(tensors).__name__}")
    meta = _user_metadata(metadata)
    stored = _stored_dtypes(dtypes)
    buffers: dict[str, tuple[np.ndarray, str]] = {}
    ternary = False
    for name, value in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"tensor names must be str, got {name!r}")
        if name == "__metadata__" or name.endswith((PACKED, SCALES)):
            raise ValueError(f"tensor name {name!r} is tritnum's own or safetensors'")
        if isinstance(value, (PackedTrits, TernaryTensor)):
            meta[name + ENTRY] = json.dumps(_ternary_parts(name, value, buffers))
            ternary = True
        elif is_array(value):
            a, bfloat16 = plain_array(value, f"tensor {name!r}")
            buffers[name] = _as_stored(name, a, bfloat16, stored.get(name))
        else:
            raise TypeError(f"tensor {name!r} is a {type(value).__name__}; write_safetensors "
                            "takes arrays, TernaryTensor and PackedTrits")
    if ternary:
        meta[VERSION_KEY] = str(FORMAT_VERSION)
    specs = {name: safetensors.TensorSpec(dtype=kind, shape=list(a.shape),
                                          data_ptr=a.ctypes.data, data_len=a.nbytes)
             for name, (a, kind) in buffers.items()}
    try:  # safetensors >= 0.8 writes beside the file, then renames: a mapped file stays whole
        safetensors.serialize_file(specs, os.fspath(path), metadata=meta or None)
    except safetensors.SafetensorError as exc:
        raise OSError(f"cannot write {os.fspath(path)!r}: {exc}") from exc


def _entries(header: Header) -> dict[str, dict[str, Any]]:
    """The ternary entries: ``NAME`` -> its checked metadata JSON, each with its tensors."""
    meta, tensors = header.metadata, header.tensors
    bases = {key[:-len(ENTRY)]: key for key in meta if key.endswith(ENTRY)}
    parts = [name for name in tensors if name.endswith((PACKED, SCALES))]
    if not bases and not parts:
        return {}
    version = meta.get(VERSION_KEY)
    if version is None:
        FILE.fail(f"it has tritnum's tensors or metadata but no metadata key {VERSION_KEY!r}")
    if not (version.isascii() and version.isdecimal() and 0 < len(version) < 10
            and int(version) >= 1):
        FILE.fail(f"metadata key {VERSION_KEY!r} is {version!r:.60}, not a version number")
    if int(version) > FORMAT_VERSION:
        FILE.fail(f"it is tritnum format version {version}; this tritnum reads up to version "
                  f"{FORMAT_VERSION}")
    for name in parts:
        base = name.rsplit(".tritnum.", 1)[0]
        if base not in bases:
            FILE.fail(f"tensor {name!r} has no metadata key {base + ENTRY!r}")
    return {base: _entry(base, key, meta[key], tensors) for base, key in bases.items()}


def _entry(base: str, key: str, text: str, tensors: dict[str, TensorInfo]) -> dict[str, Any]:
    where = f"metadata key {key!r}"
    entry = json_object(text, where)
    shape = field(FILE, entry, "shape", list, where)
    if not sizes(shape):
        FILE.fail(f"{where}: key 'shape' is {shape!r:.60}, not a list of ints >= 0")
    field(FILE, entry, "format", str, where)
    if base + PACKED not in tensors:
        FILE.fail(f"{where}: its tensor {base + PACKED!r} is missing")
    if "group_size" in entry:
        field(FILE, entry, "group_size", (int, type(None)), where)
        if base + SCALES not in tensors:
            FILE.fail(f"{where}: its tensor {base + SCALES!r} is missing")
    elif base + SCALES in tensors:
        FILE.fail(f"{where} has no key 'group_size' for its tensor {base + SCALES!r}")
    if base in tensors:
        FILE.fail(f"tensor {base!r} has the name of the ternary tensor of {where}")
    return entry


def _ternary(base: str, entry: dict[str, Any], view: Callable[[str], np.ndarray]) -> Any:
    """The PackedTrits or TernaryTensor of ``entry``, its trits checked."""
    try:
        packed = PackedTrits(view(base + PACKED), tuple(entry["shape"]), entry["format"],
                             copy=False)  # a read-only view of the mapping
        ensure_valid(packed, resolve_device("auto", packed.data))
        if "group_size" not in entry:
            return packed
        return TernaryTensor(packed, view(base + SCALES), entry["group_size"], copy=False)
    except (FormatError, InvalidTritsError, ShapeMismatchError, TypeError) as exc:
        FILE.fail(f"ternary tensor {base!r}: {exc}")


def _plain(info: TensorInfo, a: np.ndarray, bfloat16_bits: bool) -> np.ndarray:
    if info.dtype == "BF16" and not bfloat16_bits:
        return bfloat16_to_float32(a)
    if info.dtype == "BOOL" and a.view(np.uint8).max(initial=0) > 1:
        FILE.fail(f"tensor {info.name!r}: a BOOL byte is {a.view(np.uint8).max()}, not 0 or 1")
    return a


def _tensors(buf: Any, header: Header, bfloat16_bits: bool) -> SafetensorsFile:
    entries = _entries(header)
    whole = np.frombuffer(buf, np.uint8)

    def view(name: str) -> np.ndarray:
        info = header.tensors[name]
        raw = whole[header.data_start + info.begin: header.data_start + info.end]
        return raw.view(DTYPES[info.dtype]).reshape(info.shape)

    user = {k: v for k, v in header.metadata.items() if k != VERSION_KEY and not k.endswith(ENTRY)}
    out = SafetensorsFile(metadata=user)
    for name, info in header.tensors.items():  # in the order of their data
        if name.endswith(PACKED):
            base = name[:-len(PACKED)]
            out[base] = _ternary(base, entries[base], view)
        elif not name.endswith(SCALES):
            out[name] = _plain(info, view(name), bfloat16_bits)
            out.dtypes[name] = info.dtype
    return out


def _map(path: str | os.PathLike[str]) -> Any:
    """The file's bytes, memory-mapped read-only (OSError if it cannot be opened)."""
    with reading(path, _WHAT), open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def read_safetensors(path: str | os.PathLike[str], *, max_bytes: int | None = None,
                     bfloat16: Literal["float32", "bits"] = "float32") -> SafetensorsFile:
    """Read a safetensors file: plain tensors as arrays, tritnum's as TernaryTensor.

    The file is memory-mapped and its header checked against it before a tensor is
    read. Plain tensors come back as read-only NumPy views of the mapping, in their
    stored dtype, except ``BF16`` (NumPy has no bfloat16): as float32, exactly, a
    copy. Tensors stored by :func:`write_safetensors` as ``NAME.tritnum.packed`` /
    ``.scales`` come back as one :class:`~tritnum.TernaryTensor` (or
    :class:`~tritnum.PackedTrits`) ``NAME``, its trits checked. Reading needs no
    ``safetensors`` package.

    Parameters
    ----------
    path : path-like
        The file.
    max_bytes : int, optional
        The most bytes the tensors may hold in all; by default no limit (nothing is
        read into memory but bfloat16 tensors, as float32).
    bfloat16 : {"float32", "bits"}
        ``BF16`` tensors as float32 copies (the default), or as read-only views of
        their uint16 bits (nothing copied; :func:`write_safetensors` writes them back
        as ``BF16`` with the file's ``dtypes``).

    Returns
    -------
    SafetensorsFile
        A dict of the tensors in the order of their data, with ``metadata`` (the
        header's ``__metadata__`` without tritnum's keys) and ``dtypes``.

    Raises
    ------
    FormatError
        A file that is truncated, corrupt or hostile: a header length the
        file cannot hold, a header that is not a JSON object of the expected keys and
        types, a dtype without a NumPy equivalent (F8, F4, C64), tensors whose bytes
        do not tile the data, a BOOL byte that is not 0 or 1, a tritnum entry that is
        missing a tensor or key, a newer format version, trits that are not valid,
        more than ``max_bytes``. The message names the tensor or key.
    OSError
        The file cannot be opened: ``FileNotFoundError``, ``PermissionError``,
        ``IsADirectoryError``, raised unchanged (not a FormatError).

    Examples
    --------
    >>> import os, tempfile, numpy as np, tritnum as tn
    >>> from safetensors.numpy import save_file
    >>> path = os.path.join(tempfile.mkdtemp(), "plain.safetensors")
    >>> save_file({"bias": np.arange(3, dtype=np.float16)}, path, metadata={"format": "pt"})
    >>> f = tn.io.read_safetensors(path)
    >>> f
    SafetensorsFile({'bias': array([0., 1., 2.], dtype=float16)}, metadata={'format': 'pt'})
    >>> w = tn.quantize(np.arange(-4.0, 4.0).reshape(2, 4), axis=-1)
    >>> tn.io.write_safetensors(path, {"w": w, **f}, f.metadata, dtypes=f.dtypes)
    >>> back = tn.io.read_safetensors(path)
    >>> back["w"].packed == w.packed, back["w"].group_size, back["bias"].dtype
    (True, 4, dtype('float16'))
    """
    limit = None if max_bytes is None else check_max_bytes(max_bytes)
    buf = _map(path)
    try:
        header = check_buffer(buf)
        data_bytes = len(buf) - header.data_start
        if limit is not None and data_bytes > limit:
            FILE.fail(f"its tensors hold {data_bytes} bytes, more than max_bytes={limit} "
                      "(pass a larger max_bytes to read it)")
        return _tensors(buf, header, choice(bfloat16, "bfloat16", ("float32", "bits")) == "bits")
    except FormatError as exc:
        problem = str(exc)
    unreadable(path, _WHAT, problem)
