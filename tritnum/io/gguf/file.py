"""GGUF files: whole models in and out, tensors with their metadata.

Reading checks the header against the file's size first (:mod:`.header`),
parses it (:mod:`.container`, :mod:`.values`) and maps the tensors'
bytes; writing lays the file out as llama.cpp and the ``gguf`` package do, one
tensor at a time (:mod:`.encode` turns each into its type's bytes). A file read
and written back with nothing changed has the same metadata (values and types, in
the same order), the same tensor order and alignment, and the same bytes for every
tensor (a file the ``gguf`` package wrote comes back byte for byte). bitnet.cpp's
I2_S (type 36), which the ``gguf`` package does not know, is read and written too.
"""

from __future__ import annotations

import mmap
import os
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from ..._validate import choice
from ...errors import FormatError, InvalidTritsError, ShapeMismatchError
from ...quantize import TernaryTensor
from ...typing import Format, I2SLayout
from ..arrays import bfloat16_to_float32
from ..suffixes import check_writer_suffix
from . import i2s
from .blocks import QTYPES, check_shape, from_gguf_blocks
from .container import (
    ALIGNMENT_KEY,
    DEFAULT_ALIGNMENT,
    PLAIN_CODES,
    TensorInfo,
    drop_pages,
    ggml_type_id,
    map_file,
    plain_view,
    tensor_nbytes,
    write_file,
)
from .encode import FLOATS, WRITABLE, Plan, check_value, default_qtype, plan, source_of
from .header import I2_S_TYPE
from .model import GGUFBlocks, GGUFModel, GGUFReport, LazyTernary, TensorReport, alignment_of
from .values import GGUFValue, as_value

__all__ = ["I2_S_TYPE", "check_mapped", "drop_view", "progress_bar", "read_gguf", "write_gguf"]

_PROGRESS_FROM = 8  # tensors: show a progress bar from this many on


def progress_bar(items: Iterable[Any], total: int, what: str,
                 show: bool | None) -> Iterable[Any]:
    """``items``, with a tqdm bar over them if ``show`` (None: from 8 items on)."""
    if show is False or (show is None and total < _PROGRESS_FROM):
        return items
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with gguf
        return items
    return tqdm(items, total=total, desc=what, unit="tensor")


def _tensor(raw: np.ndarray, info: TensorInfo, order: str, format: str, layout: str,
            where: str) -> Any:
    data = raw[info.start: info.start + info.nbytes]
    kind = info.type_name
    if kind == "BF16":  # exactly float32's upper half
        return bfloat16_to_float32(plain_view(data, kind, order)).reshape(info.shape)
    if kind in PLAIN_CODES:
        return plain_view(data, kind, order).reshape(info.shape)
    if order == ">":
        raise FormatError(f"{where}: tensor {info.name!r}: {kind} in a big-endian file "
                          "(only plain tensors are read from those)")
    if kind in QTYPES:
        try:
            return from_gguf_blocks(data, kind, info.shape, layout=layout, ternary=True,
                                    format=format)
        except (FormatError, InvalidTritsError, ShapeMismatchError) as exc:
            raise FormatError(f"{where}: tensor {info.name!r} ({kind}, shape {info.shape}): "
                              f"{exc}") from exc
    return GGUFBlocks(data, kind, info.shape)


