"""A GGUF file's header checked against the file's size before the ``gguf`` package parses it.

``gguf.GGUFReader`` trusts every count, length and offset in a file: an array that
declares 2**40 items makes it loop past the end of the file, nested arrays recurse
without bound, and a tensor offset near 2**64 wraps around. :func:`check_header`
walks the header once (magic, version, counts, each key's value, each tensor's info),
checks each count, size and offset against the bytes that are there before anything
is allocated, bounds array nesting, and checks each tensor's data range lies inside the
file. It costs time in proportion to the header, not to the tensors' data.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Sequence
from typing import Any

from ...errors import FormatError
from ..arrays import numpy_shape_problem

__all__ = ["I2_S_TYPE", "MAX_NESTING", "check_buffer", "check_header", "check_written"]

I2_S_TYPE = 36  # bitnet.cpp's GGML type id of I2_S (n / 4 + 32 bytes)
MAX_NESTING = 8  # arrays of arrays: deeper is refused (llama.cpp reads none nested)
_MAGIC = b"GGUF"
_VERSIONS = (2, 3)
_STRING, _ARRAY, _UINT32 = 8, 9, 4
# value type -> (size in bytes, name) for the fixed-size scalar types
_SCALARS = {0: (1, "uint8"), 1: (1, "int8"), 2: (2, "uint16"), 3: (2, "int16"),
            4: (4, "uint32"), 5: (4, "int32"), 6: (4, "float32"), 7: (1, "bool"),
            10: (8, "uint64"), 11: (8, "int64"), 12: (8, "float64")}
_MIN_KV = 8 + 4 + 1  # empty key, value type, a one-byte value
_MIN_TENSOR_INFO = 8 + 4 + 4 + 8  # empty name, n_dims = 0, type, offset


class _Cursor:
    """Reads little- or big-endian integers from a buffer, never past its end."""

    def __init__(self, buf: Any, order: str) -> None:
        self.buf, self.pos, self.size = buf, 0, len(buf)
        self.u32s, self.u64s = struct.Struct(order + "I"), struct.Struct(order + "Q")
        self.order = order

    def need(self, n: int, what: str) -> None:
        left = self.size - self.pos
        if n > left:
            raise FormatError(f"{what} needs {n} bytes at offset {self.pos}, "
                              f"the file has {left} left")

    def u32(self, what: str) -> int:
        self.need(4, what)
        (value,) = self.u32s.unpack_from(self.buf, self.pos)
        self.pos += 4
        return int(value)

    def u64(self, what: str) -> int:
        self.need(8, what)
        (value,) = self.u64s.unpack_from(self.buf, self.pos)
        self.pos += 8
        return int(value)

    def skip(self, n: int, what: str) -> None:
        self.need(n, what)
        self.pos += n

    def string(self, what: str) -> bytes:
        n = self.u64(f"{what} (length)")
        self.need(n, f"{what} of {n} bytes")
        self.pos += n
        return bytes(self.buf[self.pos - n: self.pos])

    def u64s_array(self, n: int, what: str) -> tuple[int, ...]:
        self.need(8 * n, what)
        values = struct.unpack_from(f"{self.order}{n}Q", self.buf, self.pos)
        self.pos += 8 * n
        return values


def _byte_order(buf: Any) -> str:
    if len(buf) < 24:
        raise FormatError(f"the header needs 24 bytes, the file has {len(buf)}")
    if bytes(buf[:4]) != _MAGIC:
        raise FormatError(f"magic is {bytes(buf[:4])!r}, not {_MAGIC!r}: not a GGUF file")
    (version,) = struct.unpack_from("<I", buf, 4)
    order = ">" if version & 0xFFFF == 0 else "<"  # as gguf: a byte-swapped file
    (version,) = struct.unpack_from(order + "I", buf, 4)
    if version not in _VERSIONS:
        raise FormatError(f"version {version} is not one of {_VERSIONS}")
    return order


def _value(cur: _Cursor, vtype: int, what: str, depth: int) -> None:
    if vtype in _SCALARS:
        cur.skip(_SCALARS[vtype][0], f"{what}: a {_SCALARS[vtype][1]}")
    elif vtype == _STRING:
        cur.string(f"{what}: a string")
    elif vtype == _ARRAY:
        _array(cur, what, depth + 1)
    else:
        raise FormatError(f"{what}: unknown value type {vtype}")


def _array(cur: _Cursor, what: str, depth: int) -> None:
    if depth > MAX_NESTING:
        raise FormatError(f"{what}: arrays nested more than {MAX_NESTING} deep")
    itype = cur.u32(f"{what}: array item type")
    count = cur.u64(f"{what}: array length")
    if itype in _SCALARS:
        size, name = _SCALARS[itype]
        cur.skip(count * size, f"{what}: an array of {count} {name}")
        return
    if itype not in (_STRING, _ARRAY):
        raise FormatError(f"{what}: unknown array item type {itype}")
    cur.need(count * (8 if itype == _STRING else 12),
             f"{what}: an array of {count} {'strings' if itype == _STRING else 'arrays'}")
    for i in range(count):
        _value(cur, itype, f"{what}[{i}]", depth)


def _alignment(cur: _Cursor, vtype: int) -> int:
    if vtype != _UINT32:
        raise FormatError(f"key 'general.alignment': value type {vtype}, not uint32 ({_UINT32})")
    value = cur.u32("key 'general.alignment'")
    if value == 0 or value & (value - 1):
        raise FormatError(f"key 'general.alignment': {value} is not a power of two")
    return value


def _unique_name(cur: _Cursor, seen: set[bytes], label: str, i: int) -> tuple[bytes, str]:
    """Read the ``i``-th key or tensor name; return it and how messages name it."""
    raw = cur.string(f"{label} #{i}: the name")
    what = f"{label} {raw.decode('utf-8', 'replace')!r}"
    if raw in seen:
        raise FormatError(f"{what}: a duplicate {label} name")
    seen.add(raw)
    return raw, what


def _kvs(cur: _Cursor, n_kv: int) -> int:
    """Walk the key-value pairs; return the alignment they set (32 by default)."""
    cur.need(n_kv * _MIN_KV, f"kv_count {n_kv}: the key-value pairs")
    alignment, seen = 32, set()
    for i in range(n_kv):
        key, what = _unique_name(cur, seen, "key", i)
        vtype = cur.u32(f"{what}: the value type")
        if key == b"general.alignment":
            alignment = _alignment(cur, vtype)
        else:
            _value(cur, vtype, what, 0)
    return alignment


def _tensor_infos(cur: _Cursor, n_tensors: int) -> list[tuple[str, tuple[int, ...], int, int]]:
    cur.need(n_tensors * _MIN_TENSOR_INFO, f"tensor_count {n_tensors}: the tensor infos")
    infos, seen = [], set()
    for i in range(n_tensors):
        _, what = _unique_name(cur, seen, "tensor", i)
        n_dims = cur.u32(f"{what}: n_dims")
        dims = cur.u64s_array(n_dims, f"{what}: {n_dims} dimensions")
        kind = cur.u32(f"{what}: the GGML type")
        offset = cur.u64(f"{what}: the data offset")
        infos.append((what, dims, kind, offset))
    return infos


def _n_values(what: str, dims: tuple[int, ...], limit: int) -> int:
    """The product of ``dims``, refused once it passes ``limit`` (Python ints: no overflow)."""
    if 0 in dims:
        return 0
    n = 1
    for d in dims:
        n *= d
        if n > limit:
            raise FormatError(f"{what}: dimensions {list(dims[:8])} hold more values "
                              f"than the file has room for")
    return n


def _tensor_nbytes(what: str, dims: tuple[int, ...], kind: int, file_size: int) -> int:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    n = _n_values(what, dims, 8 * file_size + 1024)
    problem = numpy_shape_problem(dims)  # an empty one, or one of too many dimensions
    if problem:
        raise FormatError(f"{what}: dimensions {list(dims[:8])}: {problem}")
    if kind == I2_S_TYPE:
        return n // 4 + 32
    try:
        qtype = GGMLQuantizationType(kind)
        block, size = GGML_QUANT_SIZES[qtype]
    except (ValueError, KeyError):
        raise FormatError(f"{what}: unknown GGML type {kind}") from None
    if block > 1 and (not dims or dims[0] % block):
        raise FormatError(f"{what}: {qtype.name} needs a first dimension that is a "
                          f"multiple of {block}, got dimensions {list(dims[:8])}")
    return n * size // block


def _check_data(infos: list[tuple[str, tuple[int, ...], int, int]], data_start: int,
                file_size: int) -> None:
    for what, dims, kind, offset in infos:
        nbytes = _tensor_nbytes(what, dims, kind, file_size)
        start = data_start + offset
        if start + nbytes > file_size:
            raise FormatError(f"{what}: data at offset {offset} ({nbytes} bytes from byte "
                              f"{start}) runs past the end of the {file_size}-byte file")


def check_buffer(buf: Any) -> int:
    """Check a GGUF file's header in ``buf`` (bytes-like); return where its data starts.

    Parameters
    ----------
    buf : bytes-like
        The whole file (a ``bytes`` or an ``mmap``).

    Returns
    -------
    int
        The offset of the tensor data (after the header and its alignment padding).

    Raises
    ------
    FormatError
        A count, length, offset or size that the buffer cannot hold, arrays nested more
        than :data:`MAX_NESTING` deep, an unknown type, a duplicate key or tensor name;
        the message names the key or tensor.
    """
    infos, data_start = _walk(buf)
    _check_data(infos, data_start, len(buf))
    return data_start


def _walk(buf: Any) -> tuple[list[tuple[str, tuple[int, ...], int, int]], int]:
    """Check the header's structure in ``buf``; its tensor infos and where the data starts."""
    cur = _Cursor(buf, _byte_order(buf))
    cur.pos = 8
    n_tensors = cur.u64("tensor_count")
    n_kv = cur.u64("kv_count")
    alignment = _kvs(cur, n_kv)
    infos = _tensor_infos(cur, n_tensors)
    return infos, cur.pos + (-cur.pos % alignment)


