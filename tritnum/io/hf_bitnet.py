"""Hugging Face transformers' ``bitnet`` weights: one projection's packed trits and scale.

transformers (``integrations/bitnet.py``, ``pack_weights`` / ``unpack_weights``)
stores a ternary ``(out, in)`` weight as ``uint8`` of shape ``(out / 4, in)``: the
output axis is cut into four contiguous quarters of ``R = out / 4`` rows, and bits
``2i`` and ``2i + 1`` (low bits first) of byte ``[r, c]`` hold ``W[i * R + r, c] + 1``
(-1 -> 0, 0 -> 1, +1 -> 2; code 3 is invalid). Next to it, ``weight_scale`` holds
one value in the model's dtype, whose meaning depends on the model's
``quantization_config.linear_class``:

- ``"autobitlinear"`` (microsoft/bitnet-b1.58-2B-4T): the scale g itself; the layer
  computes ``(x @ W.T + bias) * weight_scale``, so a stored bias is the real one
  divided by g;
- ``"bitlinear"`` (transformers' default): 1 / g; the layer computes
  ``(x @ W.T) / weight_scale + bias``.

A :class:`~tritnum.TernaryTensor` holds the trits and g (float32, one scale per
tensor); :func:`from_hf_bitnet` and :func:`to_hf_bitnet` convert between the two,
exactly, in both directions.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from .._validate import choice
from ..errors import FormatError, InvalidTritsError, ShapeMismatchError
from ..packing import pack
from ..quantize import TernaryTensor, quantize
from .arrays import bfloat16_to_float32, plain_array

__all__ = ["LINEAR_CLASSES", "SCALE_DTYPES", "decode_scale", "encode_scale", "from_hf_bitnet",
           "hf_trits", "real_bias", "to_hf_bitnet"]

#: ``quantization_config.linear_class`` values, as transformers' BitNetQuantConfig takes them.
LINEAR_CLASSES = ("bitlinear", "autobitlinear")
#: The dtypes a ``weight_scale`` may be written in (bfloat16 as its uint16 bits).
SCALE_DTYPES = ("bfloat16", "float16", "float32")
_PER_BYTE = 4

LinearClass = Literal["bitlinear", "autobitlinear"]
ScaleDtype = Literal["bfloat16", "float16", "float32"]


def _linear_class(linear_class: Any) -> str:
    return choice(linear_class, "linear_class (the checkpoint's "
                  "quantization_config.linear_class)", LINEAR_CLASSES, FormatError)


def _scale_values(weight_scale: Any) -> np.ndarray:
    """``weight_scale`` as float64 values (bfloat16 from its uint16 bits or a torch tensor)."""
    a, bfloat16 = plain_array(weight_scale, "weight_scale")
    if bfloat16 or a.dtype == np.uint16:
        return bfloat16_to_float32(a).astype(np.float64)
    if a.dtype.kind != "f":
        raise TypeError(f"weight_scale must be floats (float16/32/64, or bfloat16 as a torch "
                        f"tensor or its uint16 bits), got {a.dtype}")
    return a.astype(np.float64)


def decode_scale(weight_scale: Any, linear_class: str) -> np.float32:
    """The scale g (float32) a one-value ``weight_scale`` stands for under ``linear_class``.

    FormatError for more than one value, or one that is not positive and finite.
    """
    values = _scale_values(weight_scale)
    if values.size != 1:
        raise FormatError(f"weight_scale must hold one value (shape [1]), got shape "
                          f"{values.shape}: transformers' bitnet layers have one scale per "
                          "projection")
    value = float(values.reshape(-1)[0])
    if not (np.isfinite(value) and value > 0):
        raise FormatError(f"weight_scale is {value}, not a positive finite number")
    return np.float32(value if linear_class == "autobitlinear" else 1.0 / value)


def _rounded(value: float, dtype: str) -> list[np.ndarray]:
    """``value`` rounded to ``dtype`` (nearest first, then its two neighbours), as stored."""
    if dtype == "bfloat16":
        bits = int(np.array(value, np.float32).view(np.uint32))
        near = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        return [np.array([b], np.uint16) for b in (near, near - 1, near + 1) if 0 < b < 0x7F80]
    kind = np.dtype(dtype).type
    near = kind(value)
    return [np.array([v], kind) for v in (near, np.nextafter(near, kind(0)),
                                          np.nextafter(near, kind(np.inf)))
            if np.isfinite(v) and v > 0]


def encode_scale(gamma: np.float32, linear_class: str, dtype: str,
                 requantize: bool) -> np.ndarray:
    """The ``weight_scale`` (shape ``[1]``, in ``dtype``) that :func:`decode_scale` reads as g.

    FormatError when no value of ``dtype`` gives g back exactly, unless
    ``requantize`` (then the nearest one).
    """
    target = float(gamma) if linear_class == "autobitlinear" else 1.0 / float(gamma)
    stored = _rounded(target, dtype)
    for s in stored:
        if decode_scale(s, linear_class) == gamma:
            return s
    if requantize and stored:
        return stored[0]
    what = "the scale" if linear_class == "autobitlinear" else "the reciprocal of the scale"
    raise FormatError(f"{what} {target!r} of this tensor (scale {float(gamma)!r}) is not "
                      f"exact in {dtype}; quantize with scales rounded to {dtype} (a model "
                      f"trained with scale_dtype={dtype!r}), store it as float32, or pass "
                      "requantize=True to round it")


def hf_trits(packed: Any) -> np.ndarray:
    """The int8 trits ``(out, in)`` of a transformers-packed ``uint8`` ``(out / 4, in)`` buffer.

    InvalidTritsError names the first code 3 by its position in the weight.
    """
    a, _ = plain_array(packed, "packed")
    if a.dtype != np.uint8:
        raise TypeError(f"packed must be uint8 (transformers' packed bitnet weight), "
                        f"got {a.dtype}")
    if a.ndim != 2:
        raise ShapeMismatchError(f"packed must be 2-D (out / 4, in), got shape {a.shape}",
                                 expected="ndim == 2", actual=a.shape)
    shifts = np.arange(0, 2 * _PER_BYTE, 2, dtype=np.uint8)[:, None, None]
    codes = ((a[None] >> shifts) & np.uint8(3)).reshape(_PER_BYTE * a.shape[0], a.shape[1])
    bad = np.flatnonzero(codes == 3)
    if bad.size:
        row, col = divmod(int(bad[0]), a.shape[1])
        rows = a.shape[0]
        raise InvalidTritsError(f"packed[{row % rows}, {col}] bits {2 * (row // rows)}-"
                                f"{2 * (row // rows) + 1} hold code 3 (weight[{row}, {col}]), "
                                "which is no trit: codes are 0 (-1), 1 (0) and 2 (+1)")
    return (codes.view(np.int8) - np.int8(1)).astype(np.int8, copy=False)


def _hf_bytes(trits: np.ndarray) -> np.ndarray:
    """The packing of transformers' pack_weights: int8 trits ``(out, in)``, ``out % 4 == 0``."""
    rows = trits.shape[0] // _PER_BYTE
    codes = (trits + np.int8(1)).view(np.uint8).reshape(_PER_BYTE, rows, trits.shape[1])
    out = codes[0].copy()
    for i in range(1, _PER_BYTE):
        out |= codes[i] << np.uint8(2 * i)
    return out


