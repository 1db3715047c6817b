"""``tn.save`` and ``tn.load``: the extension picks the format, ``.npz`` or ``.safetensors``."""

from __future__ import annotations

import os
from typing import Any

from .._npz import MAX_BYTES
from .npz import load_npz, save_npz
from .safetensors_file import read_safetensors, write_safetensors
from .suffixes import save_suffix

__all__ = ["load", "save"]


def save(path: str | os.PathLike[str], obj: Any) -> None:
    """Save ternary tensors and plain arrays (or a dict of them), in the format the extension names.

    ``.npz`` (any case): tritnum's own file, plain arrays and a JSON header with a
    format version, nothing pickled; it holds one object or a dict. ``.safetensors``:
    a dict, as :func:`tritnum.io.write_safetensors` writes it (readable by any
    safetensors reader). Any other extension is refused: the name says what the file
    holds. The file is written at ``path`` exactly (unlike ``np.savez``, no ``.npz``
    is appended).

    Parameters
    ----------
    path : path-like
        Ends in ``.npz`` or ``.safetensors``.
    obj : PackedTrits, TernaryTensor, array, or a dict of them
        Arrays are NumPy arrays, PyTorch tensors or GPU arrays of bool, (unsigned)
        integers or float16/32/64: a model's biases and norms next to its ternary
        weights. bfloat16 tensors are stored as float32 in ``.npz`` (exactly), as
        bfloat16 in ``.safetensors``.

    Raises
    ------
    FormatError
        An extension other than ``.npz`` or ``.safetensors``.
    TypeError
        A value of another type (a list, an object or string array), or not a dict
        for ``.safetensors``.
    ValueError
        A name that is not a string, that the format reserves (``/`` in ``.npz``), or
        longer than it holds (65,524 UTF-8 bytes in ``.npz``).

    Examples
    --------
    >>> import os, tempfile, numpy as np, tritnum as tn
    >>> path = os.path.join(tempfile.mkdtemp(), "layer.npz")
    >>> t = tn.quantize(np.arange(-4.0, 4.0).reshape(2, 4), axis=-1, format="base3")
    >>> tn.save(path, {"w": t, "bias": np.zeros(2, np.float32), "mask": tn.pack([1, 0, -1])})
    >>> back = tn.load(path)
    >>> back["w"].packed == t.packed, back["bias"], back["mask"].unpack()
    (True, array([0., 0.], dtype=float32), array([ 1,  0, -1], dtype=int8))
    >>> tn.save(path.replace(".npz", ".safetensors"), back)  # the same, for any reader
    >>> tn.save(path.replace(".npz", ".bin"), t)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tritnum.errors.FormatError: tn.save picks the format from the extension of '...layer.bin': \
it must be one of '.npz', '.safetensors', got '.bin'
    """
    if save_suffix(path, "tn.save") == ".npz":
        save_npz(path, obj)
    elif isinstance(obj, dict):
        write_safetensors(path, obj)
    else:
        raise TypeError(f"a .safetensors file holds named tensors: pass a dict, not a "
                        f"{type(obj).__name__} (or save it to an .npz)")


def load(path: str | os.PathLike[str], *, max_bytes: int | None = None) -> Any:
    """Load what :func:`save` wrote, in the format the extension names.

    ``.npz``: one object or a dict, as saved; read into memory. ``.safetensors``: a
    :class:`tritnum.io.SafetensorsFile` (a dict), as :func:`tritnum.io.read_safetensors`
    reads it: memory-mapped, any safetensors file.

    Parameters
    ----------
    path : path-like
        Ends in ``.npz`` or ``.safetensors`` (any case).
    max_bytes : int, optional
        The most bytes the file's arrays may declare in all, a limit to refuse a file
        before anything is read (pass a larger one to load it). By default 16 GiB for
        ``.npz`` (whose members are read into memory) and none for ``.safetensors``
        (memory-mapped). Whatever the limit, a compressed ``.npz`` member may not
        expand more than 100 times (``tn.save`` writes uncompressed files).

    Raises
    ------
    FormatError
        Another extension; a file that is not of its format, of a newer
        format version, truncated, corrupt or hostile (a missing or ill-typed header
        key, an array larger than ``max_bytes`` or than its member, a zip bomb), naming
        the array or header key at fault.
    OSError
        The file cannot be opened: ``FileNotFoundError``, ``PermissionError``,
        ``IsADirectoryError``, raised unchanged (not a FormatError).

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
    if save_suffix(path, "tn.load") == ".npz":
        return load_npz(path, MAX_BYTES if max_bytes is None else max_bytes)
    return read_safetensors(path, max_bytes=max_bytes)