def check_written(head: bytes, sizes: Sequence[int], file_size: int) -> None:
    """What a writer checks before it creates a file: that the reader will take it.

    The reader's checks (:func:`check_buffer`) on the header ``head`` of a file of
    ``file_size`` bytes, and that the ``sizes`` of the data each tensor will have
    (in header order) are the bytes its type and dimensions hold, as the reader
    computes them.

    Raises
    ------
    FormatError
        Whatever :func:`check_buffer` refuses, or a tensor whose data size does
        not match its type and dimensions (naming it).
    """
    infos, data_start = _walk(head)
    for (what, dims, kind, _), size in zip(infos, sizes, strict=True):
        nbytes = _tensor_nbytes(what, dims, kind, file_size)
        if nbytes != size:
            raise FormatError(f"{what}: {size} bytes of data, where its type and dimensions "
                              f"{list(dims[:8])} (GGUF order) hold {nbytes}")
    _check_data(infos, data_start, file_size)


def check_header(path: str | os.PathLike[str]) -> int:
    """Check the header of the GGUF file at ``path``; return where its data starts.

    Parameters
    ----------
    path : path-like
        The file; it is memory-mapped, and only its header is read.

    Returns
    -------
    int
        As :func:`check_buffer`.

    Raises
    ------
    FormatError
        As :func:`check_buffer`.
    OSError
        The file cannot be opened.

    Examples
    --------
    >>> import os, tempfile, numpy as np, tritnum as tn
    >>> from tritnum.io.gguf.header import check_header
    >>> path = os.path.join(tempfile.mkdtemp(), "x.gguf")
    >>> _ = tn.io.write_gguf(path, {"norm": np.ones(4, np.float32)})
    >>> check_header(path) % 32
    0
    >>> with open(path, "r+b") as f:
    ...     _ = f.truncate(140)
    >>> try:
    ...     check_header(path)
    ... except tn.FormatError as exc:
    ...     print(exc)
    tensor 'norm': data at offset 0 (16 bytes from byte 128) runs past the end of the 140-byte file
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < 24:
            return check_buffer(f.read())
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return check_buffer(buf)