def read_gguf(path: str | os.PathLike[str], *, format: Format = "2bit",
              layout: I2SLayout = "x86", progress: bool | None = None) -> GGUFModel:
    """Read a GGUF file: its tensors, metadata, tensor types and alignment.

    The file is memory-mapped: plain tensors are views of it, ternary ones are
    decoded.

    Parameters
    ----------
    path : path-like
        The GGUF file.
    format : {"2bit", "base3", "bitplane"}
        Packed format of the returned ternary tensors.
    layout : {"x86", "x86-interleaved", "arm"}
        The byte layout of I2_S tensors: the file does not say which bitnet.cpp
        build wrote it (``i2s``; see :data:`~tritnum.io.I2S_LAYOUTS`).
    progress : bool, optional
        Show a progress bar; by default only for files with many tensors.

    Returns
    -------
    GGUFModel
        A mapping of tensor names to tensors in file order (TQ1_0, TQ2_0, I2_S as
        :class:`~tritnum.TernaryTensor`; F32, F16, F64, BF16 (as float32) and integer
        tensors as NumPy arrays; other types as :class:`GGUFBlocks`), with
        ``.metadata`` (every key's :class:`GGUFValue`), ``.qtypes`` and
        ``.alignment``. :func:`write_gguf` writes it back as it was.

    Raises
    ------
    FormatError
        A file that is not GGUF, truncated or corrupt: a count, length or offset the
        file cannot hold, arrays nested too deep, a ternary tensor whose codes are not
        trits or whose dimensions do not fit its type. The message names the key or
        tensor.
    OSError
        The file cannot be opened: ``FileNotFoundError``, ``PermissionError``,
        ``IsADirectoryError``, raised unchanged (not a FormatError).

    Examples
    --------
    >>> import os, tempfile, numpy as np, tritnum as tn
    >>> path = os.path.join(tempfile.mkdtemp(), "model.gguf")
    >>> w = tn.quantize(np.random.default_rng(0).standard_normal((4, 256)))
    >>> _ = tn.io.write_gguf(path, {"blk.0.attn_q.weight": w, "norm": np.ones(4, np.float32)},
    ...                      metadata={"llama.context_length": 2048}, qtype="TQ1_0")
    >>> model = tn.io.read_gguf(path)
    >>> model
    GGUFModel(2 tensors, 2 metadata keys, architecture='tritnum', alignment=32)
    >>> model["blk.0.attn_q.weight"]
    TernaryTensor(shape=(4, 256), format='2bit', group_size=256, 2.1 bits/weight, 272 bytes)
    >>> model["norm"]  # a view of the memory-mapped file
    array([1., 1., 1., 1.], dtype=float32)
    >>> model.metadata["llama.context_length"], model.qtypes
    (GGUFValue('uint32', 2048), {'blk.0.attn_q.weight': 'TQ1_0', 'norm': 'F32'})
    """
    layout = i2s.layout(layout)
    where = f"cannot read GGUF file {os.fspath(path)!r}"
    raw, header = map_file(path)
    tensors = {}
    for info in progress_bar(header.tensors, len(header.tensors), "reading", progress):
        tensors[info.name] = _tensor(raw, info, header.order, format, layout, where)
    return GGUFModel(tensors, header.metadata, {t.name: t.type_name for t in header.tensors},
                     layout)


def _metadata(tensors: Mapping[str, Any], metadata: Mapping[str, Any] | None,
              arch: str | None, alignment: int | None) -> dict[str, GGUFValue]:
    """The key-value pairs to write: ``metadata`` (or the model's), typed.

    ``general.architecture`` goes first if it was missing; the alignment is set.
    """
    if metadata is None:
        metadata = tensors.metadata if isinstance(tensors, GGUFModel) else {}
    if not isinstance(metadata, Mapping):
        raise TypeError(f"write_gguf: metadata must be a mapping, got {type(metadata).__name__}")
    out = {}
    for key, value in metadata.items():
        if not isinstance(key, str):
            raise TypeError(f"write_gguf: metadata keys must be str, got {key!r}")
        try:
            out[key] = as_value(value)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"write_gguf: metadata {key!r}: {exc}") from None
    have = out.get("general.architecture")
    if have is None:
        out = {"general.architecture": GGUFValue("string", arch or "tritnum"), **out}
    elif arch is not None and have != GGUFValue("string", arch):
        raise ValueError(f"write_gguf: arch={arch!r}, but the metadata's "
                         f"general.architecture is {have.value!r}")
    if alignment is not None:
        value = GGUFValue("uint32", alignment)
        if ALIGNMENT_KEY in out or alignment != DEFAULT_ALIGNMENT:
            out[ALIGNMENT_KEY] = value
    alignment_of(out)  # a power of two
    return out


