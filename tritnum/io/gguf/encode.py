"""One tensor to the bytes of a GGML type, for the GGUF writers; nothing lost silently.

Which types a value may become:

==================  =====================================================================
value               qtypes
==================  =====================================================================
TernaryTensor       TQ2_0, TQ1_0, I2_S (its scales must fit, :mod:`.scales`);
                    F32, F16, BF16 (its dequantized values)
float array         F32, F16, BF16; TQ2_0, TQ1_0, I2_S (quantized as llama.cpp does)
integer array       its own type, I8, I16, I32 or I64
GGUFBlocks          its own type (the bytes unchanged); a float or ternary type from its
                    dequantized values
==================  =====================================================================

float64 is written as F32, never F64 (llama.cpp loads F64 tensors and then aborts
on them). A conversion that would turn a finite value infinite is refused with
FormatError: float64 beyond float32's range, a value past float16's range into F16,
a block maximum of 65520 or more into a TQ type's float16 scale (refused by
:func:`~.blocks.to_gguf_blocks` itself).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._validate import choice
from ...errors import FormatError, ShapeMismatchError
from ...quantize import TernaryTensor, in_memory
from ..arrays import bfloat16_to_float32
from .blocks import QTYPES, check_shape, encode_ternary, ternary_loss, to_gguf_blocks
from .container import Entry, ggml_type_id, ggml_type_name, tensor_nbytes
from .model import GGUFBlocks

__all__ = ["FLOATS", "WRITABLE", "Plan", "bfloat16_bits", "check_value", "default_qtype",
           "float_bytes", "plan"]

TERNARY = tuple(QTYPES)
FLOATS = ("F32", "F16", "BF16")
_INTS = {"I8": np.int8, "I16": np.int16, "I32": np.int32, "I64": np.int64}
WRITABLE = (*TERNARY, *FLOATS, *_INTS)
_FLOAT_DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2")}
_DEFAULTS = {"float16": "F16", "float32": "F32", "float64": "F32", "int8": "I8",
             "int16": "I16", "int32": "I32", "int64": "I64"}


def check_value(name: Any, value: Any) -> None:
    """TypeError unless ``name`` is a str and ``value`` something GGUF can hold."""
    if not isinstance(name, str):
        raise TypeError(f"write_gguf: tensor names must be str, got {name!r}")
    if isinstance(value, (TernaryTensor, GGUFBlocks)):
        return
    dtype = getattr(value, "dtype", None)
    if not isinstance(value, np.ndarray) or dtype.newbyteorder("=").name not in _DEFAULTS:
        raise TypeError(
            f"write_gguf: tensor {name!r} must be a TernaryTensor, GGUFBlocks or a NumPy "
            f"array of {', '.join(_DEFAULTS)}, got "
            f"{type(value).__name__ if dtype is None else dtype}")


def default_qtype(value: Any) -> str:
    """The type a value is written as when none is asked for."""
    if isinstance(value, TernaryTensor):
        return "TQ2_0"
    if isinstance(value, GGUFBlocks):
        return value.qtype
    return _DEFAULTS[value.dtype.newbyteorder("=").name]


def source_of(value: Any) -> str:
    """What a value is, in a report's words."""
    if isinstance(value, TernaryTensor):
        g = value.group_size
        return "ternary" if g is None else f"ternary (group_size={g})"
    if isinstance(value, GGUFBlocks):
        return value.qtype
    return value.dtype.newbyteorder("=").name


def bfloat16_bits(x: np.ndarray) -> np.ndarray:
    """float32 values as bfloat16 bits (uint16), rounded to nearest even as ggml does.

    As the ``gguf`` package: NaNs stay NaN (quiet).
    """
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
    return np.where(nan, (bits >> 16) | 0x40, rounded).astype("<u2")


def float_bytes(x: np.ndarray, qtype: str) -> np.ndarray:
    """Float values as an F32, F16 or BF16 array; FormatError if a finite one became infinite."""
    with np.errstate(over="ignore", invalid="ignore"):
        if qtype == "BF16":
            out = bfloat16_bits(np.asarray(x, np.float32))
            held = bfloat16_to_float32(out)
        else:
            out = held = np.asarray(x, _FLOAT_DTYPES[qtype])
        lost = np.isfinite(np.asarray(x)) & ~np.isfinite(held)
    if lost.any():
        i = np.unravel_index(np.flatnonzero(lost)[0], lost.shape)
        target = {"F16": "float16", "F32": "float32"}.get(qtype, "bfloat16")
        raise FormatError(f"{int(lost.sum())} values are beyond {target}'s range (the first "
                          f"at {tuple(int(k) for k in i)}: {np.asarray(x)[i]}); {qtype} "
                          "would store them as infinity")
    return out


