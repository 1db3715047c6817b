"""Small layers on the CPU: a call of a few rows in one compiled step.

A call of a small layer is mostly fixed cost: at 64 x 64, one row of int8
activations took 11 µs through the packed GEMV (its activation layout, the pool's
hand-off, the quantizer and the rescale as separate steps) for 4,096 products,
where NumPy's ``x @ W.T`` on the dense float matrix takes 1 µs. So a layer of at
most :data:`SMALL_WEIGHTS` weights with one scale a row (or a tensor) is prepared
once (``linear_weights``, kept with the tensor): its trits as "2bit" codes, each
row padded to whole SIMD blocks, whatever its packed format. A call of at most
:data:`SMALL_ROWS` rows is then one kernel call on the calling thread: the
activations quantized (as ``quantize_activations``) or taken as float32, laid out
as the GEMV's dot reads them (zeros in the padding), the GEMV's own scaled dot per
weight row, the bias. More rows take the packed routes' kernels on the same codes
(:mod:`.matmul`): padding is zero codes against zero activations.

The bits are the packed GEMV's: the same dot and rescale (``xscale * (scale * sum)``
for int8 activations, exact integer sums), the bias added in float32 after.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._dispatch import register
from ..._formats import FORMATS, Format
from ..shared.linear import int8_fused
from . import matmul as packed
from ._jit import jit
from ._llvm.gemv import SCALED_ROWS, scaled_dot_2bit, scaled_dot_2bit_rows
from ._llvm.gemv_target import BLOCK_BYTES
from .packing import pack, unpack
from .quantize import _absmax_quantize_rows

SMALL_WEIGHTS = 1 << 17  # at most this many weights a layer (256 x 512: 32 KiB of codes)
SMALL_ROWS = 4  # at most this many rows of activations a call take the one-call route
BLOCK = 4 * BLOCK_BYTES  # inputs a SIMD block of codes
_2BIT = FORMATS["2bit"]


def prepared(data: Any, scales: np.ndarray, fmt: Format, n: int,
             cache: dict[Any, Any]) -> tuple[Any, np.ndarray]:
    """``linear_weights`` on the CPU: a small layer's codes in rows of whole blocks.

    Made once and kept in the tensor's ``cache``; "2bit" data already so is taken as
    it is. Other layers (and layers with more than one scale a row) keep their data.
    """
    if not _small(data.shape[0], n, scales) or (fmt.name == "2bit"
                                                 and 4 * data.shape[1] == _width(n)):
        return data, scales
    codes = cache.get("cpu_small")
    if codes is None:
        trits, ok = unpack(data, fmt, n)
        if not ok:  # the caller checked the codes; a corrupt one here is a bug
            raise AssertionError("unpacking checked weights met a bad code")
        codes, _ = pack(_padded(trits, _width(n)), _2BIT)
        codes.flags.writeable = False
        cache["cpu_small"] = codes
    return codes, scales


def _width(n: int) -> int:
    """Inputs of a prepared row: ``n`` padded to whole blocks."""
    return -(-n // BLOCK) * BLOCK


def _small(out: int, n: int, scales: np.ndarray) -> bool:
    """A layer of ``out`` rows of ``n`` inputs the one-call route takes: small, a scale a row."""
    return 0 < out * n <= SMALL_WEIGHTS and scales.shape[1] == 1


def _is_prepared(w: np.ndarray, fmt: Format, n: int) -> bool:
    """``w`` holds :func:`prepared` codes, not ``fmt``'s packed data of ``n`` inputs a row.

    Told apart by shape: packed "base3" and "bitplane" rows are never as wide, and
    packed "2bit" rows as wide are the same codes.
    """
    return w.dtype == np.uint8 and w.ndim == 2 and w.shape[1] != fmt.units(n)


def _one_call(x: np.ndarray, w: np.ndarray, n: int, scales: np.ndarray) -> bool:
    """The call takes the one-call route: few rows, a small layer's codes, one scale a row."""
    return (x.shape[0] <= SMALL_ROWS and w.dtype == np.uint8 and w.ndim == 2
            and _small(w.shape[0], n, scales) and 4 * w.shape[1] == _width(n))


