"""CUDA packing kernels: one thread per storage unit, grid-stride over rows x units.

The per-unit codecs are the same functions the CPU kernels use
(:mod:`..codecs`), compiled as device functions. Bad input sets a
one-element device flag; unpack and convert hand it back unread
(:class:`._launch.Checked`), for callers that know their input good.
"""

from __future__ import annotations

from typing import Any

from numba import cuda, int8

from ..._dispatch import register
from ..._formats import Format
from ..shared import packing as codecs
from ..shared.packing import byte_rows
from ._launch import THREADS, Checked, blocks, flag, is_set

_encode_unit = cuda.jit(device=True, inline="always")(codecs.encode_unit)
_store_unit = cuda.jit(device=True, inline="always")(codecs.store_unit)
_read_code = cuda.jit(device=True, inline="always")(codecs.read_code)
_unit_ok = cuda.jit(device=True, inline="always")(codecs.unit_ok)
_UNIT_TRITS = codecs.UNIT_TRITS


@cuda.jit
def pack_rows(a, fmt, out, half, units, bad):
    rows, n = a.shape
    per = _UNIT_TRITS[fmt]
    for i in range(cuda.grid(1), rows * units, cuda.gridsize(1)):
        r = i // units
        u = i - r * units
        start = u * per
        value = _encode_unit(fmt, a[r], start, max(min(per, n - start), 0))
        if value < 0:
            bad[0] = 1  # a flag, not a count: a count could wrap to 0
        else:
            _store_unit(fmt, out[r], u, half, value)


@cuda.jit
def unpack_rows(data, fmt, n, half, units, out, bad):
    rows = data.shape[0]
    per = _UNIT_TRITS[fmt]
    for i in range(cuda.grid(1), rows * units, cuda.gridsize(1)):
        r = i // units
        u = i - r * units
        if not _unit_ok(fmt, data[r], u, n, half):
            bad[0] = 1  # a flag, not a count: a count could wrap to 0
        else:
            for j in range(u * per, min(u * per + per, n)):
                out[r, j] = _read_code(fmt, data[r], j, half) - 1


@cuda.jit
def check_rows(data, fmt, n, half, units, bad):
    rows = data.shape[0]
    for i in range(cuda.grid(1), rows * units, cuda.gridsize(1)):
        r = i // units
        if not _unit_ok(fmt, data[r], i - r * units, n, half):
            bad[0] = 1  # a flag, not a count: a count could wrap to 0


@cuda.jit
def convert_rows(src, sfmt, shalf, dst, dfmt, dhalf, dunits, n):
    rows = src.shape[0]
    per = _UNIT_TRITS[dfmt]
    scratch = cuda.local.array(8, int8)
    for i in range(cuda.grid(1), rows * dunits, cuda.gridsize(1)):
        r = i // dunits
        u = i - r * dunits
        cnt = max(min(per, n - u * per), 0)
        for k in range(cnt):
            scratch[k] = _read_code(sfmt, src[r], u * per + k, shalf) - 1
        value = _encode_unit(dfmt, scratch, 0, cnt)
        if value >= 0:  # a corrupt source code: check_rows flags it, nothing is stored
            _store_unit(dfmt, dst[r], u, dhalf, value)


def _units(rows: Any, half: int) -> int:
    return half or rows.shape[1]


@register("pack", "cuda")
def pack(a: Any, fmt: Format) -> tuple[Any, bool]:
    rows, n = a.shape
    out = cuda.device_array(fmt.data_shape((rows, n)), fmt.dtype)
    dst, half = byte_rows(out, fmt)
    units = _units(dst, half)
    bad = flag()
    if rows * units:
        pack_rows[blocks(rows * units), THREADS](a, fmt.code, dst, half, units, bad)
    return out, not is_set(bad)


@register("unpack", "cuda")
def unpack(data: Any, fmt: Format, n: int) -> tuple[Any, Checked]:
    rows = data.shape[0]
    out = cuda.device_array((rows, n), "int8")
    src, half = byte_rows(data, fmt)
    units = _units(src, half)
    bad = flag()
    if rows * units:
        unpack_rows[blocks(rows * units), THREADS](src, fmt.code, n, half, units, out, bad)
    return out, Checked(bad)


@register("convert", "cuda")
def convert(data: Any, sfmt: Format, dfmt: Format, n: int) -> tuple[Any, Checked]:
    rows = data.shape[0]
    out = cuda.device_array(dfmt.data_shape((rows, n)), dfmt.dtype)
    src, shalf = byte_rows(data, sfmt)
    dst, dhalf = byte_rows(out, dfmt)
    sunits, dunits = _units(src, shalf), _units(dst, dhalf)
    bad = flag()
    if rows * sunits:  # checked beside the conversion (which reads any code in bounds)
        check_rows[blocks(rows * sunits), THREADS](src, sfmt.code, n, shalf, sunits, bad)
    if rows * dunits:
        convert_rows[blocks(rows * dunits), THREADS](
            src, sfmt.code, shalf, dst, dfmt.code, dhalf, dunits, n)
    return out, Checked(bad)
