"""What GGUF reading and writing hand back: a whole model, raw blocks, and a report.

- :class:`GGUFModel`: a file's tensors (a read-only mapping, in file order), its
  metadata with their GGUF types, each tensor's GGML type and the alignment:
  everything :func:`~tritnum.io.write_gguf` needs to write the file back.
- :class:`GGUFBlocks`: the bytes of a tensor whose GGML type tritnum keeps as it is
  (Q4_K, Q6_K, Q8_0, ...), written back unchanged, dequantized on request.
- :class:`GGUFReport`: what a write did to each tensor (its type, size, whether it
  was re-quantized and with what error, why it was kept in float).
- :class:`LazyTernary`: a ternary tensor :func:`~tritnum.io.write_gguf` reads only when
  its bytes are due (a model streamed from a checkpoint, one tensor in memory at a time).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import FormatError, ShapeMismatchError
from .container import ALIGNMENT_KEY, DEFAULT_ALIGNMENT
from .values import GGUFValue

__all__ = ["GGUFBlocks", "GGUFModel", "GGUFReport", "LazyTernary", "TensorReport",
           "alignment_of"]


class GGUFBlocks:
    """A tensor's bytes in a GGML block type tritnum does not decode to ternary.

    :meth:`dequantize` (and ``np.asarray``) give float32 values through the
    ``gguf`` package; :func:`~tritnum.io.write_gguf` writes the bytes unchanged.

    Parameters
    ----------
    data : array_like of uint8
        The tensor's bytes, kept flat as the ``data`` attribute (a view of the
        file when read).
    qtype : str
        The GGML type's name (``"Q4_K"``, ``"Q8_0"``...), kept as ``qtype``.
    shape : tuple of int
        The logical shape in NumPy order, kept as ``shape``.

    Raises
    ------
    TypeError
        ``data`` that is not uint8; a shape that is not a sequence of ints.
    ShapeMismatchError
        A negative size in ``shape``.

    Examples
    --------
    >>> import numpy as np
    >>> from gguf import GGMLQuantizationType, quants
    >>> from tritnum.io import GGUFBlocks
    >>> x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32)
    >>> b = GGUFBlocks(quants.quantize(x, GGMLQuantizationType.Q8_0).reshape(-1), "Q8_0",
    ...                (2, 32))
    >>> b
    GGUFBlocks(qtype='Q8_0', shape=(2, 32), 68 bytes)
    >>> float(np.abs(np.asarray(b) - x).max()) < 0.01
    True
    """

    __slots__ = ("data", "qtype", "shape")

    def __init__(self, data: Any, qtype: str, shape: tuple[int, ...]) -> None:
        data = np.asarray(data)
        if data.dtype != np.uint8:
            raise TypeError(f"GGUFBlocks data must be uint8, got {data.dtype}")
        self.data = data.reshape(-1)
        self.qtype = str(qtype)
        try:
            self.shape = tuple(operator.index(d) for d in shape)
        except TypeError:
            raise TypeError(f"GGUFBlocks shape must be a tuple of ints, got {shape!r}") from None
        if any(d < 0 for d in self.shape):
            raise ShapeMismatchError(f"GGUFBlocks shape must have no negative sizes, got "
                                     f"{self.shape}", expected="sizes >= 0", actual=self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the encoded tensor."""
        return int(self.data.nbytes)

    def dequantize(self) -> np.ndarray:
        """The float32 values, decoded by ``gguf.quants.dequantize``.

        Raises
        ------
        FormatError
            A type the ``gguf`` package cannot decode.
        """
        from gguf import GGMLQuantizationType, quants

        try:
            kind = GGMLQuantizationType[self.qtype]
            rows = self.data.reshape(*self.shape[:-1], -1) if self.shape else self.data
            values = quants.dequantize(rows, kind)
        except (KeyError, NotImplementedError, ValueError) as exc:
            raise FormatError(f"the gguf package cannot decode {self.qtype}: {exc}") from exc
        return np.asarray(values, np.float32).reshape(self.shape)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        values = self.dequantize()
        return values if dtype is None else values.astype(dtype)

    def __repr__(self) -> str:
        return f"GGUFBlocks(qtype={self.qtype!r}, shape={self.shape}, {self.nbytes} bytes)"


