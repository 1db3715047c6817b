"""GGUF files: ternary tensors in and out, through the ``gguf`` package's reader and writer.

``gguf`` (installed with tritnum) parses and writes the
container; tritnum only encodes the tensors. bitnet.cpp's I2_S (type id 36) is not
known to ``gguf``: reading skips it in gguf's parser and maps its bytes here
(``n / 4 + 32`` of them), writing registers it by id. Reading checks the header
against the file's size first (:mod:`tritnum.io.gguf_header`), since gguf trusts it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .._validate import choice
from ..errors import FormatError, InvalidTritsError, ShapeMismatchError
from ..quantize import TernaryTensor
from .gguf_blocks import QTYPES, from_gguf_blocks, to_gguf_blocks
from .gguf_header import I2_S_TYPE, check_header

__all__ = ["I2_S_TYPE", "read_gguf", "write_gguf"]

_PROGRESS_FROM = 8  # tensors: show a progress bar from this many on


def _gguf() -> Any:
    try:
        import gguf
    except ImportError:  # pragma: no cover - gguf is in install_requires
        raise ImportError("GGUF files need the gguf package: pip install gguf") from None
    return gguf


def _progress(items: Iterable[Any], total: int, what: str, show: bool | None) -> Iterable[Any]:
    if show is False or (show is None and total < _PROGRESS_FROM):
        return items
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with gguf
        return items
    return tqdm(items, total=total, desc=what, unit="tensor")


def _reader_class() -> type:
    gguf = _gguf()

    class Reader(gguf.GGUFReader):
        """gguf's reader, with I2_S tensors mapped here instead of rejected."""

        def _build_tensors(self, start_offs: int, fields: list[Any]) -> None:
            i2s = [f for f in fields if int(f.parts[4][0]) == I2_S_TYPE]
            ids = {id(f) for f in i2s}
            super()._build_tensors(start_offs, [f for f in fields if id(f) not in ids])
            for field in i2s:
                _, name, _, dims, _, offset = field.parts
                n = int(np.prod(dims))
                start = int(start_offs + offset[0])
                self.tensors.append(gguf.ReaderTensor(
                    name=str(bytes(name), encoding="utf-8"), tensor_type=I2_S_TYPE,
                    shape=dims, n_elements=n, n_bytes=n // 4 + 32, data_offset=start,
                    data=self._get(start, np.uint8, n // 4 + 32), field=field))

    return Reader


def read_gguf(path: str | os.PathLike[str], *, format: str = "2bit",
              progress: bool | None = None) -> dict[str, Any]:
    """Read the tensors of a GGUF file; ternary ones (TQ1_0, TQ2_0, I2_S) as TernaryTensor.

    The file is memory-mapped. F32, F16, F64 and integer tensors come back as NumPy
    arrays (views of the mapping); other quantized types are dequantized to float32 by
    the ``gguf`` package, and types it cannot decode are skipped.

    Parameters
    ----------
    path : path-like
        The GGUF file.
    format : {"2bit", "base3", "bitplane"}
        Packed format of the returned ternary tensors.
    progress : bool, optional
        Show a progress bar; by default only for files with many tensors.

    Returns
    -------
    dict
        Tensor name to :class:`~tritnum.TernaryTensor` or NumPy array, in file order.

    Raises
    ------
    FormatError
        A file that is not GGUF, truncated or corrupt: a count, length or offset the
        file cannot hold, arrays nested too deep, a ternary tensor whose codes are not
        trits or whose dimensions do not fit its type. The message names the key or
        tensor.

    Examples
    --------
    >>> import os, tempfile, numpy as np, tritnum as tn
    >>> path = os.path.join(tempfile.mkdtemp(), "model.gguf")
    >>> w = tn.quantize(np.random.default_rng(0).standard_normal((4, 256)))
    >>> tn.io.write_gguf(path, {"blk.0.attn_q.weight": w, "norm": np.ones(4, np.float32)},
    ...                  qtype="TQ1_0")
    >>> tensors = tn.io.read_gguf(path)
    >>> tensors["blk.0.attn_q.weight"]
    TernaryTensor(shape=(4, 256), format='2bit', group_size=256, 2.1 bits/weight, 272 bytes)
    >>> tensors["norm"]  # a view of the memory-mapped file
    memmap([1., 1., 1., 1.], dtype=float32)
    """
    gguf = _gguf()
    where = f"cannot read GGUF file {os.fspath(path)!r}"
    reader = _open(path, where)
    names = {int(getattr(t, "value", 36)): n for n, t in (
        ("TQ1_0", gguf.GGMLQuantizationType.TQ1_0), ("TQ2_0", gguf.GGMLQuantizationType.TQ2_0),
        ("I2_S", I2_S_TYPE))}
    out: dict[str, Any] = {}
    tensors = sorted(reader.tensors, key=lambda t: t.data_offset)
    for t in _progress(tensors, len(tensors), "reading", progress):
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        kind = int(t.tensor_type)
        if kind in names:
            out[t.name] = _ternary(t, names[kind], shape, format, where)
        elif t.data.dtype != np.uint8:
            out[t.name] = t.data
        else:
            try:
                out[t.name] = gguf.quants.dequantize(t.data, t.tensor_type)
            except NotImplementedError:
                continue
    return out


def _open(path: str | os.PathLike[str], where: str) -> Any:
    """Open ``path`` with gguf's reader once its header has been checked against the file."""
    try:
        check_header(path)  # FormatError is a ValueError
        reader = _reader_class()(os.fspath(path), "r")
    except (ValueError, OSError, IndexError, KeyError, TypeError) as exc:
        raise FormatError(f"{where}: {exc}") from exc
    _check_tensors(reader, where)
    return reader


def _check_tensors(reader: Any, where: str) -> None:
    """Each tensor's bytes lie after the data start and inside the file, all of them."""
    size = int(reader.data.nbytes)
    for t in reader.tensors:
        start, nbytes = int(t.data_offset), int(t.data.nbytes)
        if start < reader.data_offset or start + nbytes > size or nbytes != int(t.n_bytes):
            raise FormatError(f"{where}: tensor {t.name!r}: {t.n_bytes} bytes at byte {start} "
                              f"do not lie within the data of the {size}-byte file")


def _ternary(t: Any, qtype: str, shape: tuple[int, ...], format: str, where: str) -> Any:
    try:
        return from_gguf_blocks(np.asarray(t.data).reshape(-1), qtype, shape,
                                ternary=True, format=format)
    except (FormatError, InvalidTritsError, ShapeMismatchError) as exc:
        raise FormatError(f"{where}: tensor {t.name!r} ({qtype}, shape {shape}): {exc}") from exc


_PLAIN_DTYPES = tuple(np.dtype(t) for t in ("float16", "float32", "float64", "int8", "int16",
                                              "int32", "int64"))


def _check_tensors_to_write(tensors: Any) -> None:
    """A mapping of names to TernaryTensors or arrays GGUF can hold (TypeError otherwise)."""
    if not isinstance(tensors, Mapping):
        raise TypeError("write_gguf takes a mapping of tensor names to TernaryTensors or arrays, "
                        f"got {type(tensors).__name__}")
    for name, value in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"write_gguf: tensor names must be str, got {name!r}")
        if isinstance(value, TernaryTensor):
            continue
        dtype = getattr(value, "dtype", None)
        if not isinstance(dtype, np.dtype) or dtype.newbyteorder("=") not in _PLAIN_DTYPES:
            raise TypeError(
                f"write_gguf: tensor {name!r} must be a TernaryTensor or an array of "
                f"{', '.join(map(str, _PLAIN_DTYPES))}, got "
                f"{type(value).__name__ if dtype is None else dtype}")


def write_gguf(path: str | os.PathLike[str], tensors: Mapping[str, Any], *,
               qtype: str = "TQ2_0", arch: str = "tritnum",
               progress: bool | None = None) -> None:
    """Write tensors to a GGUF file: TernaryTensors as ``qtype``, NumPy arrays as they are.

    Parameters
    ----------
    path : path-like
        The file to write.
    tensors : mapping of str to TernaryTensor or numpy.ndarray
        TernaryTensors are encoded with :func:`~tritnum.io.to_gguf_blocks` (from
        their trits where the scales allow it); arrays of float16/32/64 or int8-64
        are stored unchanged.
    qtype : {"TQ2_0", "TQ1_0", "I2_S"}
        The ternary block format.
    arch : str
        The ``general.architecture`` key of the file.
    progress : bool, optional
        Show a progress bar; by default only for many tensors.

    Examples
    --------
    >>> import os, tempfile, numpy as np, tritnum as tn
    >>> w = tn.quantize(np.random.default_rng(0).standard_normal((4, 256)), axis=-1)
    >>> path = os.path.join(tempfile.mkdtemp(), "w.gguf")
    >>> tn.io.write_gguf(path, {"blk.0.w": w, "norm": np.ones(4, np.float32)})
    >>> back = tn.io.read_gguf(path)
    >>> bool((back["blk.0.w"].packed.unpack() == w.packed.unpack()).all())
    True
    >>> back["blk.0.w"].scales.ravel() == w.scales.ravel().astype(np.float16)  # fp16 d
    array([ True,  True,  True,  True])
    >>> back["norm"].dtype
    dtype('float32')
    """
    gguf = _gguf()
    choice(qtype, "qtype", QTYPES, FormatError)
    _check_tensors_to_write(tensors)
    writer = gguf.GGUFWriter(os.fspath(path), arch)
    kind = I2_S_TYPE if qtype == "I2_S" else getattr(gguf.GGMLQuantizationType, qtype)
    for name, value in _progress(tensors.items(), len(tensors), "encoding", progress):
        if not isinstance(value, TernaryTensor):
            writer.add_tensor(name, np.ascontiguousarray(value, value.dtype.newbyteorder("=")))
            continue
        buf = to_gguf_blocks(value, qtype)
        if qtype == "I2_S":
            # gguf does not know type 36: register the tensor by id and attach its bytes
            writer.add_tensor_info(name, value.shape, np.dtype(np.float32), buf.nbytes,
                                   raw_dtype=kind)
            writer.tensors[-1][name].tensor = buf
        else:
            writer.add_tensor(name, buf, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
