"""A safetensors file's header, checked against the file before any tensor is read.

The layout (the format of Hugging Face's ``safetensors`` package): 8 bytes, a
little-endian unsigned header length ``N``; ``N`` bytes of UTF-8 JSON, an object
that gives each tensor's ``dtype``, ``shape`` and ``data_offsets`` (``[begin, end)``
in the byte buffer) and, under ``__metadata__``, an optional object of strings;
then the byte buffer. :func:`check_buffer` trusts none of it: the header length
against the file's size, the JSON (UTF-8, an object, no duplicate key, nesting
bounded), every key's presence and type, every tensor's byte count against its
shape and dtype, and that the tensors tile the byte buffer without a hole or an
overlap, as the ``safetensors`` package requires. It reads the header only, and
allocates nothing in proportion to what the header declares.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from .._npz import field, sizes
from ..errors import FormatError
from .arrays import numpy_shape_problem

__all__ = ["DTYPES", "FILE", "MAX_HEADER", "Header", "TensorInfo", "check_buffer", "json_object"]

#: The largest header read, as the ``safetensors`` package's own limit (100 MB).
MAX_HEADER = 100_000_000
#: safetensors dtype -> the NumPy dtype of its bytes (BF16: the uint16 bits of bfloat16).
DTYPES = {"BOOL": np.dtype("?"), "U8": np.dtype("u1"), "I8": np.dtype("i1"),
          "U16": np.dtype("<u2"), "I16": np.dtype("<i2"), "F16": np.dtype("<f2"),
          "BF16": np.dtype("<u2"), "U32": np.dtype("<u4"), "I32": np.dtype("<i4"),
          "F32": np.dtype("<f4"), "U64": np.dtype("<u8"), "I64": np.dtype("<i8"),
          "F64": np.dtype("<f8")}
_ZIP = b"PK\x03\x04"


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of the header: its bytes are ``data_start + begin`` up to ``data_start + end``."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


@dataclass(frozen=True)
class Header:
    """A checked header: the tensors in the order of their data, the metadata, the data's start."""

    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]
    data_start: int


class _File:
    """The file being checked: :func:`~tritnum._npz.field` reports its problems here."""

    @staticmethod
    def fail(problem: str) -> NoReturn:
        """Raise the FormatError of the file, saying ``problem``."""
        raise FormatError(problem)


#: Raises the FormatError of a problem: ``FILE.fail("tensor 'w': ...")``.
FILE = _File()


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict; ValueError for a key given twice."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key!r:.60} is given twice")
        out[key] = value
    return out


def json_object(text: str, what: str) -> dict[str, Any]:
    """``text`` parsed as a JSON object (nesting bounded, no key twice), or FormatError."""
    try:
        value = json.loads(text, object_pairs_hook=_unique)
    except RecursionError:
        FILE.fail(f"{what} nests too deeply")
    except ValueError as exc:
        FILE.fail(f"{what} is not valid JSON: {exc}")
    if not isinstance(value, dict):
        FILE.fail(f"{what} is a JSON {type(value).__name__}, not an object")
    return value


def _nbytes(shape: list[int], itemsize: int, limit: int) -> int:
    """Bytes of ``shape``; any count past ``limit`` is returned as ``limit + 1`` (no huge ints)."""
    if 0 in shape:
        return 0
    n = itemsize
    for d in shape:
        n *= d
        if n > limit:
            return limit + 1
    return n


