"""Byte-exact GGUF ternary encodings: TQ2_0 and TQ1_0 (llama.cpp) and I2_S (bitnet.cpp).

======  ==============================  =====================================
qtype   layout                          scale
======  ==============================  =====================================
TQ2_0   256 values -> ``qs[64]``, ``d``   fp16 ``d = max|x|`` per block (66 B)
TQ1_0   256 values -> ``qs[48]``,         fp16 ``d = max|x|`` per block (54 B)
        ``qh[4]``, ``d`` (base-3 bytes)
I2_S    128 values -> 32 bytes, the       one float32 ``max|w|`` per tensor
        tensor flattened (bitnet.cpp's    after the codes, padded to 32 bytes
        other layouts: :mod:`.i2s`)
======  ==============================  =====================================

From floats, TQ1_0/TQ2_0 round as the ``gguf`` package and llama.cpp's
``quantize_row_tq*_0_ref`` do (``round_half_away(x * (1 / d))``); I2_S encodes by
sign as bitnet.cpp's ``quantize_i2_s`` (code 1 where ``|w| < 1e-6``, compared in
double). A TernaryTensor whose scales a type cannot hold exactly is refused
(:mod:`.scales`) unless re-quantizing is asked for.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..._dispatch import call, place, resolve_device, use_device
from ..._interop import contiguous, copy_into, flat, is_cuda_array, native, origin, to_host
from ..._kernels.shared import gguf as layout_codes
from ..._validate import choice, float_array, shape_tuple
from ...errors import FormatError, InvalidTritsError, ShapeMismatchError
from ...packing import pack, unpack_native
from ...quantize import TernaryTensor, _raise_not_finite, in_memory
from ...typing import Device, Format, GGUFQType, I2SLayout
from . import i2s
from .scales import FLOAT16_OVERFLOW, ScaleLoss, overflow_reason, scale_loss

__all__ = ["QTYPES", "check_shape", "encode_ternary", "from_gguf_blocks", "ternary_loss",
           "to_gguf_blocks"]

# qtype: (values per block, bytes per block, bytes of codes per block)
QTYPES: dict[str, tuple[int, int, int]] = {
    "TQ2_0": (256, 66, 64),
    "TQ1_0": (256, 54, 52),
    "I2_S": (128, 32, 32),
}


def _qtype(qtype: object) -> str:
    return choice(qtype, "qtype", QTYPES, FormatError)


def _layout(layout: object, qtype: str) -> str:
    layout = i2s.layout(layout)
    if layout != "x86" and qtype != "I2_S":
        raise ValueError(f"layout={layout!r} is one of I2_S's layouts; {qtype} has one")
    return layout


def check_shape(shape: tuple[int, ...], qtype: GGUFQType, layout: I2SLayout = "x86") -> None:
    """ShapeMismatchError for a shape that ``qtype`` (in I2_S's ``layout``) cannot hold."""
    block = QTYPES[qtype][0]
    if qtype == "I2_S":
        i2s.check_shape(shape, layout)
    elif not shape or shape[-1] % block:
        raise ShapeMismatchError(
            f"{qtype} needs a last axis that is a multiple of 256, got shape {shape} "
            "(I2_S takes any row length: a size that is a multiple of 128)",
            expected="shape[-1] % 256 == 0", actual=shape)


def _byte_shape(shape: tuple[int, ...], qtype: str) -> tuple[int, ...]:
    if qtype == "I2_S":
        return (math.prod(shape) // 4 + 32,)
    return (*shape[:-1], shape[-1] // 256 * QTYPES[qtype][1])


def _blocks_buffer(shape: tuple[int, ...], qtype: str,
                   coded: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """The encoded tensor's bytes (uninitialized) and what the encoder writes.

    For TQ1_0/TQ2_0 that is the ``(blocks, block bytes)`` buffer itself, whole
    blocks of codes and float16 scale (a C-contiguous array: the kernels' stores
    vectorize, as they do not into a column slice; and writing the scales apart,
    once the rows have left the cache, cost 0.7 ms on 4096x4096); for I2_S the
    leading bytes, the codes, or a buffer for the codes of ``coded`` values where
    an I2_S layout pads them (:func:`_finish_blocks` copies the first ones over).
    """
    if qtype == "I2_S":
        n = math.prod(shape)
        out = np.empty(_byte_shape(shape, qtype), np.uint8)
        out[-32:] = 0  # the scale and its padding
        return out, (out[: n // 4] if coded in (-1, n) else np.empty(coded // 4, np.uint8))
    out = np.empty((math.prod(shape) // 256, QTYPES[qtype][1]), np.uint8)
    return out, out


def _finish_blocks(out: np.ndarray, scales: np.ndarray, shape: tuple[int, ...],
                   qtype: str, codes: np.ndarray | None = None) -> np.ndarray:
    """Write the scales beside the codes in ``out`` (from :func:`_blocks_buffer`)."""
    if qtype == "I2_S":
        n = math.prod(shape) // 4
        if codes is not None and codes.size != n:
            out[:n] = codes[:n]
        out[-32:-28] = scales.astype(np.float32).view(np.uint8)
        return out
    out[:, QTYPES[qtype][2]:] = scales.astype(np.float16).view(np.uint8).reshape(-1, 2)
    return out.reshape(_byte_shape(shape, qtype))


def _assemble(qs: np.ndarray, scales: np.ndarray, shape: tuple[int, ...], qtype: str) -> np.ndarray:
    out, codes = _blocks_buffer(shape, qtype)
    if qtype == "I2_S":
        codes[...] = qs[: codes.size]
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


def ternary_loss(t: TernaryTensor, qtype: GGUFQType,
                 device: Device = "auto") -> ScaleLoss | None:
    """What writing ``t`` as ``qtype`` loses (:func:`.scales.scale_loss`), or None.

    Its kernels (reading the trits, the codec's round trip of the values) run on
    ``device``, resolved with ``t``'s data.
    """
    dev = resolve_device(device, t.packed.data)

    def round_trip(values: np.ndarray) -> np.ndarray:
        blocks = _encode_floats(values, t.shape, qtype, "x86", dev)
        return from_gguf_blocks(blocks, qtype, t.shape, device=dev).reshape(-1)

    with use_device(dev):  # scale_loss reads the trits on the default device
        return scale_loss(t, qtype, round_trip)


def encode_ternary(t: TernaryTensor, qtype: GGUFQType, layout: I2SLayout = "x86",
                   requantize: bool = False,
                   device: Device = "auto") -> tuple[np.ndarray, ScaleLoss | None]:
    """``t`` as ``qtype`` bytes on the host, and what re-quantizing it lost (None: nothing).

    Codes come straight from the trits where each block has one scale; a tensor
    whose scales the type cannot hold raises FormatError (saying what would be
    lost), or with ``requantize`` is encoded from its dequantized values. The
    kernels run on ``device`` (resolved with ``t``'s data).
    """
    shape = t.shape
    check_shape(shape, qtype, layout)
    dev = resolve_device(device, t.packed.data)
    loss = ternary_loss(t, qtype, dev)
    if loss is not None and (not loss.fixable or not requantize):
        raise FormatError(loss.message())
    block = QTYPES[qtype][0]
    g = t.group_size
    if loss is not None or (qtype == "I2_S" and g is not None) or (
            qtype != "I2_S" and g is not None and g % block):
        # through the float values: re-quantized, or finer groups that hold equal scales
        return _encode_floats(t.dequantize(device=dev), shape, qtype, layout, dev), loss
    # the codes are laid out on the host, where the bytes go
    trits = to_host(unpack_native(t.packed, dev)).reshape(-1)
    codes = (trits + 1).astype(np.uint8)
    if qtype == "I2_S":
        scale = t.scales.reshape(1) if trits.any() else np.zeros(1, np.float32)
        codes = i2s.to_codec_order(codes, shape, layout, 1)
        return _assemble(layout_codes.i2s_bytes(codes), scale, shape, qtype), None
    per_block = np.broadcast_to(
        np.repeat(t.scales.reshape(-1), (g or math.prod(shape)) // block),
        (math.prod(shape) // block,))
    nonzero = trits.reshape(-1, block).any(axis=1)
    d = np.where(nonzero, per_block, np.float32(0)).astype(np.float32)
    codes = codes.reshape(-1, block)
    qs = layout_codes.tq2_bytes(codes) if qtype == "TQ2_0" else layout_codes.tq1_bytes(codes)
    return _assemble(qs, d, shape, qtype), None


def _kernel_input(x: Any) -> Any:
    """Checked float input flat where it lives, as the encoders read it: float32 or fp16 bits.

    The kernels widen float16 (as uint16) block by block (on the CPU 2.6x faster
    than converting it first).
    """
    if x.dtype == np.float16:
        return flat(x).view(np.uint16)
    with np.errstate(over="ignore"):  # beyond float32: refused by the caller, naming the value
        return flat(x, np.float32)


def _refuse_half_overflow(scales: np.ndarray, shape: tuple[int, ...], qtype: str) -> None:
    """FormatError where a block's scale (its max|x|) would be an infinite float16.

    llama.cpp and the ``gguf`` package write such a scale; nothing can read the
    block's values back from it.
    """
    big = np.abs(scales) >= FLOAT16_OVERFLOW
    if not big.any():
        return
    b = int(np.flatnonzero(big)[0])
    row, k = divmod(b, shape[-1] // 256)
    index = np.unravel_index(row, shape[:-1]) if len(shape) > 1 else ()
    at = ", ".join([*(str(int(i)) for i in index), f"{256 * k}:{256 * k + 256}"])
    first = f"is block {b}, x[{at}], with max|x| {float(scales[b]):.6g}"
    raise FormatError(f"{overflow_reason(qtype, 'block maxima', scales.size, scales[big], first)} "
                      "(llama.cpp writes it so); scale the weights down")


def _encode_floats(x: Any, shape: tuple[int, ...], qtype: str, layout: str,
                   dev: str) -> np.ndarray:
    """Encode checked float input of ``shape`` on ``dev``; the bytes on the host.

    The input stays where it lives; only I2_S's other layouts reorder it on the host.
    """
    values = _kernel_input(x)
    coded = values
    if qtype == "I2_S" and layout != "x86":  # zero pads as float32 and as float16 bits
        coded = np.ascontiguousarray(i2s.to_codec_order(to_host(values), shape, layout, 0))
    out, codes = _blocks_buffer(shape, qtype, coded.size)
    scales = to_host(call("gguf_encode", dev, coded, qtype, qs=codes))
    if not np.isfinite(scales).all():
        _raise_not_finite(x, "x", in_float32=True)
    if qtype == "I2_S":  # the TQ1_0/TQ2_0 encoders write their scales themselves
        return _finish_blocks(out, scales, shape, qtype, codes)
    _refuse_half_overflow(scales, shape, qtype)
    return out.reshape(_byte_shape(shape, qtype))


def to_gguf_blocks(x: Any, qtype: GGUFQType, *, layout: I2SLayout = "x86",
                   requantize: bool = False, device: Device = "auto") -> np.ndarray:
    """Encode floats, or a :class:`~tritnum.TernaryTensor`, as GGUF ternary blocks.

    Parameters
    ----------
    x : array_like of float, or TernaryTensor
        Values; TQ1_0/TQ2_0 need a last axis that is a multiple of 256, I2_S a size
        that is a multiple of 128 (64 for ``layout="arm"``; a row count that is a
        multiple of 4 for ``"x86-interleaved"``). A TernaryTensor whose scales are
        constant over each block is encoded from its trits directly. A Dask array,
        or a lazy TernaryTensor, is read into memory (the bytes are NumPy).
    qtype : {"TQ2_0", "TQ1_0", "I2_S"}
        The block format.
    layout : {"x86", "x86-interleaved", "arm"}
        I2_S's byte layout: the one bitnet.cpp's build writes (``i2s``; see
        :data:`~tritnum.io.I2S_LAYOUTS`).
    requantize : bool
        A TernaryTensor whose scales the format cannot hold exactly (``group_size``
        finer than TQ's 256-value blocks, per-row or per-group scales into I2_S's
        one scale) is refused unless this is True; it is then encoded from its
        dequantized values, as floats are.
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
        An unknown qtype; a TernaryTensor whose scales the format cannot hold
        without ``requantize`` (the message says how much re-quantizing would
        change), or one with a scale of 65520 or more; floats with a block maximum
        ``|x|`` of 65520 or more (TQ1_0/TQ2_0's float16 block scale would be infinite,
        as llama.cpp writes it; the message names the first block and its value).
    ShapeMismatchError
        A shape the format cannot hold.
    ValueError
        NaN or infinity in ``x``, or a value beyond float32's range (naming the
        first); a ``layout`` other than "x86" for TQ1_0/TQ2_0.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> x = np.zeros(256, np.float32); x[:3] = [2.0, -2.0, 1.0]
    >>> b = tn.io.to_gguf_blocks(x, "TQ2_0")
    >>> b.shape, b[:2], b[64:].view(np.float16)
    ((66,), array([86, 84], dtype=uint8), array([2.], dtype=float16))
    >>> t = tn.quantize(np.random.default_rng(0).standard_normal((2, 256)), group_size=64)
    >>> tn.io.to_gguf_blocks(t, "TQ2_0")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    tritnum.errors.FormatError: TQ2_0 cannot hold these scales exactly: ... relative error ...
    >>> tn.io.to_gguf_blocks(t, "TQ2_0", requantize=True).shape
    (2, 66)
    """
    qtype = _qtype(qtype)
    layout = _layout(layout, qtype)
    if isinstance(x, TernaryTensor):
        x = in_memory(x)
        return place(encode_ternary(x, qtype, layout, requantize, device)[0], x.packed._like)
    like = origin(x)
    x = float_array(x, "x")
    shape = tuple(x.shape)
    check_shape(shape, qtype, layout)
    dev = resolve_device(device, x)
    return place(_encode_floats(x, shape, qtype, layout, dev), like)


def _check_reversed(buf: Any, shape: tuple[int, ...], qtype: str) -> None:
    """Refuse a shape whose reverse is the one ``buf``'s byte shape holds (GGUF's dim order)."""
    held = tuple(getattr(buf, "shape", ()))
    if len(held) < 2 or qtype == "I2_S":
        return
    flipped = tuple(reversed(shape))
    if held == _byte_shape(shape, qtype) or flipped == shape or flipped[-1] % 256:
        return
    if held == _byte_shape(flipped, qtype):
        raise ShapeMismatchError(
            f"shape {shape} is the reverse of {flipped}, the shape these {qtype} blocks "
            f"{held} hold: GGUF stores dims reversed (ne[0], the row length, first); "
            f"give shapes in NumPy order, here {flipped}", expected=flipped, actual=shape)


def _codes_of(raw: np.ndarray, shape: tuple[int, ...], qtype: str,
              layout: str) -> tuple[np.ndarray, np.ndarray]:
    """The codes the kernels decode (I2_S: padded to whole 128-blocks) and the scales."""
    if qtype == "I2_S":
        n = math.prod(shape)
        scales = to_host(raw[n // 4: n // 4 + 4]).copy().view(np.float32)  # 4 bytes
        qs = raw[: n // 4]
        padded = i2s.codec_size(n, layout) // 4
        if padded != qs.size:  # the codes of no value (code 1), to decode whole blocks
            qs = np.concatenate([to_host(qs), np.full(padded - qs.size, 0x55, np.uint8)])
        return qs, scales
    _, size, codes = QTYPES[qtype]
    blocks = raw.reshape(-1, size)
    # qs: a strided view, which the kernels read in place
    return blocks[:, :codes], flat(contiguous(blocks[:, codes:]).view(np.float16), np.float32)


def from_gguf_blocks(buf: Any, qtype: GGUFQType, shape: tuple[int, ...], *,
                     layout: I2SLayout = "x86", ternary: bool = False, format: Format = "2bit",
                     out: np.ndarray | None = None, device: Device = "auto") -> Any:
    """Decode GGUF ternary blocks to float32 values, or to a TernaryTensor.

    Parameters
    ----------
    buf : array_like of uint8, bytes, or GPU array
        The encoded tensor, as :func:`to_gguf_blocks` or a GGUF file lays it out.
        A GPU buffer is decoded on the GPU (unless ``device`` says otherwise).
    qtype : {"TQ2_0", "TQ1_0", "I2_S"}
        The block format.
    shape : tuple of int
        The logical shape of the values, in NumPy order (rows first). GGUF files
        and the ``gguf`` reader's ``tensor.shape`` list dims reversed: a ``buf``
        shaped as the ``gguf`` reader gives it, ``(rows, bytes per row)``, refuses
        the reversed shape.
    layout : {"x86", "x86-interleaved", "arm"}
        I2_S's byte layout (``i2s``; see :data:`~tritnum.io.I2S_LAYOUTS`).
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
        Where to run; ``"auto"`` follows the default device and ``buf``. The values
        come back where ``buf`` lives (into ``out`` when given); I2_S's layouts other
        than "x86" reorder the values on the host.

    Returns
    -------
    numpy.ndarray of float32, GPU array, or TernaryTensor
        Floats equal to ``gguf.quants.dequantize`` for TQ1_0/TQ2_0.

    Raises
    ------
    FormatError
        An unknown qtype, or a buffer whose length does not match ``shape``.
    InvalidTritsError
        A 2-bit code 3, which is not a trit (TQ2_0 and I2_S).
    ShapeMismatchError
        An ``out`` whose shape is not ``shape``; a ``shape`` the format cannot hold,
        or the reverse of the shape ``buf`` holds.
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
    >>> rows = tn.io.to_gguf_blocks(np.ones((256, 512), np.float32), "TQ2_0")  # (256, 132)
    >>> tn.io.from_gguf_blocks(rows, "TQ2_0", (512, 256))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    tritnum.errors.ShapeMismatchError: shape (512, 256) is the reverse of (256, 512), ...
    """
    qtype = _qtype(qtype)
    layout = _layout(layout, qtype)
    shape = shape_tuple(shape)
    check_shape(shape, qtype, layout)
    _check_reversed(buf, shape, qtype)
    _check_out(out, shape, ternary)
    raw = np.frombuffer(buf, np.uint8) if isinstance(buf, (bytes, bytearray, memoryview)) \
        else native(buf)
    if not is_cuda_array(raw):
        raw = np.asarray(raw)
    if raw.dtype != np.uint8:
        raise FormatError(f"a {qtype} buffer must be uint8, got {raw.dtype}")
    expected = math.prod(_byte_shape(shape, qtype))
    if raw.size != expected:
        raise FormatError(
            f"a {qtype} buffer for shape {shape} holds {expected} bytes, got {raw.size}")
    dev = resolve_device(device, raw)  # first: the blocks are decoded where they are sent
    raw = flat(raw)
    if out is not None and not is_cuda_array(raw) and np.may_share_memory(out, raw):
        raw = raw.copy()  # the values would overwrite codes not yet decoded
    qs, scales = _codes_of(raw, shape, qtype, layout)
    direct = layout == "x86"  # else the kernels' element order is permuted back on the host
    if not ternary:
        values, _ = call("gguf_decode", dev, qs, scales, qtype,
                         out=None if out is None or not direct else out.reshape(-1))
        if not direct:
            values = i2s.from_codec_order(to_host(values), shape, layout)
            if out is not None:
                copy_into(out, values)
        return out if out is not None else place(values, buf, shape)
    trits, ok = call("gguf_trits", dev, qs, qtype)
    if not ok:
        raise InvalidTritsError(f"the {qtype} buffer holds 2-bit code 3, which is not a trit")
    if not direct:
        trits = i2s.from_codec_order(to_host(trits), shape, layout)
    packed = pack(place(trits, buf, shape), format, device=dev)
    scales = to_host(scales)  # a TernaryTensor keeps its scales on the host
    if qtype == "I2_S":
        return TernaryTensor(packed, scales.reshape(()), None, copy=False)
    if not shape[-1]:  # no blocks, so no scales: one (as tn.quantize gives an empty tensor)
        return TernaryTensor(packed, np.zeros((), np.float32), None, copy=False)
    return TernaryTensor(packed, scales.reshape(*shape[:-1], shape[-1] // 256), 256,
                         copy=False)
