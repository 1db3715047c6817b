"""CPU packing kernels: a general row kernel per direction, and SWAR fast paths.

The general kernels (any integer dtype, any strides, rows padded on their own)
run the shared per-unit codecs of :mod:`..codecs`. The fast paths take
C-contiguous int8 rows whose length fills whole storage units, i.e. one flat
stream, and work on machine words: 4 trits per uint32 for "2bit", 8 per uint64
for "bitplane". Work is split into tasks of ``CHUNK`` units over rows and within
long rows, run with ``prange``. Kernels return how many tasks met bad input.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..._dispatch import register
from ..._formats import Format
from .. import codecs
from ..layout import byte_rows
from ._jit import jit

CHUNK = 1 << 14  # storage units per parallel task

_encode_unit = jit(inline="always")(codecs.encode_unit)
_store_unit = jit(inline="always")(codecs.store_unit)
_read_code = jit(inline="always")(codecs.read_code)
_unit_ok = jit(inline="always")(codecs.unit_ok)
_UNIT_TRITS = codecs.UNIT_TRITS


# ---------------------------------------------------------------- general rows
@jit(parallel=True)
def _pack_rows(a, fmt, out, half, units):
    rows, n = a.shape
    per = _UNIT_TRITS[fmt]
    tasks = (units + CHUNK - 1) // CHUNK
    bad = 0
    for t in prange(rows * tasks):
        r = t // tasks
        lo = (t % tasks) * CHUNK
        src = a[r]
        dst = out[r]
        for u in range(lo, min(units, lo + CHUNK)):
            start = u * per
            value = _encode_unit(fmt, src, start, max(min(per, n - start), 0))
            if value < 0:
                bad += 1
                break
            _store_unit(fmt, dst, u, half, value)
    return bad


@jit(parallel=True)
def _unpack_rows(data, fmt, n, half, units, out):
    rows = data.shape[0]
    per = _UNIT_TRITS[fmt]
    tasks = (units + CHUNK - 1) // CHUNK
    bad = 0
    for t in prange(rows * tasks):
        r = t // tasks
        lo = (t % tasks) * CHUNK
        src = data[r]
        dst = out[r]
        for u in range(lo, min(units, lo + CHUNK)):
            if not _unit_ok(fmt, src, u, n, half):
                bad += 1
                break
            for j in range(u * per, min(u * per + per, n)):
                dst[j] = _read_code(fmt, src, j, half) - 1
    return bad


@jit(parallel=True)
def _check_rows(data, fmt, n, half, units):
    rows = data.shape[0]
    tasks = (units + CHUNK - 1) // CHUNK
    bad = 0
    for t in prange(rows * tasks):
        r = t // tasks
        lo = (t % tasks) * CHUNK
        for u in range(lo, min(units, lo + CHUNK)):
            if not _unit_ok(fmt, data[r], u, n, half):
                bad += 1
                break
    return bad


@jit(parallel=True)
def _convert_rows(src, sfmt, shalf, dst, dfmt, dhalf, dunits, n):
    """Re-encode valid packed rows unit by unit through an 8-trit scratch buffer."""
    rows = src.shape[0]
    per = _UNIT_TRITS[dfmt]
    tasks = (dunits + CHUNK - 1) // CHUNK
    for t in prange(rows * tasks):
        r = t // tasks
        lo = (t % tasks) * CHUNK
        scratch = np.empty(8, np.int8)
        for u in range(lo, min(dunits, lo + CHUNK)):
            count = max(min(per, n - u * per), 0)
            for k in range(count):
                scratch[k] = _read_code(sfmt, src[r], u * per + k, shalf) - 1
            _store_unit(dfmt, dst[r], u, dhalf, _encode_unit(dfmt, scratch, 0, count))
    return 0


# ------------------------------------------------------- fast paths (flat int8)
@jit(parallel=True)
def _pack2_flat(words, out):
    """4 trits per uint32 word (one per byte) to one 2bit byte."""
    m = out.size
    bad = 0
    for c in prange((m + CHUNK - 1) // CHUNK):
        seen = np.uint32(0)
        threes = np.uint32(0)
        for j in range(c * CHUNK, min(m, c * CHUNK + CHUNK)):
            x = words[j]
            # per-byte +1 without carries between bytes: codes 0..2 when valid
            x = ((x & np.uint32(0x7F7F7F7F)) + np.uint32(0x01010101)) ^ (x & np.uint32(0x80808080))
            seen |= x  # a code of 4 or more sets a high bit of its byte
            threes |= x & (x >> 1)  # code 3 sets the low bit
            out[j] = np.uint8((x | (x >> 6) | (x >> 12) | (x >> 18)) & np.uint32(0xFF))
        if (seen & np.uint32(0xFCFCFCFC)) | (threes & np.uint32(0x01010101)):
            bad += 1
    return bad


@jit(parallel=True)
def _unpack2_flat(data, words):
    """One 2bit byte to 4 int8 trits written as one uint32 word."""
    m = data.size
    bad = 0
    for c in prange((m + CHUNK - 1) // CHUNK):
        seen = np.uint32(0)
        for j in range(c * CHUNK, min(m, c * CHUNK + CHUNK)):
            b = np.uint32(data[j])
            x = (b | (b << 6) | (b << 12) | (b << 18)) & np.uint32(0x03030303)
            seen |= x & (x >> 1)  # code 3
            # per-byte code - 1 without borrows: 0 -> 0xFF (-1), 1 -> 0, 2 -> 1
            words[j] = ((x | np.uint32(0x80808080)) - np.uint32(0x01010101)) ^ np.uint32(0x80808080)
        if seen & np.uint32(0x01010101):
            bad += 1
    return bad


@jit(parallel=True)
def _pack3_flat(u8, out):
    """5 trits (int8 seen as uint8) to one base3 byte; /243 as a multiply-shift."""
    m = out.size
    bad = 0
    one = np.uint16(1)
    for c in prange((m + CHUNK - 1) // CHUNK):
        top = np.uint16(0)
        for j in range(c * CHUNK, min(m, c * CHUNK + CHUNK)):
            c0 = (np.uint16(u8[5 * j]) + one) & np.uint16(255)
            c1 = (np.uint16(u8[5 * j + 1]) + one) & np.uint16(255)
            c2 = (np.uint16(u8[5 * j + 2]) + one) & np.uint16(255)
            c3 = (np.uint16(u8[5 * j + 3]) + one) & np.uint16(255)
            c4 = (np.uint16(u8[5 * j + 4]) + one) & np.uint16(255)
            top = max(top, c0, c1, c2, c3, c4)
            q = np.uint32(c0 * np.uint16(81) + c1 * np.uint16(27) + c2 * np.uint16(9)
                          + c3 * np.uint16(3) + c4)
            # (q * 256 + 242) // 243 for q <= 242, exactly
            out[j] = np.uint8(((q * np.uint32(256) + np.uint32(242)) * np.uint32(17262)) >> 22)
        if top > 2:
            bad += 1
    return bad


@jit(parallel=True)
def _unpack3_flat(data, table, canonical, out):
    """One base3 byte to 5 int8 trits through a 256-entry table."""
    m = data.size
    bad = 0
    for c in prange((m + CHUNK - 1) // CHUNK):
        ok = True
        for j in range(c * CHUNK, min(m, c * CHUNK + CHUNK)):
            b = data[j]
            ok &= canonical[b]
            for k in range(5):
                out[5 * j + k] = table[b, k]
        if not ok:
            bad += 1
    return bad


@jit(inline="always")
def _gather_low_bits(flags):
    """The low bit of each byte of a uint64 whose other bits are 0, as one byte (byte i -> bit i)."""
    flags |= flags >> np.uint64(7)  # each byte: bits 0-1
    flags |= flags >> np.uint64(14)  # bits 0-3
    flags |= flags >> np.uint64(28)  # bits 0-7
    return np.uint8(flags & np.uint64(0xFF))


@jit(parallel=True)
def _packbp_rows(words, out, half):
    """8 trits per uint64 word (one per byte) to one byte of each bit plane.

    The planes are written in two passes over the chunk (it stays in cache): one
    output stream per loop vectorizes, two interleaved streams do not.
    """
    rows, m = words.shape
    tasks = (m + CHUNK - 1) // CHUNK
    low = np.uint64(0x0101010101010101)
    high7 = np.uint64(0x7F7F7F7F7F7F7F7F)
    bad = 0
    for t in prange(rows * tasks):
        r = t // tasks
        lo = (t % tasks) * CHUNK
        hi = min(m, lo + CHUNK)
        src = words[r]
        plus = out[r, :half]
        minus = out[r, half:]
        seen = np.uint64(0)
        threes = np.uint64(0)
        for i in range(lo, hi):
            x = src[i]
            # per-byte code t + 1 (no carries between bytes): as in _pack2_flat
            code = ((x & high7) + low) ^ (x & ~high7)
            seen |= code
            threes |= code & (code >> np.uint64(1))
            plus[i] = _gather_low_bits(x & ~(x >> np.uint64(7)) & low)
        for i in range(lo, hi):
            minus[i] = _gather_low_bits((src[i] >> np.uint64(7)) & low)
        if (seen & np.uint64(0xFCFCFCFCFCFCFCFC)) | (threes & low):
            bad += 1
    return bad


@jit(parallel=True)
def _unpackbp_rows(data, half, spread, words):
    """One byte of each bit plane to 8 int8 trits written as one uint64 word."""
    rows, m = words.shape
    tasks = (m + CHUNK - 1) // CHUNK
    bad = 0
    for t in prange(rows * tasks):
        r = t // tasks
        lo = (t % tasks) * CHUNK
        both = np.uint8(0)
        for i in range(lo, min(m, lo + CHUNK)):
            plus = data[r, i]
            minus = data[r, half + i]
            both |= plus & minus
            words[r, i] = spread[plus] | (spread[minus] * np.uint64(0xFF))
        if both:
            bad += 1
    return bad


def _base3_tables() -> tuple[np.ndarray, np.ndarray]:
    """Trits of every byte (DESIGN §2 digit formula) and which bytes are canonical."""
    byte = np.arange(256)
    digits = np.stack([((byte * 3**k) % 256 * 3) >> 8 for k in range(5)], axis=1)
    canonical = ((digits @ [81, 27, 9, 3, 1]) * 256 + 242) // 243 == byte
    return (digits - 1).astype(np.int8), canonical


_BASE3_TRITS, _BASE3_CANONICAL = _base3_tables()
_SPREAD = (((np.arange(256)[:, None] >> np.arange(8)) & 1) << (8 * np.arange(8))).sum(
    axis=1).astype(np.uint64)  # bit i of a byte -> byte i of a word


def _flat_ok(a: np.ndarray, fmt: Format) -> bool:
    """Whether int8 rows can take the word-parallel fast path."""
    return (a.dtype == np.int8 and a.flags.c_contiguous and a.shape[1] % fmt.per_unit == 0
            and a.ctypes.data % 8 == 0)


@register("pack", "cpu")
def pack(a: np.ndarray, fmt: Format) -> tuple[np.ndarray, bool]:
    rows, n = a.shape
    out = np.zeros(fmt.data_shape((rows, n)), fmt.dtype)
    dst, half = byte_rows(out, fmt)
    if out.size == 0:
        bad = 0
    elif _flat_ok(a, fmt) and fmt.name == "2bit":
        bad = _pack2_flat(a.reshape(-1).view(np.uint32), out.reshape(-1))
    elif _flat_ok(a, fmt) and fmt.name == "base3":
        bad = _pack3_flat(a.reshape(-1).view(np.uint8), out.reshape(-1))
    elif _flat_ok(a, fmt):
        bad = _packbp_rows(a.view(np.uint64), dst, half)
    else:
        bad = _pack_rows(a, fmt.code, dst, half, half or dst.shape[1])
    return out, bad == 0


@register("unpack", "cpu")
def unpack(data: np.ndarray, fmt: Format, n: int) -> tuple[np.ndarray, bool]:
    rows = data.shape[0]
    out = np.empty((rows, n), np.int8)
    src, half = byte_rows(data, fmt)
    flat = n % fmt.per_unit == 0
    if out.size == 0:
        bad = 0
    elif flat and fmt.name == "2bit":
        bad = _unpack2_flat(src.reshape(-1), out.reshape(-1).view(np.uint32))
    elif flat and fmt.name == "base3":
        bad = _unpack3_flat(src.reshape(-1), _BASE3_TRITS, _BASE3_CANONICAL, out.reshape(-1))
    elif flat:
        bad = _unpackbp_rows(src, half, _SPREAD, out.view(np.uint64))
    else:
        bad = _unpack_rows(src, fmt.code, n, half, half or src.shape[1], out)
    return out, bad == 0


@register("convert", "cpu")
def convert(data: np.ndarray, sfmt: Format, dfmt: Format, n: int) -> tuple[np.ndarray, bool]:
    rows = data.shape[0]
    out = np.zeros(dfmt.data_shape((rows, n)), dfmt.dtype)
    src, shalf = byte_rows(data, sfmt)
    dst, dhalf = byte_rows(out, dfmt)
    if out.size == 0:
        return out, True
    if _check_rows(src, sfmt.code, n, shalf, shalf or src.shape[1]):
        return out, False
    _convert_rows(src, sfmt.code, shalf, dst, dfmt.code, dhalf, dhalf or dst.shape[1], n)
    return out, True