@jit(inline="always")  # as the dots: numba compiled each apart, then again in its caller
def _laid_out(x, n, k):
    """Rows of ``x`` (first ``n`` values) in the GEMV's block layout, ``k`` wide, zero padded.

    In each block of ``BLOCK`` inputs, position ``BLOCK_BYTES * c + m`` holds input
    ``4 * m + c`` (code ``c`` of byte ``m``), as :func:`.matmul.layout`.
    """
    xl = np.zeros((x.shape[0], k), x.dtype)
    for r in range(x.shape[0]):
        for start in range(0, n, BLOCK):
            for c in range(4):
                at = start + BLOCK_BYTES * c
                for m in range(min(BLOCK_BYTES, (n - start - c + 3) // 4)):
                    xl[r, at + m] = x[r, start + 4 * m + c]
    return xl


def _dots_kernel(int8: bool) -> Any:
    """``y[r, o] = xscale[r] * (row o's scaled dot with laid-out row r)`` (+ the bias).

    int8 ``x`` (a constant numba prunes on) takes ``SCALED_ROWS`` weight rows a dot
    sharing each load of ``x``, the last few one at a time (a row stride of 0), as the
    GEMV does; float ``x`` one row a dot.
    """
    @jit(inline="always")
    def dots(xl, xneg, xscale, codes, scales, bias, y):
        units = codes.shape[1]
        k, full, out = 4 * units, units // BLOCK_BYTES, codes.shape[0]
        o = 0
        while o < out:
            step = SCALED_ROWS if int8 and o + SCALED_ROWS <= out else 1
            ws = units if step == SCALED_ROWS else 0
            for r in range(xl.shape[0]):
                if int8:
                    sums = scaled_dot_2bit_rows(codes, o * units, ws, xl, r * k, full, 1,
                                                scales, o, ws // units, xneg, r)
                else:
                    sums = (scaled_dot_2bit(codes, o * units, units, xl, r * k, full, 1,
                                            scales, o, 1, xneg, r),)
                for i in range(step):
                    v = np.float32(xscale[r] * sums[i])
                    y[r, o + i] = v + bias[o + i] if bias.size else v
            o += step
    return dots


_int8_dots, _float_dots = _dots_kernel(True), _dots_kernel(False)


@jit()
def _int8_rows(x, codes, scales, bias, y, xscale):
    """Float32 rows quantized (as ``quantize_activations``) and multiplied, into ``y``.

    Their scales go into ``xscale``: the caller makes both (numba takes about 0.3 µs
    to return an array it made).
    """
    m, n = x.shape
    amax = np.empty(m, np.float32)
    q = np.empty((m, n), np.int8)
    # an intp 0, not a literal: numba compiled the callee again for Literal[int](0)
    _absmax_quantize_rows(x, x.view(np.uint32), amax, amax.view(np.uint32), q, np.intp(0), m)
    for r in range(m):
        xscale[r] = amax[r] / np.float32(127)
    xneg = np.empty((m, 1), np.int32)  # the dot sums code * q = (trit + 1) * q
    for r in range(m):
        total = 0
        for j in range(n):
            total += q[r, j]
        xneg[r, 0] = -total
    _int8_dots(_laid_out(q, n, 4 * codes.shape[1]), xneg, xscale, codes, scales, bias, y)
    return 0


# the float dots' xneg and xscale, sliced: made in the kernel, np.zeros and np.ones compiled
# for it (0.17 s of the first float call)
_NO_XNEG = np.zeros((SMALL_ROWS, 1), np.int32)
_UNIT = np.ones(SMALL_ROWS, np.float32)


@jit()
def _float_rows(x, codes, scales, bias, y):
    """Float32 rows times the trits, each output times its row's scale, into ``y``."""
    m, n = x.shape
    _float_dots(_laid_out(x, n, 4 * codes.shape[1]), _NO_XNEG[:m], _UNIT[:m], codes, scales,
                bias, y)
    return 0


_NO_BIAS = np.zeros(0, np.float32)


def _bias(bias: np.ndarray | None) -> np.ndarray:
    return _NO_BIAS if bias is None else bias


def _result(x: np.ndarray, codes: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """Where the rows of ``x`` times ``codes`` go: ``out``, else a new array."""
    return np.empty((x.shape[0], codes.shape[0]), np.float32) if out is None else out


def _padded(x: np.ndarray, width: int) -> np.ndarray:
    """Rows of ``x`` with zero columns up to ``width``."""
    if x.shape[1] == width:
        return x
    out = np.zeros((x.shape[0], width), x.dtype)
    out[:, :x.shape[1]] = x
    return out


@register("linear_float", "cpu")
def linear_float(x: np.ndarray, w: np.ndarray, fmt: Format, n: int, scales: np.ndarray,
                 bias: np.ndarray | None, out: np.ndarray | None = None) -> np.ndarray:
    """The CPU's ``linear_float``: the one-call route, or the packed routes (:mod:`.matmul`)."""
    if _one_call(x, w, n, scales):
        y = _result(x, w, out)
        _float_rows(x, w, scales, _bias(bias), y)
        return y
    if _is_prepared(w, fmt, n):
        x, fmt, n = _padded(x, 4 * w.shape[1]), _2BIT, 4 * w.shape[1]
    return packed.linear_float(x, w, fmt, n, scales, bias, out)


@register("linear_int8", "cpu")
def linear_int8(q: np.ndarray, xscale: np.ndarray, w: np.ndarray, fmt: Format, n: int,
                scales: np.ndarray, bias: np.ndarray | None,
                out: np.ndarray | None = None) -> np.ndarray:
    """The CPU's ``linear_int8`` (int8 ``q``, row scales ``xscale``): the packed routes."""
    if _is_prepared(w, fmt, n):
        q, fmt, n = _padded(q, 4 * w.shape[1]), _2BIT, 4 * w.shape[1]
    return packed.linear_int8(q, xscale, w, fmt, n, scales, bias, out)


@register("linear_int8_fused", "cpu")
def linear_int8_fused(x: np.ndarray, w: np.ndarray, fmt: Format, n: int, scales: np.ndarray,
                      bias: np.ndarray | None,
                      out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The CPU's ``linear_int8_fused``: the one-call route for a few float32 rows."""
    if x.dtype == np.float32 and _one_call(x, w, n, scales):
        y, xscale = _result(x, w, out), np.empty(x.shape[0], np.float32)
        _int8_rows(x, w, scales, _bias(bias), y, xscale)
        return y, xscale
    if _is_prepared(w, fmt, n):
        return _int8_fused(x, w, fmt, n, scales, bias, out)  # its linear_int8 pads x
    return packed.linear_int8_fused(x, w, fmt, n, scales, bias, out)


_int8_fused = int8_fused("cpu")
register("linear_weights", "cpu")(prepared)
