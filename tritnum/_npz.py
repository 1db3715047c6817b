"""Reading ``.npz`` files: every way a file can be unreadable becomes a FormatError.

A hostile file is refused before anything large is allocated: each member's declared
uncompressed size (the zip directory's, and the ``.npy`` header's shape times item size,
which must agree) is checked against ``max_bytes``, a compressed member may not expand
more than :data:`MAX_RATIO` times, and nothing is unpickled. JSON headers are parsed
with their nesting bounded, and every key is checked for presence and type.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import struct
import zipfile
import zlib
from collections.abc import Iterator
from typing import Any, NoReturn, Protocol

import numpy as np

from .errors import FormatError

#: The default for the ``max_bytes=`` keyword of ``tn.load`` and ``ItemMemory.load``:
#: the most bytes a file's arrays may declare in all (16 GiB).
MAX_BYTES = 16 * 2**30
#: The most a compressed member may expand (uncompressed bytes per compressed byte);
#: ``tn.save`` and ``ItemMemory.save`` write uncompressed members.
MAX_RATIO = 100
#: Members this small are exempt from :data:`MAX_RATIO` (nothing to gain for a bomb).
_RATIO_GRACE = 2**20
_MAX_NPY_HEADER = 10_000  # np.load's own default
_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)  # what np.savez(_compressed) writes
_REFUSED_FLAGS = 0x1 | 0x20 | 0x40  # encrypted, patched data, strong encryption

#: What opening a file raises when it is missing, a directory or not permitted: raised
#: unchanged by every reader (``except OSError`` catches it), never made a FormatError.
ACCESS_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)
# what np.load, json and a malformed header raise on a truncated, corrupt or foreign file
_UNREADABLE = (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError,
               zipfile.BadZipFile, EOFError)
# what zipfile, zlib and np.lib.format raise on a corrupt archive or member
_ZIP_ERRORS = (*_UNREADABLE, NotImplementedError, RuntimeError, zlib.error, OverflowError,
               struct.error, RecursionError)


@contextlib.contextmanager
def reading(path: str | os.PathLike[str], what: str) -> Iterator[None]:
    """Run the body; what an unreadable file raises becomes FormatError (not a ``what``)."""
    try:
        yield
    except (FormatError, *ACCESS_ERRORS):
        raise
    except _UNREADABLE as exc:
        raise FormatError(f"{os.fspath(path)!r} is not a readable {what}: {exc}") from exc


def unreadable(path: str | os.PathLike[str], what: str, problem: str) -> NoReturn:
    """Raise the FormatError of a file that is not a readable ``what``, saying why."""
    raise FormatError(f"{os.fspath(path)!r} is not a readable {what}: {problem}")


class Failing(Protocol):
    """A file being read that can raise its FormatError (an :class:`Archive`, a header)."""

    def fail(self, problem: str) -> NoReturn:
        """Raise the FormatError of this file, saying ``problem``."""


def check_max_bytes(max_bytes: Any) -> int:
    """``max_bytes`` as an int >= 0, or TypeError/ValueError."""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, (int, np.integer)):
        raise TypeError(f"max_bytes must be an int, got {type(max_bytes).__name__}")
    if max_bytes < 0:
        raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
    return int(max_bytes)


class Archive:
    """An open ``.npz`` file whose members are checked before they are read.

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    what : str
        What the file should be, for messages ("tritnum file").
    max_bytes : int
        The most bytes the members may declare in all (checked by :func:`check_max_bytes`).
    """

    def __init__(self, path: str | os.PathLike[str], what: str, max_bytes: int) -> None:
        self.path, self.what = path, what
        self.max_bytes = max_bytes
        with self._zip_errors("the zip directory"):
            self._zip = zipfile.ZipFile(path)
        try:
            size = os.fstat(self._zip.fp.fileno()).st_size  # type: ignore[union-attr]
            self._infos = {info.filename: info for info in self._zip.infolist()}
            self._names = {name[:-4] for name in self._infos if name.endswith(".npy")}
            self._check_members(size)
        except BaseException:
            self._zip.close()
            raise

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self._zip.close()

    def fail(self, problem: str) -> NoReturn:
        """Raise the FormatError of this file, saying ``problem``."""
        unreadable(self.path, self.what, problem)

    @contextlib.contextmanager
    def _zip_errors(self, where: str) -> Iterator[None]:
        try:
            yield
        except (FormatError, *ACCESS_ERRORS):
            raise
        except _ZIP_ERRORS as exc:
            self.fail(f"{where}: {type(exc).__name__}: {exc}")

    def _check_members(self, size: int) -> None:
        total = 0
        for info in self._infos.values():
            _check_member(self, info, size)
            total += info.file_size
        if total > self.max_bytes:
            self.fail(f"its members declare {total} bytes in all, more than "
                      f"max_bytes={self.max_bytes} (pass a larger max_bytes to load it)")

    def names(self) -> set[str]:
        """The arrays in the file (member names without ``.npy``)."""
        return set(self._names)

    def array(self, name: str) -> np.ndarray:
        """The array ``name``, read after its ``.npy`` header is checked against its size."""
        info = self._infos.get(name + ".npy")
        if info is None:
            self.fail(f"array {name!r} is missing")
        where = f"array {name!r}"
        with self._zip_errors(where):
            with self._zip.open(info) as fp:
                shape, dtype = _npy_header(self, fp, where)
                data_bytes = info.file_size - fp.tell()
            if math.prod(shape) * dtype.itemsize != data_bytes:
                self.fail(f"{where}: its .npy header declares shape {shape} of {dtype} "
                          f"({math.prod(shape) * dtype.itemsize} bytes) in a member of "
                          f"{data_bytes} data bytes")
            with self._zip.open(info) as fp:
                return np.lib.format.read_array(fp, allow_pickle=False,
                                                max_header_size=_MAX_NPY_HEADER)

    def parse_json(self, name: str, text: str) -> Any:
        """Parse ``text``, read from array ``name``, as JSON with bounded nesting."""
        try:
            return json.loads(text)
        except RecursionError:
            self.fail(f"the JSON header in array {name!r} nests too deeply")
        except ValueError as exc:
            self.fail(f"the JSON header in array {name!r} is not JSON: {exc}")


def _check_member(archive: Archive, info: zipfile.ZipInfo, size: int) -> None:
    """Refuse a member that cannot be read safely, from its zip directory entry alone."""
    where = f"member {info.filename!r}"
    if info.flag_bits & _REFUSED_FLAGS:
        archive.fail(f"{where} is encrypted or patched (flags {info.flag_bits:#x})")
    if info.compress_type not in _METHODS:
        archive.fail(f"{where} uses compression method {info.compress_type} "
                     f"(stored or deflated only)")
    if info.extract_version > zipfile.MAX_EXTRACT_VERSION:
        archive.fail(f"{where} needs zip version {info.extract_version / 10}")
    if info.header_offset + info.compress_size > size:
        archive.fail(f"{where} declares {info.compress_size} compressed bytes at offset "
                     f"{info.header_offset} in a file of {size} bytes")
    if info.file_size > archive.max_bytes:
        archive.fail(f"{where} declares {info.file_size} bytes, more than "
                     f"max_bytes={archive.max_bytes} (pass a larger max_bytes to load it)")
    if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
        archive.fail(f"{where} is stored ({info.compress_size} bytes) but declares "
                     f"{info.file_size} bytes")
    if info.file_size > max(_RATIO_GRACE, MAX_RATIO * info.compress_size):
        archive.fail(f"{where} expands {info.compress_size} compressed bytes to "
                     f"{info.file_size}, more than {MAX_RATIO} times (a zip bomb?)")


def _npy_header(archive: Archive, fp: Any, where: str) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype a ``.npy`` stream declares, its position left after the header."""
    version = np.lib.format.read_magic(fp)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(fp, _MAX_NPY_HEADER)
    elif version == (2, 0):
        shape, _, dtype = np.lib.format.read_array_header_2_0(fp, _MAX_NPY_HEADER)
    else:
        archive.fail(f"{where}: .npy format version {version} (1.0 or 2.0 only)")
    if dtype.hasobject:
        archive.fail(f"{where}: dtype {dtype} holds Python objects (never unpickled)")
    if any(n < 0 for n in shape):
        archive.fail(f"{where}: its .npy header declares the negative shape {shape}")
    return shape, dtype


def sizes(value: list[Any]) -> bool:
    """Whether ``value`` holds only ints >= 0 (not bools): a shape read from a file."""
    return all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value)


def field(archive: Failing, header: Any, key: str, kinds: type | tuple[type, ...],
          where: str = "the header") -> Any:
    """``header[key]``, or a FormatError naming ``key`` if it is missing or ill-typed.

    ``bool`` is not accepted as an ``int``, nor an ``int`` as a ``bool``.
    """
    if not isinstance(header, dict):
        archive.fail(f"{where} is a JSON {type(header).__name__}, not an object")
    if key not in header:
        archive.fail(f"{where} has no key {key!r}")
    value = header[key]
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join(k.__name__ for k in kinds)
        archive.fail(f"{where}: key {key!r} is {value!r:.60}, not a {names}")
    return value
