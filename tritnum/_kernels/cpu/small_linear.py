"""Small layers on the CPU: a call of a few rows in one compiled step.

A call of a small layer is mostly fixed cost: at 64 x 64, one row of int8
activations took 11 µs through the packed GEMV (its activation layout, the pool's
hand-off, the quantizer and the rescale as separate steps) for 4,096 products,
where NumPy's ``x @ W.T`` on the dense float matrix takes 1 µs, and the fixed cost
stays about 8 µs up to 1024 x 1024 (one int8 row: 512 x 512 13.4 µs, 1024 x 1024 20.9;
5.2 and 12.1 in one step). So a layer of at
most :data:`SMALL_WEIGHTS` weights with one scale a row (or a tensor) is prepared
once (``linear_weights``, kept with the tensor: :class:`SmallCodes`): its trits
as "2bit" codes, each row padded to whole SIMD blocks and ordered as the GEMV's dot
reads its activations, whatever its packed format. A call of a few rows
(:func:`_one_call`) is then one kernel call on the calling thread: the activations
quantized (as ``quantize_activations``) or taken as float32, padded with zeros (no
layout: at 256 x 256 the GEMV's activation layout took 0.19 of 1.2 µs), the GEMV's
own scaled dot per weight row, the bias; padding is zero codes against zero
activations. More rows take the packed routes (:mod:`.matmul`) on the packed rows, as
any layer's (on the codes above, the activations reordered to meet them, 8 rows of
1024 x 1024 took 113 µs against 94).

The bits are the packed GEMV's: the same dot and rescale (``xscale * (scale * sum)``
for int8 activations, exact integer sums), the bias added in float32 after.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from ..._dispatch import register
from ..._formats import FORMATS, Format
from ..shared.linear import int8_fused, into
from ..shared.packing import decode, encode
from . import _parallel, group_gemv, q8k
from . import matmul as packed
from ._jit import jit
from ._llvm.gemv import SCALED_ROWS, scaled_dot_2bit, scaled_dot_2bit_rows
from ._llvm.gemv_target import BLOCK_BYTES
from .group_gemv import GroupPanel
from .packing import convert
from .quantize import _absmax_quantize_rows

SMALL_WEIGHTS = 1 << 20  # at most this many weights a layer (1024 x 1024: 256 KiB of codes)
SMALL_PADDED = 1 << 19  # padded codes of a layer padded to more than twice (128 KiB)
# Layers of other formats than "2bit" up to this many weights keep a "2bit" copy (1 MiB);
# larger ones are transcoded for each call of a few rows (matmul._two_bit: 0.5-0.8 ms a
# call at 4096 x 4096, where a copy would cost 4 MiB a layer)
KEEP_2BIT_TRITS = 1 << 22
SMALL_ROWS = 4  # rows of activations a call that always take the one-call route
# More rows take it up to this many products (rows x padded weights), by whether the
# activations are quantized to int8. Measured, 1 thread, µs (one call / packed routes):
# float 64 x 64, 256 rows 140 / 270; 128 x 128, 256 rows 285 / 285; 256 x 256, 16 rows
# 27 / 75, 64 rows 145 / 197, 256 rows 574 / 504; int8 256 x 256, 64 rows 48 / 63, 256
# rows 191 / 227 (the packed int8 GEMM takes both threads where the one call takes one)
ONE_CALL_PRODUCTS = {True: 1 << 22, False: 1 << 20}
BLOCK = 4 * BLOCK_BYTES  # inputs a SIMD block of codes
_2BIT = FORMATS["2bit"]


class TwoBitCopy(NamedTuple):
    """A layer packed in another format, kept transcoded to "2bit" (:func:`prepared`).

    At most :data:`KEEP_2BIT_TRITS` weights: a call of a few rows on such a layer spent
    most of its time transcoding (1024 x 1024 in "bitplane", one row: 0.11 ms, against
    0.05 ms for BLAS on the dense matrix).
    """

    codes: np.ndarray


class SmallCodes(NamedTuple):
    """A small layer's weights as :func:`prepared` makes them (``linear_weights`` on the CPU).

    ``codes``: "2bit" codes of ``(out, width // 4)`` bytes, each row padded to whole SIMD
    blocks (``width`` inputs) and its trits in the order in which the GEMV's dot reads
    them (:func:`_positions`): the dot then meets the activations as they are, padded
    with zeros, where packed rows need them laid out first. ``packed``: the packed data
    they were made from as "2bit" rows (no padding; a copy made once for other formats:
    transcoded for each call, a 256 x 256 "bitplane" layer's Q8_K call took 36 µs, 18 µs
    in "2bit"), which the packed routes of more rows and the Q8_K GEMV multiply.
    """

    codes: np.ndarray
    packed: np.ndarray


def prepared(data: Any, scales: np.ndarray, fmt: Format, n: int,
             cache: dict[Any, Any]) -> tuple[Any, np.ndarray]:
    """``linear_weights`` on the CPU: a small layer's :class:`SmallCodes`, others as they are.

    Made once and kept in the tensor's ``cache``: a quarter byte a padded weight (at most
    ``SMALL_WEIGHTS`` of them, ``SMALL_PADDED`` in narrow layers), and a "2bit" copy of
    the rows of other formats.
    Larger layers keep their data; those of another format up to
    :data:`KEEP_2BIT_TRITS` weights keep a :class:`TwoBitCopy`; "2bit" codes (either)
    in scale groups that the int8 GEMV of :mod:`.group_gemv` takes are kept in a
    :class:`.group_gemv.GroupPanel`, which lays them out for that GEMV on its first call.
    """
    if not _small(data.shape[0], n, scales):
        if fmt.name != "2bit":
            data = _two_bit_copy(data, fmt, n, cache)
            if type(data) is not TwoBitCopy:
                return data, scales
        codes = data.codes if type(data) is TwoBitCopy else data
        if codes.shape[0] and group_gemv.applies(_2BIT, n, scales.shape[1]):
            groups = cache.get("cpu_groups")
            if groups is None:
                groups = cache["cpu_groups"] = group_gemv.GroupPanel(codes, scales, n)
            return groups, scales
        return data, scales
    small = cache.get("cpu_small")
    if small is None:  # in NumPy: the packing kernels took 1 s of a first call to compile
        codes, _ = decode(data, fmt, n)  # the caller checked them
        trits = codes[:, :n].astype(np.int8) - 1
        width = _width(n)
        codes = encode(np.ascontiguousarray(_padded(trits, width)[:, _positions(width)]), _2BIT)
        codes.flags.writeable = False
        if fmt.name != "2bit":
            data = convert(data, fmt, _2BIT, n)[0]
            data.flags.writeable = False
        small = cache["cpu_small"] = SmallCodes(codes, data)
    return small, scales


def _two_bit_copy(data: Any, fmt: Format, n: int, cache: dict[Any, Any]) -> Any:
    """A :class:`TwoBitCopy` of ``data``, made once; ``data`` past ``KEEP_2BIT_TRITS`` weights."""
    if data.shape[0] * n > KEEP_2BIT_TRITS:
        return data
    kept = cache.get("cpu_2bit")
    if kept is None:
        codes = convert(data, fmt, _2BIT, n)[0]  # the caller checked the codes
        codes.flags.writeable = False
        kept = cache["cpu_2bit"] = TwoBitCopy(codes)
    return kept


def _packed_rows(w: Any, fmt: Format) -> tuple[Any, Format]:
    """The packed rows (unpadded, in order) and format a route multiplies as they are.

    :func:`_unwrapped`, and the "2bit" rows a :class:`SmallCodes` or
    :class:`.group_gemv.GroupPanel` keeps.
    """
    w, fmt = _unwrapped(w, fmt)
    return (w.packed if type(w) in (SmallCodes, GroupPanel) else w), fmt


def _unwrapped(w: Any, fmt: Format) -> tuple[Any, Format]:
    """The codes and format a route multiplies: a :class:`TwoBitCopy`'s, else ``w`` as it is.

    A :class:`SmallCodes` or :class:`.group_gemv.GroupPanel` holds "2bit" codes,
    whatever the tensor's format.
    """
    if type(w) is TwoBitCopy:
        return w.codes, _2BIT
    return w, _2BIT if type(w) in (SmallCodes, GroupPanel) else fmt


def _positions(width: int) -> np.ndarray:
    """Where the dot reads the input of each code of rows of ``width`` inputs in whole blocks.

    Code ``c`` of byte ``m`` of a block meets position ``BLOCK_BYTES * c + m`` of its
    ``BLOCK`` inputs (:func:`.matmul.layout`, whose inverse this is).
    """
    order = np.empty(width, np.intp)
    order[packed.layout(width, width // 4)] = np.arange(width)
    return order


def _width(n: int) -> int:
    """Inputs of a prepared row: ``n`` padded to whole blocks."""
    return -(-n // BLOCK) * BLOCK


def _small(out: int, n: int, scales: np.ndarray) -> bool:
    """A layer of ``out`` rows of ``n`` inputs the one-call route takes: small, a scale a row.

    Narrow layers pad each row to a whole block (64 inputs to 256 on AVX-512): one padded
    to more than twice its weights holds at most :data:`SMALL_PADDED` codes (a very
    narrow one, 16,384 rows of one input, would keep 1 MiB for 16 KiB of weights and
    multiply 256 times its products on one thread).
    """
    padded = out * _width(n)
    return (0 < out * n <= SMALL_WEIGHTS and (padded <= 2 * out * n or padded <= SMALL_PADDED)
            and scales.shape[1] == 1)


def _one_call(rows: int, codes: np.ndarray, int8: bool) -> bool:
    """``rows`` of activations against prepared ``codes`` take the one-call route."""
    return rows <= _most_rows(codes, int8)


def _most_rows(codes: np.ndarray, int8: bool) -> int:
    """The most rows the one-call route takes against prepared ``codes``.

    :data:`SMALL_ROWS`, or as many as :data:`ONE_CALL_PRODUCTS` products allow.
    """
    return max(SMALL_ROWS, ONE_CALL_PRODUCTS[int8] // (4 * codes.size))


@jit(inline="always")  # as the dots: numba compiled each apart, then again in its caller
def _zero_padded(x, k):
    """Rows of ``x`` with zero columns up to ``k``: as prepared codes read them.

    A loop: the 2-D slice assignment took numba 2 s to compile.
    """
    xl = np.zeros((x.shape[0], k), x.dtype)
    for r in range(x.shape[0]):
        for j in range(x.shape[1]):
            xl[r, j] = x[r, j]
    return xl


def _dots_kernel(int8: bool) -> Any:
    """``y[r, o] = xscale[r] * (row o's scaled dot with row r of x)`` (+ the bias).

    int8 ``x`` (a constant numba prunes on) takes ``SCALED_ROWS`` weight rows a dot
    sharing each load of ``x``, the last few one at a time (a row stride of 0), as the
    GEMV does; float ``x`` one row a dot, and neither ``xscale`` nor ``xneg`` is read.
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
                                            scales, o, 1, xneg, 0),)
                for i in range(step):
                    v = np.float32(xscale[r] * sums[i] if int8 else sums[i])
                    y[r, o + i] = v + bias[o + i] if bias.size else v
            o += step
    return dots


