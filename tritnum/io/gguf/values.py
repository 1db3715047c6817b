"""GGUF metadata values with their types: :class:`GGUFValue`, read from and written to bytes.

A GGUF key-value pair holds one of thirteen value types: eight integer types, float32,
float64, bool, a string or an array (of one item type, arrays included). Keeping
the type with the value is what lets a file be read and written back with every
value byte for byte the same, and lets a writer give llama.cpp the types it checks
(``llama.context_length`` must be a uint32, not an int32).

Strings are Python ``str``; bytes that are not UTF-8 are kept as surrogate escapes
(``bytes.decode("utf-8", "surrogateescape")``) and written back unchanged.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..._validate import choice
from ...errors import FormatError

__all__ = ["TYPE_IDS", "GGUFValue", "as_value", "pack_kvs", "read_kvs"]

# GGUF value type id -> name (gguf's GGUFValueType, in lower case)
TYPE_NAMES = {0: "uint8", 1: "int8", 2: "uint16", 3: "int16", 4: "uint32", 5: "int32",
              6: "float32", 7: "bool", 8: "string", 9: "array", 10: "uint64", 11: "int64",
              12: "float64"}
TYPE_IDS = {name: i for i, name in TYPE_NAMES.items()}
# the fixed-size types: their NumPy dtype (little-endian: GGUF files tritnum writes are)
_DTYPES = {name: np.dtype(code) for name, code in (
    ("uint8", "<u1"), ("int8", "<i1"), ("uint16", "<u2"), ("int16", "<i2"), ("uint32", "<u4"),
    ("int32", "<i4"), ("float32", "<f4"), ("bool", "?"), ("uint64", "<u8"), ("int64", "<i8"),
    ("float64", "<f8"))}
_STRING, _ARRAY = "string", "array"


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _raw(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


class GGUFValue:
    """A GGUF metadata value and its GGUF type.

    Parameters
    ----------
    type : str
        ``"uint8"``, ``"int8"``, ``"uint16"``, ``"int16"``, ``"uint32"``, ``"int32"``,
        ``"uint64"``, ``"int64"``, ``"float32"``, ``"float64"``, ``"bool"``,
        ``"string"`` or ``"array"``.
    value
        A Python int, float, bool or str for the scalar types (a float32 is rounded
        to float32 here, as the file will hold it). For ``"array"``: a sequence of
        the items, stored as a 1-D NumPy array for numbers and bools, a list of str
        for strings, and a list of ``GGUFValue`` (each an ``"array"``) for arrays of
        arrays.
    item_type : str, optional
        The type of an array's items (required for ``"array"``, as an empty array
        still has one).

    Raises
    ------
    ValueError
        An unknown type, a value out of its type's range, or ``item_type`` given for
        a scalar / missing for an array.
    TypeError
        A value of the wrong kind (a str for an integer type, ...).

    Examples
    --------
    >>> from tritnum.io import GGUFValue
    >>> GGUFValue("uint32", 4096)
    GGUFValue('uint32', 4096)
    >>> GGUFValue("array", ["a", "b"], item_type="string")
    GGUFValue('array', ['a', 'b'], item_type='string')
    >>> GGUFValue("array", [[1, 2], [3]], item_type="array").value[1]
    GGUFValue('array', array([3], dtype=int32), item_type='int32')
    >>> GGUFValue("float32", 0.1).value  # what a float32 holds
    0.10000000149011612
    """

    __slots__ = ("item_type", "type", "value")

    def __init__(self, type: str, value: Any, item_type: str | None = None) -> None:
        choice(type, "GGUF value type", TYPE_IDS)
        if (type == _ARRAY) != (item_type is not None):
            raise ValueError("item_type goes with type 'array', and only with it"
                             if type != _ARRAY else "an array needs its item_type")
        self.type = type
        self.item_type = item_type
        self.value = _array(value, item_type) if type == _ARRAY else _scalar(value, type)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GGUFValue):
            return NotImplemented
        if (self.type, self.item_type) != (other.type, other.item_type):
            return False
        if isinstance(self.value, np.ndarray):  # bit for bit (NaNs, -0.0 included)
            return self.value.tobytes() == other.value.tobytes()
        if isinstance(self.value, float):
            return struct.pack("<d", self.value) == struct.pack("<d", other.value)
        return bool(self.value == other.value)

    __hash__ = None  # type: ignore[assignment]  # mutable arrays inside

    def __repr__(self) -> str:
        shown = repr(self.value)
        if isinstance(self.value, list) and len(self.value) > 8:
            shown = f"[{', '.join(map(repr, self.value[:3]))}, ... ({len(self.value)} items)]"
        extra = "" if self.item_type is None else f", item_type={self.item_type!r}"
        return f"GGUFValue({self.type!r}, {shown}{extra})"


def _scalar(value: Any, type: str) -> Any:
    if type == _STRING:
        if isinstance(value, (bytes, bytearray)):
            return _text(bytes(value))
        if not isinstance(value, str):
            raise TypeError(f"a GGUF string must be a str, got {value!r}")
        return value
    if type == "bool":
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"a GGUF bool must be a bool, got {value!r}")
        return bool(value)
    if type.startswith("float"):
        if isinstance(value, (bool, np.bool_, str)) or not isinstance(value, (int, float,
                                                                            np.number)):
            raise TypeError(f"a GGUF {type} must be a number, got {value!r}")
        with np.errstate(over="ignore"):
            held = _DTYPES[type].type(value)
        if math.isfinite(float(value)) and not np.isfinite(held):
            raise ValueError(f"{value!r} is beyond the range of a GGUF {type}")
        return float(held)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"a GGUF {type} must be an int, got {value!r}")
    info = np.iinfo(_DTYPES[type])
    if not info.min <= int(value) <= info.max:
        raise ValueError(f"{value} is out of the range of a GGUF {type} "
                         f"({info.min}..{info.max})")
    return int(value)


def _array(items: Any, item_type: str) -> Any:
    choice(item_type, "GGUF item type", TYPE_IDS)
    if item_type == _STRING:
        return [_scalar(v, _STRING) for v in items]
    if item_type == _ARRAY:
        return [v if isinstance(v, GGUFValue) and v.type == _ARRAY else _infer_array(v)
                for v in items]
    dtype = _DTYPES[item_type]
    src = np.asarray(items)
    if src.ndim != 1 and src.size:
        raise ValueError(f"a GGUF array of {item_type} must be 1-D, got shape {src.shape}")
    src = src.reshape(-1)
    if src.dtype.kind not in "biuf" or (src.dtype.kind == "b") != (item_type == "bool"):
        if src.size:
            raise TypeError(f"a GGUF array of {item_type} cannot hold {src.dtype} items")
    if src.size and dtype.kind in "iu":
        if src.dtype.kind == "f":
            raise TypeError(f"a GGUF array of {item_type} cannot hold float items")
        info = np.iinfo(dtype)
        low, high = int(src.min()), int(src.max())
        if low < info.min or high > info.max:
            raise ValueError(f"an item of the array is out of the range of {item_type}")
    with np.errstate(over="ignore"):
        out = src.astype(dtype.newbyteorder("="))
    if dtype.kind == "f" and not np.array_equal(np.isfinite(out), np.isfinite(src)):
        raise ValueError(f"an item of the array is beyond the range of {item_type}")
    return out


def _int_type(values: Sequence[int], scalar: bool) -> str:
    """uint32 for a non-negative scalar, int32 for array items, 64 bits past their range.

    uint32 is what llama.cpp reads its counts as; int32 items are the ``gguf``
    package's choice.
    """
    low, high = min(values), max(values)
    if scalar and low >= 0:
        return "uint32" if high < 2**32 else "uint64"
    if -(2**31) <= low and high < 2**31:
        return "int32"
    return "int64" if high < 2**63 else "uint64"


def _scalar_type(value: Any) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, np.generic) and value.dtype.name in _DTYPES:
        return value.dtype.name
    if isinstance(value, int):
        return _int_type([value], scalar=True)
    if isinstance(value, float):
        return "float32"
    if isinstance(value, (str, bytes, bytearray)):
        return _STRING
    raise TypeError(f"cannot infer a GGUF type for {type(value).__name__} {value!r}; "
                    "give a tn.io.GGUFValue(type, value)")


def _infer_array(items: Any) -> GGUFValue:
    if isinstance(items, np.ndarray):
        if items.dtype.name not in _DTYPES:
            raise TypeError(f"a GGUF array cannot hold {items.dtype} items")
        return GGUFValue(_ARRAY, items, items.dtype.name)
    items = list(items)
    if not items:
        raise ValueError("an empty list has no item type: give a "
                         "tn.io.GGUFValue('array', [], item_type=...)")
    if all(isinstance(v, (list, tuple, np.ndarray, GGUFValue)) for v in items):
        return GGUFValue(_ARRAY, items, _ARRAY)
    kinds = {_scalar_type(v) for v in items}
    if kinds <= {"uint32", "uint64", "int32", "int64"} and all(
            isinstance(v, int) for v in items):
        kinds = {_int_type(items, scalar=False)}
    if len(kinds) != 1:
        raise TypeError(f"a GGUF array holds items of one type, got {sorted(kinds)}")
    return GGUFValue(_ARRAY, items, kinds.pop())


def as_value(value: Any) -> GGUFValue:
    """``value`` as a :class:`GGUFValue`: itself, or with a type inferred.

    bool -> bool; int -> uint32 (int32 if negative, 64-bit past 32 bits); float ->
    float32; str -> string; a NumPy scalar -> its own type; a list or 1-D array ->
    an array (ints as int32 items, as the ``gguf`` package writes them; lists of
    lists as arrays of arrays).
    """
    if isinstance(value, GGUFValue):
        return value
    if isinstance(value, (list, tuple, np.ndarray)):
        return _infer_array(value)
    return GGUFValue(_scalar_type(value), value)


# ------------------------------------------------------------------ bytes
def _pack_string(text: str) -> bytes:
    raw = _raw(text)
    return struct.pack("<Q", len(raw)) + raw


def _pack(v: GGUFValue) -> bytes:
    """The value's bytes after its type id: the value, or item type, count and items."""
    if v.type == _STRING:
        return _pack_string(v.value)
    if v.type != _ARRAY:
        return np.asarray(v.value, _DTYPES[v.type]).tobytes()
    head = struct.pack("<IQ", TYPE_IDS[v.item_type], len(v.value))
    if v.item_type == _STRING:
        return head + b"".join(_pack_string(s) for s in v.value)
    if v.item_type == _ARRAY:
        return head + b"".join(_pack(item) for item in v.value)
    return head + v.value.astype(_DTYPES[v.item_type]).tobytes()