@dataclass
class Plan(Entry):
    """How one tensor is written (its bytes computed on demand), and what to report."""

    relative_error: float | None = None
    note: str = ""

    @property
    def qtype(self) -> str:
        """The GGML type written."""
        return ggml_type_name(self.type_id)


def _refuse(name: str, value: Any, qtype: str) -> None:
    raise FormatError(f"tensor {name!r}: a {source_of(value)} tensor cannot be written as "
                      f"{qtype}; it takes "
                      + ", ".join(q for q in WRITABLE if _allowed(value, q))
                      + ("" if not isinstance(value, GGUFBlocks) else f" or {value.qtype}"))


def _allowed(value: Any, qtype: str) -> bool:
    if isinstance(value, np.ndarray) and value.dtype.kind in "iu":
        return qtype == default_qtype(value)
    return qtype in (*TERNARY, *FLOATS)


def _floats(value: Any) -> np.ndarray:
    """The float values of a float array, TernaryTensor or GGUFBlocks."""
    if isinstance(value, np.ndarray):
        return value
    return np.asarray(value.dequantize())


def plan(name: str, value: Any, qtype: str, layout: str, requantize: bool) -> Plan:
    """Check that ``value`` can be written as ``qtype``, and how (nothing encoded yet).

    Raises FormatError for a qtype the value cannot take or a TernaryTensor whose
    scales it cannot hold (without ``requantize``), ShapeMismatchError for a
    shape it cannot hold.
    """
    shape = tuple(value.shape)
    if 0 in shape[:-1]:  # ne[1..3] in GGUF's reversed order
        raise FormatError(f"tensor {name!r}: shape {shape} is empty along an axis other than "
                          "the last, which GGUF readers cannot take (llama.cpp divides by "
                          "each dimension but the row length); an empty tensor may have a "
                          "last axis of 0 only")
    if isinstance(value, GGUFBlocks) and qtype == value.qtype:
        return Plan(name, shape, ggml_type_id(qtype), value.nbytes, lambda: [value.data])
    qtype = choice(qtype, f"tensor {name!r}: qtype", WRITABLE, FormatError)
    if not _allowed(value, qtype):
        _refuse(name, value, qtype)
    type_id = ggml_type_id(qtype)
    nbytes = tensor_nbytes(shape, type_id)
    if qtype in _INTS:
        return Plan(name, shape, type_id, nbytes,
                    lambda: [np.ascontiguousarray(value, value.dtype.newbyteorder("<"))])
    if qtype in FLOATS:
        return Plan(name, shape, type_id, nbytes, lambda: [float_bytes(_floats(value), qtype)])
    try:
        check_shape(shape, qtype, layout)
    except ShapeMismatchError as exc:
        raise ShapeMismatchError(f"tensor {name!r}: {exc}", expected=exc.expected,
                                 actual=exc.actual) from None
    if not isinstance(value, TernaryTensor):
        return Plan(name, shape, type_id, nbytes, lambda: [_named(
            name, lambda: to_gguf_blocks(_floats(value), qtype, layout=layout))])
    value = in_memory(value)  # a lazy one is read once: checked here, written later
    loss = ternary_loss(value, qtype)
    if loss is not None and (not loss.fixable or not requantize):
        raise FormatError(f"tensor {name!r}: {loss.message()}")
    note = "" if loss is None else (f"re-quantized: {loss.reason}; relative error "
                                    f"{loss.relative_error:.2%}")
    return Plan(name, shape, type_id, nbytes,
                lambda: [encode_ternary(value, qtype, layout, requantize)[0]],
                None if loss is None else loss.relative_error, note)


def _named(name: str, encode: Callable[[], np.ndarray]) -> np.ndarray:
    """``encode()``, its ValueErrors prefixed with the tensor's name."""
    try:
        return encode()
    except FormatError as exc:
        raise FormatError(f"tensor {name!r}: {exc}") from exc
    except ValueError as exc:
        raise ValueError(f"tensor {name!r}: {exc}") from exc