_int8_dots, _float_dots = _dots_kernel(True), _dots_kernel(False)


@jit()
def _int8_rows(codes, scales, xscale, x, bias, y):
    """Float32 rows quantized (as ``quantize_activations``) and multiplied, into ``y``.

    Their scales go into ``xscale``: the caller makes both (numba takes about 0.3 µs
    to return an array it made); an empty ``xscale`` keeps them here. Returns how many
    rows held NaN or infinity (a NaN scale, NaN outputs).
    """
    m, n = x.shape
    if not xscale.size:
        xscale = np.empty(m, np.float32)
    amax = np.empty(m, np.float32)
    q = np.zeros((m, 4 * codes.shape[1]), np.int8)  # zeros meet the rows' padding
    # an intp 0, not a literal: numba compiled the callee again for Literal[int](0)
    _absmax_quantize_rows(x, x.view(np.uint32), amax, amax.view(np.uint32), q, np.intp(0), m)
    bad = 0
    for r in range(m):
        xscale[r] = amax[r] / np.float32(127)
        bad += not math.isfinite(xscale[r])
    xneg = np.empty((m, 1), np.int32)  # the dot sums code * q = (trit + 1) * q
    for r in range(m):
        total = 0
        for j in range(n):
            total += q[r, j]
        xneg[r, 0] = -total
    _int8_dots(q, xneg, xscale, codes, scales, bias, y)
    return bad