def _qtype_rule(qtype: Any, tensors: Mapping[str, Any]) -> Callable[[str, Any], str]:
    """The qtype of each tensor, from ``write_gguf``'s ``qtype`` argument."""
    model = tensors.qtypes if isinstance(tensors, GGUFModel) else {}

    def default(name: str, value: Any) -> str:
        known = model.get(name)
        if known is not None and known != "F64" and (
                known in WRITABLE or isinstance(value, GGUFBlocks)):
            return known
        return "TQ2_0" if isinstance(value, LazyTernary) else default_qtype(value)

    if qtype is None:
        return default
    if isinstance(qtype, str):
        qtype = choice(qtype, "qtype", WRITABLE, FormatError)

        def single(name: str, value: Any) -> str:
            ternary = isinstance(value, (TernaryTensor, LazyTernary))
            floats = isinstance(value, np.ndarray) and value.dtype.kind == "f"
            if (ternary and qtype in QTYPES) or (floats and qtype in FLOATS):
                return qtype
            return default(name, value)
        return single
    if isinstance(qtype, Mapping):
        unknown = [n for n in qtype if n not in tensors]
        if unknown:
            raise ValueError(f"write_gguf: qtype names tensors that are not written: "
                             f"{unknown[:5]}")
        return lambda name, value: qtype.get(name) or default(name, value)
    if callable(qtype):
        return lambda name, value: qtype(name, value) or default(name, value)
    raise TypeError("write_gguf: qtype must be a str, a mapping of tensor names to qtypes, a "
                    f"callable (name, tensor) -> qtype, or None; got {type(qtype).__name__}")