def from_hf_bitnet(packed: Any, weight_scale: Any, *, linear_class: LinearClass,
                   bias: Any = None) -> TernaryTensor | tuple[TernaryTensor, np.ndarray]:
    """A projection of a transformers ``bitnet`` checkpoint as a :class:`~tritnum.TernaryTensor`.

    The trits are exact, the scale g is the one the checkpoint's layer multiplies by
    (``weight_scale`` for ``"autobitlinear"``, ``1 / weight_scale`` for
    ``"bitlinear"``, rounded to float32 once), and the tensor is packed in
    tritnum's ``"2bit"`` format, one scale per tensor.

    Parameters
    ----------
    packed : array_like of uint8
        The packed weight, shape ``(out / 4, in)`` (transformers' ``pack_weights``:
        four contiguous quarters of the output rows, two bits each).
    weight_scale : array_like
        The layer's one ``weight_scale`` value: float16/32/64, or bfloat16 as a torch
        tensor or as its uint16 bits (how tritnum's readers hold bfloat16).
    linear_class : {"bitlinear", "autobitlinear"}
        The checkpoint's ``quantization_config.linear_class`` (transformers'
        default is ``"bitlinear"``).
    bias : array_like, optional
        The layer's stored bias. ``"autobitlinear"`` multiplies it by
        ``weight_scale`` with the output; given, the real bias (float32) is
        returned too.

    Returns
    -------
    TernaryTensor or (TernaryTensor, numpy.ndarray)
        The weight ``(out, in)``; with ``bias``, also the bias the layer adds.

    Raises
    ------
    TypeError
        ``packed`` that is not uint8, a scale or bias that is not float.
    ShapeMismatchError
        ``packed`` that is not 2-D, a bias whose length is not ``out``.
    InvalidTritsError
        A code 3 in ``packed``; the message names the byte and the weight.
    FormatError
        An unknown ``linear_class``, a ``weight_scale`` of more than one value or
        not positive and finite.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> packed = np.array([[0b10_01_00_10, 0b00_00_01_01]], dtype=np.uint8)  # (1, 2): out = 4
    >>> w = tn.io.from_hf_bitnet(packed, np.array([0.5], np.float32),
    ...                          linear_class="autobitlinear")
    >>> tn.unpack(w.packed)  # column 0 is 10, 00, 01, 10 from the low bits up
    array([[ 1,  0],
           [-1,  0],
           [ 0, -1],
           [ 1, -1]], dtype=int8)
    >>> float(w.scales), float(tn.io.from_hf_bitnet(packed, np.array([4.0], np.float32),
    ...                                             linear_class="bitlinear").scales)
    (0.5, 0.25)
    """
    linear_class = _linear_class(linear_class)
    gamma = decode_scale(weight_scale, linear_class)
    trits = hf_trits(packed)
    tw = TernaryTensor(pack(trits, "2bit"), np.array(gamma, np.float32))
    if bias is None:
        return tw
    return tw, real_bias(bias, weight_scale, linear_class, trits.shape[0])


