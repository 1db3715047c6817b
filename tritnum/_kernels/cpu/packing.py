"""CPU packing kernels: SIMD blocks and word-parallel (SWAR) rows, the shared codecs for tails.

Pack kernels take int8 rows with a unit stride along the last axis (other
integer dtypes and strides are first narrowed into such a copy). The whole
storage units of each row go in SIMD blocks (:mod:`._llvm.packing`, with the
vector width and instructions of the CPU's level in :mod:`tritnum._isa`) where
there is one ("2bit" both ways, "base3" packing, "bitplane" packing), else and
after the last block machine words at a time (4 trits per uint32 for "2bit",
5 per uint64 for "base3", 8 per uint64 for "bitplane"), read and written with
unaligned loads so that rows may start at any byte; the last, padded unit of a
row goes through the per-unit codecs of :mod:`..codecs`. Format conversion
unpacks and re-packs a few rows at a time. Work is split into tasks of
``CHUNK`` units over rows and within long rows; each kernel runs a range of
tasks and :mod:`._parallel` spreads them over threads. Kernels return how many
tasks met bad input.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..._dispatch import register
from ..._formats import Format
from ..shared import packing as codecs
from ..shared.packing import byte_rows
from ._jit import jit
from ._llvm.packing import (
    BASE3_UNITS,
    BLOCK_TRITS,
    pack_2bit,
    pack_base3,
    pack_planes,
    unpack_2bit,
    unpack_base3,
    unpack_planes,
)
from ._llvm.unaligned import load_u32, load_u64, store_u32, store_u64
from ._parallel import run

# Internal API: the private names other modules use (tests/test_architecture_seams.py):
# cpu/quantize.py (quantize-and-pack per row).
_INTERNAL_API = ("_pack2", "_pack3", "_packbp")

CHUNK = 1 << 14  # storage units per parallel task (a multiple of 8)
# int8 trits held at once while converting formats: 4096 x 4096 to "2bit", ms on 1 / 2 threads
# ("bitplane", "base3"): 4 MiB 2.2 / 1.2-1.5, 0.73-0.78 / 1.4-1.6; 2 MiB 0.54 / 0.50-0.67,
# 0.72-0.78 / 0.59-0.61; 1 MiB 0.57 / 1.2-1.35, 0.75-0.87 / 1.0-1.1 (a hand-off per block)
CONVERT_BLOCK_BYTES = 1 << 21
_BLOCK_UNITS = BLOCK_TRITS // 4  # 2bit bytes per SIMD block

_encode_unit = jit(inline="always")(codecs.encode_unit)
_store_unit = jit(inline="always")(codecs.store_unit)
_read_code = jit(inline="always")(codecs.read_code)
_unit_ok = jit(inline="always")(codecs.unit_ok)
_UNIT_TRITS = codecs.UNIT_TRITS


@jit(inline="always")
def _task(t, units):
    """Row and unit range ``[lo, hi)`` of task t, tasks being ``CHUNK`` units of each row."""
    tasks = (units + CHUNK - 1) // CHUNK
    lo = (t % tasks) * CHUNK
    return t // tasks, lo, min(units, lo + CHUNK)


@jit(inline="always")
def _encode_tail(fmt, src, dst, u0, units, n, half):
    """Encode units ``u0..units`` of a row (its end, or all of a short one) with the codecs."""
    per = _UNIT_TRITS[fmt]
    for u in range(u0, units):
        value = _encode_unit(fmt, src, u * per, max(min(per, n - u * per), 0))
        if value < 0:
            return False
        _store_unit(fmt, dst, u, half, value)
    return True


@jit(inline="always")
def _decode_tail(fmt, src, dst, u0, units, n, half):
    """Check and decode units ``u0..units`` of a packed row with the codecs."""
    per = _UNIT_TRITS[fmt]
    for u in range(u0, units):
        if not _unit_ok(fmt, src, u, n, half):
            return False
        for j in range(u * per, min(u * per + per, n)):
            dst[j] = _read_code(fmt, src, j, half) - 1
    return True


@jit()
def _narrow(a, out, t0, t1):
    """Copy trits of any integer dtype and strides into int8 rows, checking them."""
    n = a.shape[1]
    bad = 0
    for r in range(t0, t1):
        for j in range(n):
            v = a[r, j]
            if v < -1 or v > 1:
                bad += 1
                break
            out[r, j] = v
    return bad


# ------------------------------------------------------------------------ pack
@jit()
def _pack2(a, out, half, t0, t1):
    """SIMD blocks of :mod:`._llvm.packing`, then 4 trits (one uint32 load) to one byte."""
    n = a.shape[1]
    units = out.shape[1]
    full = n // 4
    bad = 0
    for t in range(t0, t1):
        r, lo, hi = _task(t, units)
        src = a[r]
        dst = out[r]
        stop = min(hi, full)
        blocks = max(stop - lo, 0) // _BLOCK_UNITS  # reads trits 4 lo .. 4 stop <= n
        top = pack_2bit(src, 4 * lo, dst, lo, blocks)
        seen = np.uint32(0)
        threes = np.uint32(0)
        for j in range(lo + blocks * _BLOCK_UNITS, stop):
            x = load_u32(src, 4 * j)
            # per-byte +1 without carries between bytes: codes 0..2 when valid
            x = ((x & np.uint32(0x7F7F7F7F)) + np.uint32(0x01010101)) ^ (x & np.uint32(0x80808080))
            seen |= x  # a code of 4 or more sets a high bit of its byte
            threes |= x & (x >> 1)  # code 3 sets the low bit
            dst[j] = np.uint8((x | (x >> 6) | (x >> 12) | (x >> 18)) & np.uint32(0xFF))
        ok = ((seen & np.uint32(0xFCFCFCFC)) | (threes & np.uint32(0x01010101))) == 0
        ok &= top <= 2
        if lo <= full < hi:
            ok &= _encode_tail(0, src, dst, full, units, n, half)
        if not ok:
            bad += 1
    return bad


@jit()
def _pack3(a, out, half, t0, t1):
    """SIMD blocks of :mod:`._llvm.packing`, then 5 trits (one uint64 load) to one byte.

    / 243 as a multiply-shift.
    """
    n = a.shape[1]
    units = out.shape[1]
    wide = max(n - 3, 0) // 5  # units whose 8-byte load stays within the row
    full = n // 5  # units whose trits are all in the row
    bad = 0
    for t in range(t0, t1):
        r, lo, hi = _task(t, units)
        src = a[r]
        dst = out[r]
        blocks = max(min(hi, full) - lo, 0) // BASE3_UNITS  # reads trits 5 lo .. 5 full <= n
        top = pack_base3(src, 5 * lo, dst, lo, blocks)
        seen = np.uint64(0)
        threes = np.uint64(0)
        for j in range(lo + blocks * BASE3_UNITS, min(hi, wide)):
            x = load_u64(src, 5 * j)  # bytes 0-4: trits of unit j; 5-7: ignored
            # per-byte +1 without carries between bytes: codes 0..2 when valid (as _pack2)
            x = (((x & np.uint64(0x7F7F7F7F7F7F7F7F)) + np.uint64(0x0101010101010101))
                 ^ (x & np.uint64(0x8080808080808080)))
            seen |= x
            threes |= x & (x >> np.uint64(1))
            # byte 4 of the product is 81 c0 + 27 c1 + 9 c2 + 3 c3 + c4 (<= 242), and the
            # partial sums below it stay under 256: no carries into it
            q = np.uint32((x * np.uint64(0x511B090301)) >> np.uint64(32)) & np.uint32(255)
            # (q * 256 + 242) // 243 for q <= 242, exactly
            dst[j] = np.uint8(((q * np.uint32(256) + np.uint32(242)) * np.uint32(17262)) >> 22)
        ok = ((seen & np.uint64(0xFCFCFCFCFC)) | (threes & np.uint64(0x0101010101))) == 0
        ok &= top <= 2
        ok &= _encode_tail(1, src, dst, max(lo, wide), hi, n, half)
        if not ok:
            bad += 1
    return bad


@jit()
def _packbp(a, out, half, t0, t1):
    """64 trits (one SIMD block of :mod:`._llvm.packing`) to a word of each bit plane."""
    n = a.shape[1]
    full = 8 * (n // 64)  # bytes per plane covered by whole words
    bad = 0
    for t in range(t0, t1):
        r, lo, hi = _task(t, half)  # lo, hi: multiples of 8 (CHUNK is)
        src = a[r]
        stop = min(hi, full)
        words = max(stop - lo, 0) // 8  # reads trits 8 lo .. 8 stop <= n
        ok = pack_planes(src, 8 * lo, out[r], lo, half + lo, words) <= 2
        if lo <= full < hi:
            ok &= _encode_tail(2, src, out[r], full, half, n, half)
        if not ok:
            bad += 1
    return bad


# ---------------------------------------------------------------------- unpack
@jit()
def _unpack2(data, half, out, t0, t1):
    """SIMD blocks of :mod:`._llvm.packing`, then one byte to 4 trits written as one uint32."""
    n = out.shape[1]
    units = data.shape[1]
    full = n // 4
    bad = 0
    for t in range(t0, t1):
        r, lo, hi = _task(t, units)
        src = data[r]
        dst = out[r]
        stop = min(hi, full)
        blocks = max(stop - lo, 0) // _BLOCK_UNITS  # writes trits 4 lo .. 4 stop <= n
        flags = unpack_2bit(src, lo, dst, 4 * lo, blocks)
        threes = np.uint32(0)
        for j in range(lo + blocks * _BLOCK_UNITS, stop):
            b = np.uint32(src[j])
            x = (b | (b << 6) | (b << 12) | (b << 18)) & np.uint32(0x03030303)
            threes |= x & (x >> 1)
            # per-byte code - 1 without borrows: 0 -> 0xFF (-1), 1 -> 0, 2 -> 1
            store_u32(dst, 4 * j, ((x | np.uint32(0x80808080)) - np.uint32(0x01010101))
                      ^ np.uint32(0x80808080))
        ok = (threes & np.uint32(0x01010101)) == 0 and (flags & np.uint8(1)) == 0
        if lo <= full < hi:
            ok &= _decode_tail(0, src, dst, full, units, n, half)
        if not ok:
            bad += 1
    return bad


@jit()
def _unpack3(data, half, table, out, t0, t1):
    """SIMD blocks of :mod:`._llvm.packing`, then one base3 byte to 5 int8 trits by a table.

    The table has a word per byte value: the 5 trits in bytes 0-4 and, in byte 5,
    1 for a byte that is not a canonical encoding. It is stored whole (8 bytes at
    5 j) and the next unit's store overwrites the 3 extra bytes; so only before a
    task's last unit, whose neighbour may belong to another thread, and only 8
    bytes before the row's end.
    """
    n = out.shape[1]
    units = data.shape[1]
    full = n // 5
    wide = max(0, (n - 3) // 5)  # units j with 5 j + 8 <= n
    bad = 0
    for t in range(t0, t1):
        r, lo, hi = _task(t, units)
        src = data[r]
        dst = out[r]
        blocks = max(min(hi, full) - lo, 0) // BASE3_UNITS  # writes trits 5 lo .. 5 full <= n
        ok = unpack_base3(src, lo, dst, 5 * lo, blocks) == 0
        j0 = lo + blocks * BASE3_UNITS
        seen = np.uint64(0)
        stop = max(j0, min(hi - 1, wide))
        for j in range(j0, stop):
            word = table[src[j]]
            seen |= word
            store_u64(dst, 5 * j, word)
        for j in range(stop, min(hi, full)):
            word = table[src[j]]
            seen |= word
            for k in range(5):
                dst[5 * j + k] = np.int8(np.uint8((word >> np.uint64(8 * k)) & np.uint64(0xFF)))
        ok &= (seen >> np.uint64(40)) == 0
        if lo <= full < hi:
            ok &= _decode_tail(1, src, dst, full, units, n, half)
        if not ok:
            bad += 1
    return bad


@jit()
def _unpackbp(data, half, out, t0, t1):
    """A word of each bit plane to 64 int8 trits (:mod:`._llvm.packing`)."""
    n = out.shape[1]
    full = 8 * (n // 64)  # bytes per plane covered by whole words
    bad = 0
    for t in range(t0, t1):
        r, lo, hi = _task(t, half)  # lo, hi: multiples of 8 (CHUNK is)
        src = data[r]
        dst = out[r]
        ok = unpack_planes(src, lo, half + lo, dst, 8 * lo, max(min(hi, full) - lo, 0) // 8) == 0
        if lo <= full < hi:
            ok &= _decode_tail(2, src, dst, full, half, n, half)
        if not ok:
            bad += 1
    return bad


def _base3_words() -> np.ndarray:
    """The table of :func:`_unpack3`, a word per byte value.

    The byte's trits (the digit formula of docs/formats.md) as int8 in bytes 0-4, byte 5 set
    when the byte is not a canonical encoding.
    """
    byte = np.arange(256)
    digits = np.stack([((byte * 3**k) % 256 * 3) >> 8 for k in range(5)], axis=1)
    canonical = ((digits @ [81, 27, 9, 3, 1]) * 256 + 242) // 243 == byte
    trits = (digits - 1).astype(np.int8).view(np.uint8).astype(np.uint64)
    return ((trits << (8 * np.arange(5, dtype=np.uint64))).sum(axis=1, dtype=np.uint64)
            | (~canonical).astype(np.uint64) << np.uint64(40))


_BASE3_WORDS = _base3_words()


ALIGN = 64  # bytes: a cache line, and the GEMV's widest load of weights
ALIGN_FROM = 1 << 12  # packed buffers of at least this many bytes start on a line


def empty_packed(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """``np.empty(shape, dtype)`` for packed codes, on a cache line from ``ALIGN_FROM`` bytes.

    NumPy's large buffers start 16 bytes past a 64-byte line (glibc's), so each 64-byte
    load of a weight row in the GEMV spanned two lines: the int8 GEMV at 4096 x 4096 on
    one thread took 78.9 µs on such weights and 72.4 µs on aligned ones (Zen 5, medians).
    """
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < ALIGN_FROM:
        return np.empty(shape, dtype)
    raw = np.empty(nbytes + ALIGN, np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def _tasks(rows: int, units: int) -> int:
    """Tasks of at most ``CHUNK`` units each, over every row."""
    return rows * -(-units // CHUNK)


def _int8_rows(a: np.ndarray) -> tuple[np.ndarray, bool]:
    """``a`` itself when it is int8 with a unit stride along rows, else a checked int8 copy."""
    if a.dtype == np.int8 and (a.shape[1] <= 1 or a.strides[1] == 1):
        return a, True
    out = np.empty(a.shape, np.int8)
    return out, run(_narrow, a.shape[0], a.nbytes, a, out) == 0


@register("pack", "cpu")
def pack(a: np.ndarray, fmt: Format) -> tuple[np.ndarray, bool]:
    out = empty_packed(fmt.data_shape(a.shape), fmt.dtype)
    return out, _pack_into(a, fmt, out)


def _pack_into(a: np.ndarray, fmt: Format, out: np.ndarray) -> bool:
    """``a``'s rows packed into ``out`` (rows of ``fmt``'s storage); False on bad input."""
    dst, half = byte_rows(out, fmt)
    a, ok = _int8_rows(a)
    if not ok or out.size == 0:
        return ok
    kernel = {"2bit": _pack2, "base3": _pack3, "bitplane": _packbp}[fmt.name]
    tasks = _tasks(a.shape[0], half or dst.shape[1])
    return run(kernel, tasks, a.nbytes, a, dst, half) == 0


@register("unpack", "cpu")
def unpack(data: np.ndarray, fmt: Format, n: int) -> tuple[np.ndarray, bool]:
    out = np.empty((data.shape[0], n), np.int8)
    return out, _unpack_into(data, fmt, out)


def _unpack_into(data: np.ndarray, fmt: Format, out: np.ndarray) -> bool:
    """The int8 trits of ``data``'s rows into ``out`` (``(rows, n)``); False on bad codes."""
    src, half = byte_rows(data, fmt)
    if out.size == 0:
        return True
    tasks = _tasks(out.shape[0], half or src.shape[1])
    if fmt.name == "2bit":
        bad = run(_unpack2, tasks, out.nbytes, src, half, out)
    elif fmt.name == "base3":
        bad = run(_unpack3, tasks, out.nbytes, src, half, _BASE3_WORDS, out)
    else:
        bad = run(_unpackbp, tasks, out.nbytes, src, half, out)
    return bad == 0


@register("convert", "cpu")
def convert(data: np.ndarray, sfmt: Format, dfmt: Format, n: int) -> tuple[np.ndarray, bool]:
    """Unpack and re-pack blocks of rows through one small int8 buffer (the fast kernels).

    The buffer (``CONVERT_BLOCK_BYTES``) is made once and each block is packed straight
    into the result: 4096 x 4096 to "2bit", one thread, "bitplane" 0.54 ms, "base3" 0.72-0.78
    ms, where a fresh 4 MiB buffer and a packed copy per block took 0.9-3.5 ms by the
    allocator's mood (fresh pages fault in).
    """
    rows = data.shape[0]
    out = empty_packed(dfmt.data_shape((rows, n)), dfmt.dtype)
    step = max(1, CONVERT_BLOCK_BYTES // max(n, 1))
    buffer = np.empty((min(step, rows), n), np.int8)
    for r0 in range(0, rows, step):
        trits = buffer[:min(step, rows - r0)]
        if not _unpack_into(data[r0:r0 + step], sfmt, trits):
            return out, False
        _pack_into(trits, dfmt, out[r0:r0 + step])
    return out, True