def write_gguf(path: str | os.PathLike[str], tensors: Mapping[str, Any], *,
               metadata: Mapping[str, Any] | None = None,
               qtype: str | Mapping[str, str] | Callable[[str, Any], str | None] | None = None,
               arch: str | None = None, alignment: int | None = None,
               layout: I2SLayout | None = None, requantize: bool = False,
               progress: bool | None = None) -> GGUFReport:
    """Write tensors and metadata to a GGUF file, each tensor in the type asked for.

    Parameters
    ----------
    path : path-like
        The file to write. It is written under a temporary name and renamed once
        complete: an error leaves no partial file.
    tensors : mapping of str to TernaryTensor, numpy.ndarray or GGUFBlocks
        In the order they go into the file; a :class:`GGUFModel` from
        :func:`read_gguf` also brings its metadata, tensor types and I2_S layout.
        A ``tritnum.io.gguf.model.LazyTernary`` stands for a TernaryTensor loaded
        when its bytes are due (a model streamed one tensor at a time). The pages of
        arrays that map a file are let go once written.
    metadata : mapping of str to GGUFValue or a plain value, optional
        The key-value pairs, in order. Plain values get a type (:class:`GGUFValue`:
        an int is a uint32, a float a float32, a str a string, a list an array);
        give a ``GGUFValue`` for any other. ``general.architecture`` is added first
        if missing (``arch``, or "tritnum"). Default: the model's metadata, or none.
    qtype : str, mapping, callable or None
        Each tensor's GGML type: ``"TQ2_0"``, ``"TQ1_0"``, ``"I2_S"`` (ternary),
        ``"F32"``, ``"F16"``, ``"BF16"`` (floats), ``"I8"``...``"I64"``, or a
        :class:`GGUFBlocks`' own type. A str applies to every TernaryTensor (a
        ternary type) or every float array (a float type); a mapping gives types by
        tensor name; a callable ``(name, tensor)`` returns one (None: the default).
        Default: the model's types, else TQ2_0 for TernaryTensors and the array's
        own dtype (float64 as F32: never F64, which llama.cpp cannot compute with).
        Float arrays given a ternary type are quantized as llama.cpp does.
    arch : str, optional
        ``general.architecture``, where ``metadata`` has none.
    alignment : int, optional
        The data alignment (a power of two); default the metadata's
        ``general.alignment``, else 32.
    layout : {"x86", "x86-interleaved", "arm"}, optional
        I2_S's byte layout; default the model's, else "x86".
    requantize : bool
        Write TernaryTensors whose scales a type cannot hold exactly (group scales
        finer than TQ's 256-value blocks, per-row scales into I2_S's one) by
        re-quantizing their values; the report gives the error. Without it they
        raise FormatError.
    progress : bool, optional
        Show a progress bar; by default only for many tensors.

    Returns
    -------
    GGUFReport
        Each tensor's type, size and, where it was re-quantized, relative error.

    Raises
    ------
    TypeError
        A tensor or metadata value GGUF cannot hold; a name that is not a str.
    FormatError
        A path ending in another format's extension (``.npz``, ``.safetensors``); a
        qtype a tensor cannot take; scales that cannot be held exactly (the
        message says how much re-quantizing would change); a conversion that would
        make finite values infinite (float16 overflow, a TQ block maximum of 65520
        or more, float64 beyond float32); anything :func:`read_gguf` would refuse
        (arrays nested more than 8 deep, a GGUFBlocks whose byte count does not
        match its type and shape, two names with the same UTF-8 bytes), before
        any file is created; a tensor empty along an axis but the last (llama.cpp's
        reader divides by those dimensions).
    ShapeMismatchError
        A shape the tensor's type cannot hold.
    ValueError
        A ``qtype`` mapping naming a tensor that is not written; an ``arch`` that
        contradicts the metadata's ``general.architecture``.
    IsADirectoryError
        ``path`` is a directory (before anything is written).

    Examples
    --------
    >>> import os, tempfile, numpy as np, tritnum as tn
    >>> w = tn.quantize(np.random.default_rng(0).standard_normal((4, 256)), axis=-1)
    >>> path = os.path.join(tempfile.mkdtemp(), "w.gguf")
    >>> tn.io.write_gguf(path, {"blk.0.w": w, "norm": np.ones(4)},  # doctest: +ELLIPSIS
    ...                  metadata={"general.name": "demo"}, qtype={"norm": "F16"})
    GGUFReport('...w.gguf', 512 bytes, 2 tensors: 1 TQ2_0, 1 F16)
    >>> back = tn.io.read_gguf(path)
    >>> bool((back["blk.0.w"].packed.unpack() == w.packed.unpack()).all())
    True
    >>> back["norm"].dtype, back.metadata["general.name"].value
    (dtype('float16'), 'demo')
    >>> g = tn.quantize(np.random.default_rng(0).standard_normal((4, 256)), group_size=64)
    >>> report = tn.io.write_gguf(path, {"w": g}, requantize=True)  # 64-groups into 256-blocks
    >>> round(report.requantized["w"], 3)
    0.113
    """
    check_writer_suffix(path, "write_gguf", "GGUF")
    if os.path.isdir(path):  # os.replace would refuse it only once the file is written
        raise IsADirectoryError(f"write_gguf: {os.fspath(path)!r} is a directory, not a file "
                                "name")
    if not isinstance(tensors, Mapping):
        raise TypeError("write_gguf takes a mapping of tensor names to TernaryTensors or "
                        f"arrays, got {type(tensors).__name__}")
    for name, value in tensors.items():
        if not (isinstance(value, LazyTernary) and isinstance(name, str)):
            check_value(name, value)
    rule = _qtype_rule(qtype, tensors)
    if layout is None:
        layout = tensors.layout if isinstance(tensors, GGUFModel) else "x86"
    layout = i2s.layout(layout)
    meta = _metadata(tensors, metadata, arch, alignment)
    plans = [(_lazy_plan if isinstance(value, LazyTernary) else plan)(
        name, value, rule(name, value), layout, requantize) for name, value in tensors.items()]
    for p in plans:
        value = tensors[p.name]
        p.chunks = _dropping(p.name, value.data if isinstance(value, GGUFBlocks) else value,
                             p.chunks)
    size = write_file(path, meta, plans, alignment_of(meta), lambda items: progress_bar(
        items, len(plans), "writing", progress))
    return GGUFReport(os.fspath(path), size, {p.name: TensorReport(
        p.name, p.shape, _source(tensors[p.name]), p.qtype, p.nbytes, p.relative_error,
        p.note) for p in plans})


def _source(value: Any) -> str:
    return "ternary" if isinstance(value, LazyTernary) else source_of(value)