class LazyTernary:
    """A :class:`~tritnum.TernaryTensor` of a known shape, read when it is written.

    :func:`~tritnum.io.write_gguf` writes the file's header from ``shape`` and calls
    ``load`` when the tensor's bytes are due, then lets the tensor go: a model
    streams through one tensor at a time. What the loaded tensor fails (trits,
    scales, a shape other than ``shape``) raises then, and no file is left.

    Parameters
    ----------
    shape : tuple of int
        The tensor's shape, kept as ``shape``.
    load : callable
        ``load()`` returns the TernaryTensor; kept as ``load``.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> from tritnum.io.gguf.model import LazyTernary
    >>> lazy = LazyTernary((4, 256), lambda: tn.quantize(np.ones((4, 256))))
    >>> lazy
    LazyTernary(shape=(4, 256))
    >>> float(lazy.then(lambda t: tn.TernaryTensor(t.packed, t.scales * 2)).load().scales)
    2.0
    """

    __slots__ = ("load", "shape")

    def __init__(self, shape: tuple[int, ...], load: Callable[[], Any]) -> None:
        self.shape = tuple(operator.index(d) for d in shape)
        self.load = load

    def then(self, change: Callable[[Any], Any]) -> LazyTernary:
        """The tensor ``change`` makes of this one once loaded (of the same shape)."""
        return LazyTernary(self.shape, lambda: change(self.load()))

    def __repr__(self) -> str:
        return f"LazyTernary(shape={self.shape})"


class GGUFModel(Mapping[str, Any]):
    """A GGUF file's tensors, metadata and GGML types, as :func:`~tritnum.io.read_gguf` reads them.

    A read-only mapping of tensor names to tensors, in the file's order. The
    parameters are kept as attributes of the same names: plain dicts that can be
    edited before writing the model back with :func:`~tritnum.io.write_gguf`.

    Parameters
    ----------
    tensors : dict of str to TernaryTensor, numpy.ndarray or GGUFBlocks
        TQ1_0/TQ2_0/I2_S tensors as TernaryTensors, F32/F16/F64/BF16 and integer
        tensors as NumPy arrays (BF16 as float32), other block types as
        :class:`GGUFBlocks`.
    metadata : dict of str to GGUFValue
        Every key-value pair of the file, in its order, with its GGUF type.
    qtypes : dict of str to str
        Each tensor's GGML type in the file (``"F16"``, ``"TQ2_0"``, ``"Q6_K"``...).
    layout : {"x86", "x86-interleaved", "arm"}
        The I2_S layout the file was read with (see
        :data:`~tritnum.io.I2S_LAYOUTS`).

    Examples
    --------
    >>> import numpy as np
    >>> from tritnum.io import GGUFModel, GGUFValue
    >>> m = GGUFModel({"norm": np.ones(4, np.float32)},
    ...               {"general.architecture": GGUFValue("string", "llama")}, {"norm": "F32"})
    >>> m, list(m), m.alignment, m.architecture  # doctest: +NORMALIZE_WHITESPACE
    (GGUFModel(1 tensors, 1 metadata keys, architecture='llama', alignment=32), ['norm'], 32,
     'llama')
    """

    def __init__(self, tensors: dict[str, Any], metadata: dict[str, GGUFValue],
                 qtypes: dict[str, str], layout: str = "x86") -> None:
        self.tensors = tensors
        self.metadata = metadata
        self.qtypes = qtypes
        self.layout = layout

    def __getitem__(self, name: str) -> Any:
        return self.tensors[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)

    @property
    def alignment(self) -> int:
        """The data alignment: ``general.alignment``, or GGUF's default 32."""
        return alignment_of(self.metadata)

    @property
    def architecture(self) -> str | None:
        """``general.architecture``, if the file has it."""
        value = self.metadata.get("general.architecture")
        return None if value is None else value.value

    def __repr__(self) -> str:
        return (f"GGUFModel({len(self.tensors)} tensors, {len(self.metadata)} metadata keys, "
                f"architecture={self.architecture!r}, alignment={self.alignment})")