# the float dots' xneg and xscale, never read (made in the kernel, np.zeros and np.ones
# were compiled for it: 0.17 s of the first float call)
_NO_XNEG = np.zeros((1, 1), np.int32)
_NO_SCALES = np.zeros(0, np.float32)


@jit()
def _float_rows(codes, scales, x, bias, y):
    """Float32 rows times the trits, each output times its row's scale, into ``y``."""
    _float_dots(_zero_padded(x, 4 * codes.shape[1]), _NO_XNEG, _NO_SCALES, codes, scales, bias,
                y)
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
def linear_float(x: np.ndarray, w: Any, fmt: Format, n: int, scales: np.ndarray,
                 bias: np.ndarray | None, out: np.ndarray | None = None) -> np.ndarray:
    """The CPU's ``linear_float``: the one-call route, or the packed routes (:mod:`.matmul`)."""
    w, fmt = _unwrapped(w, fmt)
    if type(w) is SmallCodes:
        if _one_call(x.shape[0], w.codes, False):
            y = _result(x, w.codes, out)
            _float_rows(w.codes, scales, x, _bias(bias), y)
            return y
        w = w.packed  # as any layer's: 256 rows at 64 x 64 took 111 µs padded, 30 so
    elif type(w) is GroupPanel:
        w = w.packed
    return packed.linear_float(x, w, fmt, n, scales, bias, out)