def _bias_values(bias: Any, out: int) -> np.ndarray:
    a, bfloat16 = plain_array(bias, "bias")
    values = bfloat16_to_float32(a) if bfloat16 else a
    if values.dtype.kind != "f":
        raise TypeError(f"bias must be floats (or bfloat16), got {a.dtype}")
    if values.shape != (out,):
        raise ShapeMismatchError(f"bias must have shape ({out},), one value per output row, "
                                 f"got {values.shape}", expected=(out,), actual=values.shape)
    return values.astype(np.float32)


def real_bias(bias: Any, weight_scale: Any, linear_class: str, out: int) -> np.ndarray:
    """The bias a layer of ``out`` rows adds, from its stored ``bias`` (float32).

    ``"autobitlinear"`` stores it divided by ``weight_scale``; ``"bitlinear"`` as is.
    """
    values = _bias_values(bias, out)
    if linear_class == "bitlinear":
        return values
    return (values.astype(np.float64) * _scale_values(weight_scale).reshape(-1)[0]).astype(
        np.float32)


def _stored_bias(bias: Any, weight_scale: np.ndarray, linear_class: str, out: int,
                 requantize: bool) -> np.ndarray:
    values = _bias_values(bias, out)
    if linear_class == "bitlinear":
        return values
    stored = (values.astype(np.float64) / _scale_values(weight_scale)[0]).astype(np.float32)
    back = real_bias(stored, weight_scale, linear_class, out)
    if not requantize and not np.array_equal(back, values):
        bad = int(np.flatnonzero(back != values)[0])
        raise FormatError(f"bias[{bad}] = {values[bad]!r}: autobitlinear stores the bias "
                          f"divided by weight_scale, and {values[bad]!r} / weight_scale is not "
                          "exact in float32; pass requantize=True to round it")
    return stored


def _one_scale(tw: TernaryTensor, requantize: bool) -> TernaryTensor:
    """``tw`` with one scale per tensor: its own, or re-quantized if ``requantize``."""
    scales = np.asarray(tw.scales)
    if tw.group_size is None or (scales.size and np.all(scales == scales.reshape(-1)[0])):
        return tw
    if not requantize:
        raise FormatError(f"the tensor has {scales.size} different scales (group_size="
                          f"{tw.group_size}); transformers' bitnet layers take one per "
                          "projection: quantize it per tensor (tn.quantize(w)), or pass "
                          "requantize=True to re-quantize its values so (the trits change)")
    return quantize(tw.dequantize())


