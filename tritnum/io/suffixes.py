"""What a file name's extension says the file holds, and the writers that must agree with it.

``tn.save`` and ``tn.load`` pick the format from the extension (``.npz`` or
``.safetensors``, in any case) and refuse any other; a format's own writer
refuses a name whose extension is another format's, so that ``w.safetensors``
never holds ``.npz`` bytes.
"""

from __future__ import annotations

import os

from .._validate import choice
from ..errors import FormatError

__all__ = ["SAVE_SUFFIXES", "check_writer_suffix", "save_suffix"]

#: The extension of each file format tritnum writes.
SUFFIXES = {".npz": "npz", ".safetensors": "safetensors", ".gguf": "GGUF"}
#: The extensions ``tn.save`` and ``tn.load`` take.
SAVE_SUFFIXES = (".npz", ".safetensors")


def _suffix(path: str | os.PathLike[str]) -> str:
    return os.path.splitext(os.fspath(path))[1].lower()


def save_suffix(path: str | os.PathLike[str], caller: str) -> str:
    """The extension of ``path`` (lower case), one of :data:`SAVE_SUFFIXES`, or FormatError.

    >>> save_suffix("model.SafeTensors", "tn.save")
    '.safetensors'
    >>> save_suffix("weights", "tn.save")
    Traceback (most recent call last):
        ...
    tritnum.errors.FormatError: tn.save picks the format from the extension of 'weights': it \
must be one of '.npz', '.safetensors', got ''
    >>> save_suffix("model.gguf", "tn.load")
    Traceback (most recent call last):
        ...
    tritnum.errors.FormatError: tn.load picks the format from the extension of 'model.gguf': \
it must be one of '.npz', '.safetensors', got '.gguf' (for GGUF files use tn.io.read_gguf)
    """
    suffix = _suffix(path)
    name = f"{caller} picks the format from the extension of {os.fspath(path)!r}: it"
    if suffix == ".gguf":  # a format with functions of its own: say which
        verb = "read_gguf" if caller == "tn.load" else "write_gguf"
        raise FormatError(f"{name} must be one of {', '.join(map(repr, SAVE_SUFFIXES))}, "
                          f"got '.gguf' (for GGUF files use tn.io.{verb})")
    return choice(suffix, name, SAVE_SUFFIXES, FormatError)


def check_writer_suffix(path: str | os.PathLike[str], writer: str, kind: str) -> None:
    """FormatError if ``path`` ends in the extension of a format other than ``kind``.

    >>> check_writer_suffix("w.npz", "write_safetensors", "safetensors")
    Traceback (most recent call last):
        ...
    tritnum.errors.FormatError: write_safetensors writes safetensors files, not npz ('w.npz')
    """
    other = SUFFIXES.get(_suffix(path), kind)
    if other != kind:
        raise FormatError(f"{writer} writes {kind} files, not {other} ({os.fspath(path)!r})")