@dataclass(frozen=True)
class TensorReport:
    """What a write did with one tensor.

    A frozen dataclass; the parameters are its fields.

    Parameters
    ----------
    name : str
        The tensor's name in the file.
    shape : tuple of int
        The tensor's logical shape, in NumPy order.
    source : str
        What it was: a GGML type, a dtype, or ``"ternary"``.
    qtype : str
        The GGML type written.
    nbytes : int
        Bytes of the tensor's data in the file.
    relative_error : float, optional
        Set where it was re-quantized (``||new - old|| / ||old||``), None otherwise.
    note : str, optional
        Why, in words (empty when there is nothing to say).
    """

    name: str
    shape: tuple[int, ...]
    source: str
    qtype: str
    nbytes: int
    relative_error: float | None = None
    note: str = ""


class GGUFReport:
    """A written GGUF file's tensors and what happened to each (:class:`~tritnum.io.TensorReport`).

    Returned by :func:`~tritnum.io.write_gguf` and :func:`~tritnum.io.quantize_gguf`;
    ``str()`` gives one line per tensor. The parameters are kept as attributes of
    the same names.

    Parameters
    ----------
    path : str
        The file written.
    nbytes : int
        Size of the file in bytes.
    tensors : dict of str to TensorReport
        Each tensor's report, by name, in the file's order.
    """

    def __init__(self, path: str, nbytes: int, tensors: dict[str, TensorReport]) -> None:
        self.path = path
        self.nbytes = nbytes
        self.tensors = tensors

    @property
    def requantized(self) -> dict[str, float]:
        """Names of the re-quantized tensors and their relative errors."""
        return {n: r.relative_error for n, r in self.tensors.items()
                if r.relative_error is not None}

    def counts(self) -> dict[str, int]:
        """How many tensors were written as each GGML type."""
        out: dict[str, int] = {}
        for r in self.tensors.values():
            out[r.qtype] = out.get(r.qtype, 0) + 1
        return out

    def __repr__(self) -> str:
        kinds = ", ".join(f"{n} {q}" for q, n in self.counts().items())
        text = f"GGUFReport({self.path!r}, {self.nbytes} bytes, {len(self.tensors)} tensors"
        text += f": {kinds}" if kinds else ""
        if self.requantized:
            worst = max(self.requantized.values())
            text += (f"; {len(self.requantized)} re-quantized, relative error up to "
                     f"{worst:.2%}")
        return text + ")"

    def __str__(self) -> str:
        lines = [repr(self)]
        for r in self.tensors.values():
            shape = "x".join(map(str, r.shape)) or "scalar"
            change = r.qtype if r.source == r.qtype else f"{r.source} -> {r.qtype}"
            lines.append(f"  {r.name}  [{shape}]  {change}  {r.nbytes} bytes"
                         + (f"  ({r.note})" if r.note else ""))
        return "\n".join(lines)


def alignment_of(metadata: Mapping[str, GGUFValue]) -> int:
    """The alignment ``metadata`` sets (a power of two), or 32."""
    value = metadata.get(ALIGNMENT_KEY)
    if value is None:
        return DEFAULT_ALIGNMENT
    if value.type != "uint32" or value.value <= 0 or value.value & (value.value - 1):
        raise FormatError(f"{ALIGNMENT_KEY} must be a uint32 power of two, got {value}")
    return int(value.value)