def _tensor(name: str, entry: Any, data_size: int) -> TensorInfo:
    where = f"tensor {name!r}"
    dtype = field(FILE, entry, "dtype", str, where)
    if dtype not in DTYPES:
        FILE.fail(f"{where}: dtype {dtype!r:.40} is not one tritnum reads ({', '.join(DTYPES)})")
    shape = field(FILE, entry, "shape", list, where)
    if not sizes(shape):
        FILE.fail(f"{where}: key 'shape' is {shape!r:.60}, not a list of ints >= 0")
    problem = numpy_shape_problem(shape)
    if problem:
        FILE.fail(f"{where}: shape {shape!s:.60}: {problem}")
    offsets = field(FILE, entry, "data_offsets", list, where)
    if len(offsets) != 2 or not sizes(offsets) or offsets[0] > offsets[1]:
        FILE.fail(f"{where}: key 'data_offsets' is {offsets!r:.60}, not [begin, end] with "
                  "0 <= begin <= end")
    begin, end = offsets
    if end > data_size:
        FILE.fail(f"{where}: data_offsets [{begin}, {end}] run past the end of the "
                  f"{data_size}-byte data buffer")
    nbytes = _nbytes(shape, DTYPES[dtype].itemsize, data_size)
    if nbytes != end - begin:
        size = f"{nbytes} bytes" if nbytes <= data_size else "more bytes than the file has"
        FILE.fail(f"{where}: shape {shape!s:.60} of {dtype} is {size}, its data_offsets "
                  f"[{begin}, {end}] hold {end - begin}")
    return TensorInfo(name, dtype, tuple(shape), begin, end)


def _tile(tensors: list[TensorInfo], data_size: int) -> None:
    """The tensors, in data order, cover the byte buffer exactly once."""
    at = 0
    for t in tensors:
        if t.begin != at:
            how = "overlap the tensor before them" if t.begin < at else f"leave byte {at} unused"
            FILE.fail(f"tensor {t.name!r}: data_offsets [{t.begin}, {t.end}] {how}")
        at = t.end
    if at != data_size:
        FILE.fail(f"the tensors hold {at} bytes of the {data_size}-byte data buffer: "
                  "its end is unused")


def _metadata(value: Any) -> dict[str, str]:
    if value is None:  # as the safetensors package: no metadata
        return {}
    if not isinstance(value, dict):
        FILE.fail(f"'__metadata__' is a JSON {type(value).__name__}, not an object")
    for key, text in value.items():
        if not isinstance(text, str):
            FILE.fail(f"'__metadata__': key {key!r:.60} is {text!r:.60}, not a string")
    return value


def check_buffer(buf: Any) -> Header:
    """Check the safetensors file in ``buf`` (bytes-like) and return its :class:`Header`.

    Raises
    ------
    FormatError
        A header length the file cannot hold, a header that is not a JSON object of
        the expected keys and types, a dtype tritnum does not read, a tensor whose
        bytes do not match its shape, lie outside the byte buffer, overlap another's
        or leave bytes unused. The message names the tensor or key.

    Examples
    --------
    >>> import json, struct
    >>> header = json.dumps({"b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})
    >>> data = struct.pack("<Q", len(header)) + header.encode() + bytes(8)
    >>> check_buffer(data).tensors["b"]
    TensorInfo(name='b', dtype='F32', shape=(2,), begin=0, end=8)
    >>> check_buffer(data[:-1])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    tritnum.errors.FormatError: tensor 'b': data_offsets [0, 8] run past the end of the 7-byte ...
    """
    size = len(buf)
    if size < 8:
        FILE.fail(f"it has {size} bytes, fewer than the 8 of the header length")
    (n,) = struct.unpack_from("<Q", buf, 0)
    if n > min(MAX_HEADER, size - 8):
        if bytes(buf[:4]) == _ZIP:  # its length would be "PK\3\4" and a zip version
            FILE.fail("it is a zip archive (an .npz file?), not safetensors")
        FILE.fail(f"its header length {n} is more than "
                  + (f"{MAX_HEADER} bytes" if n > MAX_HEADER else f"the {size - 8} bytes after it"))
    try:
        text = bytes(buf[8:8 + n]).decode("utf-8")
    except UnicodeDecodeError as exc:
        FILE.fail(f"the header is not UTF-8: {exc}")
    header = json_object(text, "the header")
    metadata = _metadata(header.pop("__metadata__", None))
    data_size = size - 8 - n
    tensors = sorted((_tensor(name, entry, data_size) for name, entry in header.items()),
                     key=lambda t: (t.begin, t.end))
    _tile(tensors, data_size)
    return Header({t.name: t for t in tensors}, metadata, 8 + n)
