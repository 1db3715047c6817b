"""The GGUF container: GGML tensor types, the header's structure, and a streaming writer.

Reading parses a header that :func:`~.header.check_buffer` has passed (so every
count and offset in it fits the file): the key-value pairs with their types
(:mod:`.values`), then each tensor's name, dimensions, type and offset.
Writing lays a file out as the ``gguf`` package and llama.cpp do (GGUF v3,
little-endian): header, key-value pairs, tensor infos, padding to the alignment,
then each tensor's bytes padded to the alignment, offsets counted from the start of
the data. Tensors are streamed one by one (each a sequence of byte chunks), into a
temporary file that replaces the destination only once it is complete.
"""

from __future__ import annotations

import contextlib
import functools
import math
import mmap
import os
import struct
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import FormatError
from .header import I2_S_TYPE, check_buffer, check_written
from .values import GGUFValue, pack_kvs, read_kvs

__all__ = ["ALIGNMENT_KEY", "DEFAULT_ALIGNMENT", "PLAIN_CODES", "Entry", "FileSlice", "Header",
           "TensorInfo", "drop_pages", "ggml_type_id", "ggml_type_name", "map_file",
           "parse_header", "plain_view", "tensor_nbytes", "write_file"]

DEFAULT_ALIGNMENT = 32
ALIGNMENT_KEY = "general.alignment"
_VERSION = 3


# GGML types of plain numbers, one per element: their NumPy type codes (BF16: its bits). In a
# big-endian file each element is big-endian (as gguf's gguf_convert_endian.py swaps them);
# block types hold float16/float32 fields inside their blocks, swapped per type.
PLAIN_CODES = {"F32": "f4", "F16": "f2", "F64": "f8", "BF16": "u2", "I8": "i1", "I16": "i2",
               "I32": "i4", "I64": "i8"}


def plain_view(data: np.ndarray, type_name: str, order: str) -> np.ndarray:
    """A plain tensor's bytes (uint8) as its elements, in the file's byte ``order``."""
    return data.view(np.dtype(order + PLAIN_CODES[type_name]))


@functools.cache
def _quant_sizes() -> dict[int, tuple[str, int, int]]:
    """GGML type id -> (name, values per block, bytes per block), I2_S's included."""
    from gguf.constants import GGML_QUANT_SIZES

    sizes = {int(t): (t.name, block, size) for t, (block, size) in GGML_QUANT_SIZES.items()}
    sizes[I2_S_TYPE] = ("I2_S", 1, 1)  # n / 4 + 32 bytes in all: see tensor_nbytes
    return sizes


def ggml_type_name(type_id: int) -> str:
    """The name of a GGML tensor type id (``0`` -> ``"F32"``, 36 -> ``"I2_S"``)."""
    try:
        return _quant_sizes()[type_id][0]
    except KeyError:
        raise FormatError(f"unknown GGML type {type_id}") from None


def ggml_type_id(name: str) -> int:
    """The id of a GGML tensor type name (``"TQ2_0"`` -> 35)."""
    for type_id, (known, _, _) in _quant_sizes().items():
        if known == name:
            return type_id
    raise FormatError(f"unknown GGML type {name!r}")


def tensor_nbytes(shape: tuple[int, ...], type_id: int) -> int:
    """Bytes of a tensor of NumPy ``shape`` stored as GGML type ``type_id``."""
    n = math.prod(shape)
    if type_id == I2_S_TYPE:
        return n // 4 + 32
    _, block, size = _quant_sizes()[type_id]
    return n * size // block


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a GGUF file: name, NumPy-order shape, GGML type id, data range."""

    name: str
    shape: tuple[int, ...]
    type_id: int
    start: int  # byte offset in the file
    nbytes: int

    @property
    def type_name(self) -> str:
        """The GGML type's name."""
        return ggml_type_name(self.type_id)


@dataclass(frozen=True)
class Header:
    """A parsed GGUF header: metadata, tensors in file order, alignment, byte order."""

    metadata: dict[str, GGUFValue]
    tensors: list[TensorInfo]
    alignment: int
    order: str  # "<" little-endian, ">" a byte-swapped file
    data_start: int