@register("linear_int8", "cpu")
def linear_int8(q: np.ndarray, xscale: np.ndarray, w: Any, fmt: Format, n: int,
                scales: np.ndarray, bias: np.ndarray | None,
                out: np.ndarray | None = None) -> np.ndarray:
    """The CPU's ``linear_int8`` (int8 ``q``, row scales ``xscale``): the packed routes."""
    w, fmt = _unwrapped(w, fmt)
    if type(w) is SmallCodes:
        w = w.packed  # as any layer's (the codes in the dot's order took a reordered q)
    elif type(w) is GroupPanel:
        if q.shape[0] <= packed.GEMV_MAX_ROWS:
            return into(packed._finish(group_gemv.gemv_int8(q, xscale, w), bias), out)
        w = w.packed
    return packed.linear_int8(q, xscale, w, fmt, n, scales, bias, out)


@register("linear_int8_fused", "cpu")
def linear_int8_fused(x: np.ndarray, w: Any, fmt: Format, n: int, scales: np.ndarray,
                      bias: np.ndarray | None,
                      out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The CPU's ``linear_int8_fused``: the one-call route for a few float32 rows."""
    w, fmt = _unwrapped(w, fmt)
    if type(w) is GroupPanel:  # its GEMV after the quantizer; the GEMM on the packed data
        if x.shape[0] <= packed.GEMV_MAX_ROWS:
            return _int8_fused(x, w, fmt, n, scales, bias, out)
        w = w.packed
    if type(w) is SmallCodes:
        if x.dtype == np.float32 and _one_call(x.shape[0], w.codes, True):
            y, xscale = _result(x, w.codes, out), np.empty(x.shape[0], np.float32)
            _int8_rows(w.codes, scales, xscale, x, _bias(bias), y)
            return y, xscale
        w = w.packed  # more rows: the packed routes, as any layer's
    return packed.linear_int8_fused(x, w, fmt, n, scales, bias, out)


@register("linear_q8k", "cpu")
def linear_q8k(q: np.ndarray, d: np.ndarray, bsums: np.ndarray, w: Any, fmt: Format, n: int,
               scales: np.ndarray, bias: np.ndarray | None, fused: bool) -> np.ndarray:
    """The CPU's ``linear_q8k`` (:mod:`.q8k`) on the packed "2bit" rows kept with ``w``."""
    w, fmt = _packed_rows(w, fmt)
    return q8k.linear_q8k(q, d, bsums, w, fmt, n, scales, bias, fused)


# a route: run(x, bias, y) -> the rows holding NaN or infinity, and the most rows it takes
Route = tuple[Callable[[np.ndarray, np.ndarray, np.ndarray], int], int]


@register("linear_small", "cpu")
def small_rows(data: Any, scales: np.ndarray, fmt: Format, n: int) -> dict[str, Route]:
    """The one-call routes of weights ``data`` by activation mode (none: an empty dict).

    For a caller that keeps them with the weights (``tn.linear``'s host route,
    ``BitLinear``): nothing about the weights is looked at again on a call. A route
    ``(run, most)`` takes up to ``most`` C-contiguous float32 rows ``x``:
    ``run(x, bias, y)`` writes their ``(m, out)`` float32 result into ``y`` (a bias of
    float32 ``(out,)``, or an empty one for none) and returns how many rows held NaN or
    infinity (int8: their outputs are NaN; Q8_K: nothing was written, the caller
    raises). The routes: a :class:`SmallCodes` layer's (a few rows, float and int8), a
    layer's in scale groups whose GEMV runs alone (up to ``GEMV_MAX_ROWS`` rows, float
    and int8) and the Q8_K GEMV of one row on such weights, each one compiled call.
    Partials of the kernels over what they keep, so a call adds no Python frame
    (``BitLinear`` at 64 x 64 took 2.8 µs a call with one, 2.4 without). Layers in
    scale groups took 11-13 µs a call at 256 x 256 in groups of 32-128 through the
    packed routes, a Q8_K row 20 µs, most of it Python between their kernels.
    """
    routes: dict[str, Route] = {}
    rows, two_bit = _packed_rows(data, fmt)
    if type(data) is SmallCodes:
        codes = data.codes
        for int8, run in ((True, functools.partial(_int8_rows, codes, scales, _NO_SCALES)),
                          (False, functools.partial(_float_rows, codes, scales))):
            routes["int8" if int8 else "float"] = (run, _most_rows(codes, int8))
    if type(data) is not SmallCodes and scales.shape[1] > 1:
        floats = packed.float_rows_alone(rows, two_bit, n, scales)
        if floats is not None:
            routes["float"] = (floats, packed.GEMV_MAX_ROWS)
        int8s = group_gemv.quantized_rows_alone(data) if type(data) is GroupPanel else None
        if int8s is not None:
            routes["int8"] = (int8s, packed.GEMV_MAX_ROWS)
    row = q8k.row_alone(rows, scales) if two_bit is _2BIT and n % q8k.QK_K == 0 else None
    if row is not None:
        for mode, fused in (("q8_k", True), ("q8_k_unfused", False)):
            routes[mode] = (functools.partial(row, fused), 1)
    return routes


_int8_fused = int8_fused("cpu")
register("linear_weights", "cpu")(prepared)


@register("warm_threads", "cpu")
def warm_threads() -> None:
    """The thread pool's waits, and what the GEMVs run on 2+ threads, compiled or loaded.

    Without starting the pool: the entry points and C functions of :mod:`.gemv_native`
    run a call on this thread alone.
    """
    _parallel.warm_pool()
    packed.warm_native()
    group_gemv.warm_native()
    q8k.warm_native()
