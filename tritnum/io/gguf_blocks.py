"""Byte-exact GGUF ternary encodings: TQ2_0 and TQ1_0 (llama.cpp) and I2_S (bitnet.cpp).

======  ==============================  =====================================
qtype   layout                          scale
======  ==============================  =====================================
TQ2_0   256 values -> ``qs[64]``, ``d``   fp16 ``d = max|x|`` per block (66 B)
TQ1_0   256 values -> ``qs[48]``,         fp16 ``d = max|x|`` per block (54 B)
        ``qh[4]``, ``d`` (base-3 bytes)
I2_S    128 values -> 32 bytes, the       one float32 ``max|w|`` per tensor
        tensor flattened                  after the codes, padded to 32 bytes
======  ==============================  =====================================

From floats, TQ1_0/TQ2_0 round as the ``gguf`` package does
(``round_half_away(x * (1 / d))``); I2_S encodes by sign as bitnet.cpp's converter
(code 1 where ``|w| < 1e-6``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._dispatch import call, place, resolve_device
from .._interop import origin, to_host
from .._kernels.shared import gguf as layout
from .._validate import choice, shape_tuple
from ..errors import FormatError, InvalidTritsError, ShapeMismatchError
from ..packing import pack, unpack_native
from ..quantize import TernaryTensor, _float_array, _raise_not_finite
from ..typing import Device, GGUFQType

__all__ = ["QTYPES", "from_gguf_blocks", "to_gguf_blocks"]

# qtype: (values per block, bytes per block, bytes of codes per block)
QTYPES: dict[str, tuple[int, int, int]] = {
    "TQ2_0": (256, 66, 64),
    "TQ1_0": (256, 54, 52),
    "I2_S": (128, 32, 32),
}


def _qtype(qtype: object) -> str:
    return choice(qtype, "qtype", QTYPES, FormatError)


def _check_shape(shape: tuple[int, ...], qtype: str) -> None:
    block = QTYPES[qtype][0]
    if qtype == "I2_S":
        if math.prod(shape) % block:
            raise ShapeMismatchError(
                f"I2_S needs a multiple of 128 values, got shape {shape}",
                expected="size % 128 == 0", actual=shape)
    elif not shape or shape[-1] % block:
        raise ShapeMismatchError(
            f"{qtype} needs a last axis that is a multiple of 256, got shape {shape}",
            expected="shape[-1] % 256 == 0", actual=shape)


def _byte_shape(shape: tuple[int, ...], qtype: str) -> tuple[int, ...]:
    if qtype == "I2_S":
        return (math.prod(shape) // 4 + 32,)
    return (*shape[:-1], shape[-1] // 256 * QTYPES[qtype][1])


def _blocks_buffer(shape: tuple[int, ...], qtype: str) -> tuple[np.ndarray, np.ndarray]:
    """The encoded tensor's bytes (uninitialized) and what the encoder writes.

    For TQ1_0/TQ2_0 that is the ``(blocks, block bytes)`` buffer itself, whole
    blocks of codes and float16 scale (a C-contiguous array: the kernels' stores
    vectorize, as they do not into a column slice; and writing the scales apart,
    once the rows have left the cache, cost 0.7 ms on 4096x4096); for I2_S the
    leading bytes, the codes.
    """
    if qtype == "I2_S":
        out = np.empty(_byte_shape(shape, qtype), np.uint8)
        out[-32:] = 0  # the scale and its padding
        return out, out[: math.prod(shape) // 4]
    out = np.empty((math.prod(shape) // 256, QTYPES[qtype][1]), np.uint8)
    return out, out


def _finish_blocks(out: np.ndarray, scales: np.ndarray, shape: tuple[int, ...],
                   qtype: str) -> np.ndarray:
    """Write the scales beside the codes in ``out`` (from :func:`_blocks_buffer`)."""
    if qtype == "I2_S":
        out[-32:-28] = scales.astype(np.float32).view(np.uint8)
        return out
    out[:, QTYPES[qtype][2]:] = scales.astype(np.float16).view(np.uint8).reshape(-1, 2)
    return out.reshape(_byte_shape(shape, qtype))


def _assemble(qs: np.ndarray, scales: np.ndarray, shape: tuple[int, ...], qtype: str) -> np.ndarray:
    out, codes = _blocks_buffer(shape, qtype)
    if qtype == "I2_S":
        codes[...] = qs
    else:
        codes[:, : qs.shape[1]] = qs
    return _finish_blocks(out, scales, shape, qtype)


def _check_out(out: Any, shape: tuple[int, ...], ternary: bool) -> None:
    if out is None:
        return
    if ternary:
        raise TypeError("from_gguf_blocks: out= holds float values; it cannot go with "
                        "ternary=True")
    if not (isinstance(out, np.ndarray) and out.dtype == np.float32
            and out.flags.c_contiguous and out.flags.writeable):
        raise TypeError("from_gguf_blocks: out must be a writeable, C-contiguous float32 NumPy "
                        f"array, got {type(out).__name__}"
                        + (f" of {out.dtype}" if isinstance(out, np.ndarray) else ""))
    if out.shape != shape:
        raise ShapeMismatchError(f"from_gguf_blocks: out has shape {out.shape}, "
                                 f"the values have shape {shape}",
                                 expected=shape, actual=out.shape)


def _from_ternary(t: TernaryTensor, qtype: str) -> np.ndarray:
    """Codes straight from the trits, where each block has one scale; else via float."""
    shape = t.shape
    block = QTYPES[qtype][0]
    g = t.group_size
    if (qtype == "I2_S" and g is not None) or (qtype != "I2_S" and g is not None and g % block):
        return to_gguf_blocks(t.dequantize(), qtype)
    trits = to_host(unpack_native(t.packed)).reshape(-1)
    codes = (trits + 1).astype(np.uint8)
    if qtype == "I2_S":
        scale = t.scales.reshape(1) if trits.any() else np.zeros(1, np.float32)
        return _assemble(layout.i2s_bytes(codes), scale, shape, qtype)
    per_block = np.broadcast_to(
        np.repeat(t.scales.reshape(-1), (g or math.prod(shape)) // block),
        (math.prod(shape) // block,))
    nonzero = trits.reshape(-1, block).any(axis=1)
    d = np.where(nonzero, per_block, np.float32(0)).astype(np.float32)
    codes = codes.reshape(-1, block)
    qs = layout.tq2_bytes(codes) if qtype == "TQ2_0" else layout.tq1_bytes(codes)
    return _assemble(qs, d, shape, qtype)


def to_gguf_blocks(x: Any, qtype: GGUFQType, *, device: Device = "auto") -> np.ndarray:
    """Encode floats, or a :class:`~tritnum.TernaryTensor`, as GGUF ternary blocks.

    Parameters
    ----------
    x : array_like of float, or TernaryTensor
        Values; TQ1_0/TQ2_0 need a last axis that is a multiple of 256, I2_S a size
        that is a multiple of 128. A TernaryTensor whose scales are constant over each
        block is encoded from its trits directly; any other through its float values.
    qtype : {"TQ2_0", "TQ1_0", "I2_S"}
        The block format.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run; the bytes come back to the host either way.

    Returns
    -------
    numpy.ndarray of uint8
        ``(*x.shape[:-1], blocks * bytes_per_block)`` for TQ1_0/TQ2_0 (as the ``gguf``
        package lays them out), ``(size // 4 + 32,)`` for I2_S.

    Raises
    ------
    FormatError
        An unknown qtype.
    ShapeMismatchError
        A shape the format cannot hold.
    ValueError
        NaN or infinity in ``x``, or a value beyond float32's range (naming the first).

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> x = np.zeros(256, np.float32); x[:3] = [2.0, -2.0, 1.0]
    >>> b = tn.io.to_gguf_blocks(x, "TQ2_0")
    >>> b.shape, b[:2], b[64:].view(np.float16)
    ((66,), array([86, 84], dtype=uint8), array([2.], dtype=float16))
    """
    qtype = _qtype(qtype)
    if isinstance(x, TernaryTensor):
        _check_shape(x.shape, qtype)
        return place(_from_ternary(x, qtype), x.packed._like)
    like = origin(x)
    x = _float_array(x, "x")
    shape = tuple(x.shape)
    _check_shape(shape, qtype)
    dev = resolve_device(device, x)
    with np.errstate(over="ignore"):  # beyond float32: refused below, naming the value
        flat = np.ascontiguousarray(to_host(x), dtype=np.float32).reshape(-1)
    out, codes = _blocks_buffer(shape, qtype)
    scales = to_host(call("gguf_encode", dev, flat, qtype, qs=codes))
    if not np.isfinite(scales).all():
        _raise_not_finite(x, "x", in_float32=True)
    if qtype == "I2_S":  # the TQ1_0/TQ2_0 encoders write their scales themselves
        return place(_finish_blocks(out, scales, shape, qtype), like)
    return place(out.reshape(_byte_shape(shape, qtype)), like)


def from_gguf_blocks(buf: Any, qtype: GGUFQType, shape: tuple[int, ...], *, ternary: bool = False,
                     format: str = "2bit", out: np.ndarray | None = None,
                     device: str = "auto") -> Any:
    """Decode GGUF ternary blocks to float32 values, or to a TernaryTensor.

    Parameters
    ----------
    buf : array_like of uint8, or bytes
        The encoded tensor, as :func:`to_gguf_blocks` or a GGUF file lays it out.
    qtype : {"TQ2_0", "TQ1_0", "I2_S"}
        The block format.
    shape : tuple of int
        The logical shape of the values.
    ternary : bool
        Return a :class:`~tritnum.TernaryTensor` (trits packed in ``format``, one
        float32 scale per block, or per tensor for I2_S) instead of floats.
    format : {"2bit", "base3", "bitplane"}
        Packed format when ``ternary``.
    out : numpy.ndarray of float32, optional
        A C-contiguous array of ``shape`` to write the values into, and return
        (not with ``ternary``). It may share memory with ``buf`` (the codes are
        then copied first). Decoding many tensors into one reused buffer
        skips the allocation and the first touch of fresh pages, which cost
        more than the decoding itself on large tensors.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run; the values come back to the host either way.

    Returns
    -------
    numpy.ndarray of float32, or TernaryTensor
        Floats equal to ``gguf.quants.dequantize`` for TQ1_0/TQ2_0.

    Raises
    ------
    FormatError
        An unknown qtype, or a buffer whose length does not match ``shape``.
    InvalidTritsError
        A 2-bit code 3, which is not a trit (TQ2_0 and I2_S).
    ShapeMismatchError
        An ``out`` whose shape is not ``shape``.
    TypeError
        An ``out`` that is not a C-contiguous float32 NumPy array, or ``out`` with
        ``ternary``.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> x = np.zeros(256, np.float32); x[:3] = [2.0, -2.0, 1.0]
    >>> tn.io.from_gguf_blocks(tn.io.to_gguf_blocks(x, "TQ1_0"), "TQ1_0", (256,))[:4]
    array([ 2., -2.,  2.,  0.], dtype=float32)
    >>> buf = np.empty(256, np.float32)
    >>> y = tn.io.from_gguf_blocks(tn.io.to_gguf_blocks(x, "TQ2_0"), "TQ2_0", (256,), out=buf)
    >>> y is buf, buf[:3]
    (True, array([ 2., -2.,  2.], dtype=float32))
    """
    qtype = _qtype(qtype)
    shape = shape_tuple(shape)
    _check_shape(shape, qtype)
    _check_out(out, shape, ternary)
    raw = np.frombuffer(buf, np.uint8) if isinstance(buf, (bytes, bytearray, memoryview)) \
        else to_host(buf)
    if raw.dtype != np.uint8:
        raise FormatError(f"a {qtype} buffer must be uint8, got {raw.dtype}")
    raw = raw.reshape(-1)
    expected = math.prod(_byte_shape(shape, qtype))
    if raw.size != expected:
        raise FormatError(
            f"a {qtype} buffer for shape {shape} holds {expected} bytes, got {raw.size}")
    if out is not None and np.may_share_memory(out, raw):
        raw = raw.copy()  # the values would overwrite codes not yet decoded
    if qtype == "I2_S":
        n = math.prod(shape)
        qs = raw[: n // 4]
        scales = raw[n // 4: n // 4 + 4].copy().view(np.float32)
    else:
        _, size, codes = QTYPES[qtype]
        blocks = raw.reshape(-1, size)
        qs = blocks[:, :codes]  # a strided view: the CPU kernel reads it in place
        scales = blocks[:, codes:].copy().view(np.float16).astype(np.float32).reshape(-1)
    dev = resolve_device(device, raw)
    if not ternary:
        values, _ = call("gguf_decode", dev, qs, scales, qtype,
                         out=None if out is None else out.reshape(-1))
        return out if out is not None else place(values, buf, shape)
    trits, ok = call("gguf_trits", dev, qs, qtype)
    if not ok:
        raise InvalidTritsError(f"the {qtype} buffer holds 2-bit code 3, which is not a trit")
    packed = pack(place(trits, buf, shape), format)
    if qtype == "I2_S":
        return TernaryTensor(packed, scales.reshape(()), None, copy=False)
    return TernaryTensor(packed, scales.reshape(*shape[:-1], shape[-1] // 256), 256,
                         copy=False)