def parse_header(buf: Any) -> Header:
    """Check the GGUF file in ``buf`` (bytes or an mmap) and parse its header.

    Raises
    ------
    FormatError
        Whatever :func:`~.header.check_buffer` refuses.
    """
    data_start = check_buffer(buf)
    (version,) = struct.unpack_from("<I", buf, 4)
    order = ">" if version & 0xFFFF == 0 else "<"
    n_tensors, n_kv = struct.unpack_from(order + "QQ", buf, 8)
    metadata, pos = read_kvs(buf, order, 24, n_kv)
    alignment = metadata[ALIGNMENT_KEY].value if ALIGNMENT_KEY in metadata \
        else DEFAULT_ALIGNMENT
    tensors = []
    for _ in range(n_tensors):
        (length,) = struct.unpack_from(order + "Q", buf, pos)
        name = bytes(buf[pos + 8: pos + 8 + length]).decode("utf-8", "surrogateescape")
        pos += 8 + length
        (n_dims,) = struct.unpack_from(order + "I", buf, pos)
        dims = struct.unpack_from(f"{order}{n_dims}Q", buf, pos + 4)
        type_id, offset = struct.unpack_from(order + "IQ", buf, pos + 4 + 8 * n_dims)
        pos += 4 + 8 * n_dims + 12
        shape = tuple(int(d) for d in reversed(dims))
        tensors.append(TensorInfo(name, shape, type_id, data_start + offset,
                                  tensor_nbytes(shape, type_id)))
    return Header(metadata, tensors, alignment, order, data_start)


def map_file(path: str | os.PathLike[str]) -> tuple[np.ndarray, Header]:
    """The file at ``path`` memory-mapped read-only as uint8, and its checked header.

    Raises
    ------
    FormatError
        A file that is not GGUF, truncated or corrupt (the message says why).
    OSError
        The file cannot be opened (``FileNotFoundError``, ``PermissionError``,
        ``IsADirectoryError``), raised unchanged.
    """
    where = f"cannot read GGUF file {os.fspath(path)!r}"
    f = open(path, "rb")  # outside the guard: its OSError is raised unchanged
    try:
        with f:
            size = os.fstat(f.fileno()).st_size
            if size < 24:
                raw: Any = np.frombuffer(f.read(), np.uint8)
            else:
                raw = np.frombuffer(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), np.uint8)
        return raw, parse_header(raw)
    except (FormatError, OSError, ValueError, struct.error) as exc:
        raise FormatError(f"{where}: {exc}") from exc


def drop_pages(raw: np.ndarray, start: int, nbytes: int) -> None:
    """Let the pages of ``raw[start:start + nbytes]`` (from :func:`map_file`) leave memory.

    Read again, they come back from the page cache. Keeps the resident size of a
    pass over a large file to what is in use. Where the system has no such advice
    (Windows) or refuses it, the pages stay.
    """
    mapping = getattr(raw.base, "obj", None)
    if isinstance(mapping, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED") and nbytes > 0:
        low = start - start % mmap.PAGESIZE
        with contextlib.suppress(OSError):  # advice the system refuses: the pages stay
            mapping.madvise(mmap.MADV_DONTNEED, low, start + nbytes - low)


# ------------------------------------------------------------------ writing
@dataclass
class Entry:
    """A tensor to write: its info and a function giving its bytes as chunks."""

    name: str
    shape: tuple[int, ...]
    type_id: int
    nbytes: int
    chunks: Callable[[], Iterable[Any]]


def _skip_padding(fd: int, n: int, alignment: int) -> int:
    """Pass over the padding after ``n`` bytes; return its length.

    The file position moves past it without writing (up to 2**31 - 1 bytes
    with ``general.alignment = 2**31``): what follows leaves a hole, which
    reads as zeros, and :func:`write_file` sets the length of the file at the
    end, so trailing padding is zeros too. No buffer of the padding's size.
    """
    pad = -n % alignment
    if pad:
        os.lseek(fd, pad, os.SEEK_CUR)
    return pad


def _header(metadata: Mapping[str, GGUFValue], entries: list[Entry], alignment: int) -> bytes:
    """The header up to its last tensor info (its padding to ``alignment`` not included)."""
    infos, offset = [], 0
    for e in entries:
        raw = e.name.encode("utf-8", "surrogateescape")
        dims = tuple(reversed(e.shape))
        infos.append(struct.pack("<Q", len(raw)) + raw
                     + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, e.type_id, offset))
        offset += e.nbytes + (-e.nbytes % alignment)
    head = (b"GGUF" + struct.pack("<IQQ", _VERSION, len(entries), len(metadata))
            + pack_kvs(metadata) + b"".join(infos))
    return head