def to_hf_bitnet(tw: TernaryTensor, *, linear_class: LinearClass,
                 scale_dtype: ScaleDtype = "bfloat16", requantize: bool = False,
                 bias: Any = None) -> tuple[np.ndarray, ...]:
    """A :class:`~tritnum.TernaryTensor` as transformers' packed ``bitnet`` weight and scale.

    The inverse of :func:`from_hf_bitnet`: the bytes are those of transformers'
    ``pack_weights``, and the stored ``weight_scale`` is the value of
    ``scale_dtype`` that reads back as the tensor's scale exactly (g for
    ``"autobitlinear"``, a reciprocal for ``"bitlinear"``).

    Parameters
    ----------
    tw : TernaryTensor
        A 2-D weight ``(out, in)`` with ``out`` a multiple of 4 and one scale (per
        tensor, or per row or group all equal).
    linear_class : {"bitlinear", "autobitlinear"}
        The ``quantization_config.linear_class`` of the checkpoint written.
    scale_dtype : {"bfloat16", "float16", "float32"}
        The model's dtype, which ``weight_scale`` is stored in (bfloat16 as its
        uint16 bits, as tritnum's writers take it).
    requantize : bool
        Round a scale (or bias) that ``scale_dtype`` cannot hold exactly, and
        re-quantize a tensor of several different scales per tensor; without it
        both raise FormatError.
    bias : array_like, optional
        The bias the layer adds; given, the bias to store is returned too (divided
        by the scale for ``"autobitlinear"``).

    Returns
    -------
    tuple of numpy.ndarray
        ``(packed, weight_scale)``: uint8 ``(out / 4, in)`` and shape ``(1,)`` in
        ``scale_dtype`` (uint16 bits for bfloat16); with ``bias``, also the bias
        to store (float32).

    Raises
    ------
    TypeError
        ``tw`` that is not a TernaryTensor.
    ShapeMismatchError
        A tensor that is not 2-D, or whose first axis is not a multiple of 4.
    FormatError
        An unknown ``linear_class`` or ``scale_dtype``; a scale, or several scales,
        that ``scale_dtype`` cannot hold exactly (without ``requantize``).

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> w = tn.TernaryTensor(tn.pack(np.array([[1, 0], [-1, 0], [0, -1], [1, -1]])),
    ...                      np.float32(0.25))
    >>> packed, scale = tn.io.to_hf_bitnet(w, linear_class="bitlinear")
    >>> [bin(b) for b in packed[0]], scale  # 1 / 0.25 = 4.0 in bfloat16 bits
    (['0b10010010', '0b101'], array([16512], dtype=uint16))
    >>> tn.io.to_hf_bitnet(tn.quantize(np.full((4, 2), 0.1)), linear_class="autobitlinear")
    Traceback (most recent call last):
    ...
    tritnum.errors.FormatError: the scale 0.10000000149011612 of this tensor (scale \
0.10000000149011612) is not exact in bfloat16; quantize with scales rounded to bfloat16 (a \
model trained with scale_dtype='bfloat16'), store it as float32, or pass requantize=True to \
round it
    """
    if not isinstance(tw, TernaryTensor):
        raise TypeError(f"to_hf_bitnet takes a tn.TernaryTensor, got {type(tw).__name__}")
    linear_class = _linear_class(linear_class)
    scale_dtype = choice(scale_dtype, "scale_dtype", SCALE_DTYPES, FormatError)
    shape = tuple(tw.shape)
    if len(shape) != 2 or shape[0] % _PER_BYTE:
        raise ShapeMismatchError(
            f"transformers' bitnet layers pack (out, in) weights with out a multiple of 4, got "
            f"shape {shape}: pad the output rows with zero rows to a multiple of 4",
            expected="(4k, in)", actual=shape)
    tw = _one_scale(tw, requantize)
    gamma = np.float32(np.asarray(tw.scales).reshape(-1)[0])
    weight_scale = encode_scale(gamma, linear_class, scale_dtype, requantize)
    packed = _hf_bytes(tw.packed.unpack())
    if bias is None:
        return packed, weight_scale
    return packed, weight_scale, _stored_bias(bias, weight_scale, linear_class, shape[0],
                                              requantize)