def pack_kvs(metadata: Mapping[str, GGUFValue]) -> bytes:
    """The key-value section of a GGUF file (little-endian), in ``metadata``'s order."""
    return b"".join(_pack_string(key) + struct.pack("<I", TYPE_IDS[v.type]) + _pack(v)
                    for key, v in metadata.items())


class _Reader:
    """Values from a buffer whose header :func:`~.header.check_buffer` has passed."""

    def __init__(self, buf: Any, order: str, pos: int) -> None:
        self.buf, self.order, self.pos = buf, order, pos

    def unpack(self, fmt: str) -> tuple[Any, ...]:
        s = struct.Struct(self.order + fmt)
        values = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return values

    def string(self) -> str:
        (n,) = self.unpack("Q")
        self.pos += n
        return _text(bytes(self.buf[self.pos - n: self.pos]))

    def value(self, type_id: int) -> GGUFValue:
        name = TYPE_NAMES[type_id]
        if name == _STRING:
            return GGUFValue(_STRING, self.string())
        if name != _ARRAY:
            dtype = _DTYPES[name].newbyteorder(self.order)
            raw = np.frombuffer(self.buf, dtype, 1, self.pos)
            self.pos += dtype.itemsize
            return GGUFValue(name, raw[0].item())
        item_id, count = self.unpack("IQ")
        item = TYPE_NAMES[item_id]
        if item == _STRING:
            return GGUFValue(_ARRAY, [self.string() for _ in range(count)], item)
        if item == _ARRAY:
            return GGUFValue(_ARRAY, [self.value(item_id) for _ in range(count)], item)
        dtype = _DTYPES[item].newbyteorder(self.order)
        items = np.frombuffer(self.buf, dtype, count, self.pos).copy()  # not a view of the file
        self.pos += count * dtype.itemsize
        return GGUFValue(_ARRAY, items, item)


def read_kvs(buf: Any, order: str, pos: int, count: int) -> tuple[dict[str, GGUFValue], int]:
    """The ``count`` key-value pairs at ``pos`` of a checked GGUF buffer, and where they end.

    The buffer must have passed :func:`~.header.check_buffer`: every length and
    count in it is then known to fit (nothing here checks them again).
    """
    reader = _Reader(buf, order, pos)
    out = {}
    try:
        for _ in range(count):
            key = reader.string()
            (type_id,) = reader.unpack("I")
            out[key] = reader.value(type_id)
    except (struct.error, ValueError, KeyError) as exc:  # pragma: no cover - checked before
        raise FormatError(f"metadata at byte {reader.pos}: {exc}") from exc
    return out, reader.pos