@dataclass(frozen=True)
class FileSlice:
    """A chunk that is a range of an open file.

    The kernel copies it (``copy_file_range``): the bytes never pass through this
    process's memory.
    """

    fd: int
    start: int
    nbytes: int


_COPY_PIECE = 16 << 20


def _write_all(fd: int, data: Any) -> int:
    if isinstance(data, np.ndarray):
        if not data.flags.c_contiguous:  # w.T, w[:, ::2], w[::-1]: its values in C order,
            rows = max(1, _COPY_PIECE // max(data[:1].nbytes, 1))  # a bounded copy at a time
            return sum(_write_all(fd, np.ascontiguousarray(data[i:i + rows]))
                       for i in range(0, len(data), rows))
        data = data.reshape(-1).view(np.uint8)  # a view; memoryview refuses zeros in a shape
    view = memoryview(data).cast("B")
    done = 0
    while done < view.nbytes:
        done += os.write(fd, view[done:])
    return done


def _copy(fd: int, chunk: FileSlice) -> int:
    """Append ``chunk`` to ``fd``: in the kernel where it can, else read and written."""
    done = 0
    while done < chunk.nbytes:
        n = min(_COPY_PIECE, chunk.nbytes - done)
        try:
            copied = os.copy_file_range(chunk.fd, fd, n, chunk.start + done)
        except (AttributeError, OSError):  # not Linux, or across file systems it cannot
            copied = _write_all(fd, os.pread(chunk.fd, n, chunk.start + done))
        if not copied:
            raise FormatError(f"the source file ends before byte {chunk.start + done + n}")
        done += copied
    return done


def write_file(path: str | os.PathLike[str], metadata: Mapping[str, GGUFValue],
               entries: list[Entry], alignment: int,
               progress: Callable[[Iterable[Entry]], Iterable[Entry]] = iter) -> int:
    """Write a GGUF file: ``metadata``, then each entry's chunks; return the file's size.

    Chunks are bytes-like, or :class:`FileSlice`. What the reader would refuse
    (:func:`~.header.check_written`: arrays nested too deep, a tensor whose byte
    count does not match its type and shape...) raises FormatError before any
    file is created. The file is written next to
    ``path`` under a temporary name and renamed to ``path`` once complete: an
    error on the way (a tensor that cannot be encoded) leaves no partial file and
    any earlier file at ``path`` as it was.
    """
    head = _header(metadata, entries, alignment)
    # the reader's checks, before any file exists: nothing written that read_gguf refuses
    def padded(n: int) -> int:
        return n + (-n % alignment)

    check_written(head, [e.nbytes for e in entries],
                  padded(len(head)) + sum(padded(e.nbytes) for e in entries))
    path = os.path.abspath(os.fspath(path))
    temp = os.path.join(os.path.dirname(path),
                        f".{os.path.basename(path)}.{uuid.uuid4().hex[:12]}.part")
    # created as open() creates files (0o666 less the umask), which mkstemp would not
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0),
                 0o666)
    try:
        try:
            size = _write_all(fd, head)
            size += _skip_padding(fd, size, alignment)
            for e in progress(entries):
                written = 0
                for chunk in e.chunks():
                    written += _copy(fd, chunk) if isinstance(chunk, FileSlice) \
                        else _write_all(fd, chunk)
                if written != e.nbytes:  # pragma: no cover - an encoder's bug
                    raise FormatError(f"tensor {e.name!r}: {written} bytes written, "
                                      f"{e.nbytes} announced")
                size += written + _skip_padding(fd, written, alignment)
            os.ftruncate(fd, size)  # the last padding's zeros (a hole: nothing allocated)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise
    return size