def _lazy_plan(name: str, value: LazyTernary, qtype: str, layout: str,
               requantize: bool) -> Plan:
    """How a tensor loaded when its bytes are due is written: type and size from its shape.

    A ternary type's shape is checked now; the loaded tensor goes through
    :func:`~.encode.plan` (every other check), and what it reports (re-quantized,
    with what error) is set on the plan returned.
    """
    qtype = choice(qtype, f"tensor {name!r}: qtype", WRITABLE, FormatError)
    if qtype in QTYPES:
        try:
            check_shape(value.shape, qtype, layout)
        except ShapeMismatchError as exc:
            raise ShapeMismatchError(f"tensor {name!r}: {exc}", expected=exc.expected,
                                     actual=exc.actual) from None
    type_id = ggml_type_id(qtype)

    def chunks() -> Iterable[Any]:
        tensor = value.load()
        if not isinstance(tensor, TernaryTensor) or tuple(tensor.shape) != value.shape:
            raise FormatError(f"tensor {name!r}: loaded a {type(tensor).__name__} of shape "
                              f"{getattr(tensor, 'shape', None)}, not the TernaryTensor of "
                              f"shape {value.shape} the header announces")
        loaded = plan(name, tensor, qtype, layout, requantize)
        reported = out()
        assert reported is not None  # write_gguf holds its plans while it writes
        reported.relative_error, reported.note = loaded.relative_error, loaded.note
        return loaded.chunks()

    written = Plan(name, value.shape, type_id, tensor_nbytes(value.shape, type_id), chunks)
    out = weakref.ref(written)  # not the plan itself: a cycle would keep the source mapped
    return written


_PIECE = 16 << 20  # bytes of a mapped chunk written (and let go) at a time


def _dropping(name: str, source: Any,
              chunks: Callable[[], Iterable[Any]]) -> Callable[[], Iterator[Any]]:
    """``chunks``, those that map a file in pieces, each piece's pages let go once written.

    ``source`` (the tensor's array), where it maps a file, is checked first to be
    still in that file (:func:`check_mapped`).
    """
    def written() -> Iterator[Any]:
        check_mapped(source, name)
        for chunk in chunks():
            if _mapping(chunk) is None:
                yield chunk
                continue
            flat = chunk.reshape(-1).view(np.uint8)
            for start in range(0, flat.size, _PIECE):
                yield flat[start:start + _PIECE]
                drop_view(flat[start:start + _PIECE])
    return written


def _mapping(a: Any) -> mmap.mmap | None:
    """The read-only mapped file a C-contiguous array ``a`` is a view of, or None."""
    if not isinstance(a, np.ndarray) or not a.flags.c_contiguous:
        return None
    base: Any = a
    while isinstance(base, np.ndarray):
        base = base.base
    mapping = getattr(base, "obj", base)
    return mapping if isinstance(mapping, mmap.mmap) and memoryview(mapping).readonly else None


def check_mapped(a: Any, name: str) -> None:
    """FormatError if ``a`` maps bytes past the end its file has now (truncated since read).

    Reading them would kill the process (SIGBUS): a checkpoint or GGUF file cut
    short while a conversion streams it. Anything that does not map a file passes.
    """
    mapping = _mapping(a)
    if mapping is None:
        return
    end = (a.__array_interface__["data"][0]
           - np.frombuffer(mapping, np.uint8).__array_interface__["data"][0] + a.nbytes)
    try:
        size = mapping.size()  # the file's length now (fstat)
    except OSError:  # pragma: no cover - a mapping without its file descriptor
        return
    if size < end:
        raise FormatError(f"tensor {name!r}: its file is now {size} bytes, cut short of the "
                          f"{end} it held when read (truncated while being converted)")


def drop_view(a: Any) -> None:
    """Let the pages of ``a`` leave memory where it is a view of a read-only mapped file.

    Read again, they come back from the page cache: the resident size of a pass
    over mapped files stays at what is in use. Anything else is left as it is.
    """
    mapping = _mapping(a)
    if mapping is not None:
        whole = np.frombuffer(mapping, np.uint8)
        drop_pages(whole, a.__array_interface__["data"][0]
                   - whole.__array_interface__["data"][0], a.nbytes)
