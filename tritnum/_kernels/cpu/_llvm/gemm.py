"""The int8 GEMM's micro-kernel and activation layout: numba intrinsics emitting LLVM vector IR.

``gemm_tile(a, aoff, b, boff, words, segments, scales, soff, xsum, xoff, c)``
computes a block of ``R`` activation rows by ``C`` weight rows (:class:`Tile`)
from panels laid out for it, in ``T = words * segments`` steps of 16 inputs:

- ``b`` (uint8, from byte ``boff``): the weights' 2bit bytes as they are packed,
  4 bytes (16 trits) of each weight row per step, ``[T][C][4]``. The int32 lane
  j of a vector holds weight row j's 4 bytes; ``(lane >> 2n) & 0x03030303`` is
  code n (``trit + 1``) of each of them: elements ``4b + n`` (b = 0..3) of the step.
- ``a`` (int8, from byte ``aoff``): the activations, ``[T][R][16]``; of row r's
  16 bytes of a step, ``4n + b`` holds element ``4b + n``: the 4 bytes meeting
  code n are one int32, broadcast to every lane.
- ``R * C / lanes`` int32 accumulators gather 4 products ``code * q`` per lane
  and instruction: ``vpdpbusd`` with VNNI (512-bit on AVX-512 VNNI, 256-bit on
  AVX-VNNI); on AVX2 ``vpmaddubsw`` (pairs into int16, at most 2 * 2 * 128: no
  saturation) and ``vpmaddwd`` into int32. Per step and code n, ``C / lanes``
  vector loads serve ``R`` broadcasts.

A segment is ``words`` steps (one scale group, or a piece of a row of at most
``INT32_EXACT`` inputs). Its accumulators start at ``-xsum[xoff + R*s + r]``,
minus the segment's sum of ``q``: as ``code = trit + 1`` they end at the exact
sum of ``trit * q`` (int32 arithmetic wraps, so only that final sum, at most
``128 * INT32_EXACT``, has to fit). Then, in float64 lanes,
``c[RC*(s % 8) + C*r + j] += scales[soff + C*s + j] * acc[r, j]`` from ``c = 0``
(``scales`` float64, or float32 widened: the same exact products):
``c`` holds ``SLOTS * R * C`` float64, segment s adding into slot ``s % SLOTS``,
and the slots are summed by halves at the end into the first: the order of the
GEMV's group dot (:func:`.gemv.make_group_dot`; the products are exact), so a
row's output has the same bits in a GEMV and a GEMM. (Slots in memory also keep
LLVM from holding the float64 vectors in registers across segments and spilling
them: measured on Zen 5, 4096 x 4096, 256 rows, one core, groups of 32 took 25 ms
with one address per element, 19 ms with two slots.)

``lay_out(q, qoff, a, aoff, steps, stride)`` writes ``steps`` runs of 16 int8
activations (from flat element ``qoff`` of ``q``) in that order, ``4n + b``
from ``4b + n`` (one byte shuffle), run t at ``aoff + t * stride`` of ``a``, and
returns their int32 sum. Nothing is bounds-checked: the callers keep every
access in bounds.
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ...._isa import ISA, TABLE, Level
from . import (
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    broadcast,
    horizontal_sum,
    load,
    pointer,
    splat,
    store,
    vector,
)
from .gemv import SLOTS
from .gemv_target import GFNI, code_vectors

# Internal API: the private names other modules use (tests/test_architecture_seams.py):
# the Q8_K GEMM's tile (q8k_gemm.py) shares the constants, the int8 multiply-add and the steps.
_INTERNAL_API = ("_const", "_multiply_add", "_step")


@dataclass(frozen=True)
class Tile:
    """The register block of one level: ``rows x cols`` int32 sums, ``lanes`` per vector."""

    lanes: int  # int32 lanes of a vector: 8 (256-bit) or 16 (512-bit)
    rows: int  # activation rows (R)
    cols: int  # weight rows (C), a multiple of lanes
    int8: str = "vnni"  # "vnni" (vpdpbusd) or "maddubs" (AVX2: vpmaddubsw + vpmaddwd)
    gfni: bool = False  # codes 1-3 of each byte by one vgf2p8affineqb (shift and mask)

    @classmethod
    def of(cls, level: Level, rows: dict[int, int]) -> Tile | None:
        """``rows[vector bytes]`` activation rows by two vectors of weight rows.

        None on the portable level (no x86 int8 dot).
        """
        if level.int8_dot == "portable":
            return None
        lanes = level.float_lanes
        return cls(lanes, rows[level.vector_bytes], 2 * lanes, level.int8_dot)


# Accumulators: 16 of 32 zmm (8 x 32 measured as fast as 8 x 48 and faster than 12 x 32,
# 6 x 64 and 4 x 64 on Zen 5, with the least padding for few rows); 8 of the 16 ymm of
# AVX2 and AVX-VNNI CPUs, leaving room for the codes.
TILE_ROWS = {32: 4, 64: 8}  # activation rows of a tile by vector bytes
TILES = {name: tile for name, level in TABLE.items()
         if (tile := Tile.of(level, TILE_ROWS)) is not None}
TILE = TILES.get(ISA)  # None on the portable level: the int8 GEMM stays on BLAS there


def _const(value):
    return ir.Constant(I64, value)


def _doubles(builder, base, offset, lanes):
    """Pointer to ``lanes`` float64 at element ``offset`` of ``base``."""
    return builder.bitcast(builder.gep(base, [offset]), vector(F64, lanes).as_pointer())


def _multiply_add(builder, tile):
    """``(acc, codes, q) -> acc +`` the sum of 4 products ``code * q`` in each int32 lane."""
    vi = vector(I32, tile.lanes)
    if tile.int8 == "vnni":
        dpbusd = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vi, [vi, vi, vi]),
            f"llvm.x86.avx512.vpdpbusd.{32 * tile.lanes}")
        return lambda acc, codes, q: builder.call(dpbusd, [acc, codes, q])
    v32i8, v16i16 = vector(I8, 32), vector(I16, 16)
    maddubs = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(v16i16, [v32i8, v32i8]), "llvm.x86.avx2.pmadd.ub.sw")
    maddwd = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vi, [v16i16, v16i16]), "llvm.x86.avx2.pmadd.wd")

    def multiply_add(acc, codes, q):
        pairs = builder.call(maddubs, [builder.bitcast(codes, v32i8), builder.bitcast(q, v32i8)])
        return builder.add(acc, builder.call(maddwd, [pairs, splat(I16, 16, 1)]))

    return multiply_add


def _scale_into(builder, accs, tile, scales, c):
    """``c[C*r + j] += scales[j] * acc[r, j]`` in float64 lanes (float32 scales widened)."""
    lanes, per_row = tile.lanes, tile.cols // tile.lanes
    ty = vector(scales.type.pointee, lanes)
    scale = [builder.load(builder.bitcast(builder.gep(scales, [_const(lanes * j)]),
                                          ty.as_pointer()), align=1) for j in range(per_row)]
    if ty.element != F64:
        scale = [builder.fpext(v, vector(F64, lanes)) for v in scale]
    for i, acc in enumerate(accs):
        exact = builder.sitofp(builder.load(acc), vector(F64, lanes))
        ptr = _doubles(builder, c, _const(lanes * i), lanes)
        total = builder.fadd(builder.load(ptr, align=1),
                             builder.fmul(exact, scale[i % per_row], flags=("contract",)),
                             flags=("contract",))
        builder.store(total, ptr, align=1)


def _step(builder, tile, ap, bp, t, accs, multiply_add):
    """Step ``t`` of the panels into the ``R * C / lanes`` int32 accumulators ``accs``."""
    lanes, rows, per_row = tile.lanes, tile.rows, tile.cols // tile.lanes
    vi = vector(I32, lanes)
    bt = builder.mul(t, _const(4 * tile.cols))
    at = builder.mul(t, _const(16 * rows))
    packed = [load(builder, bp, builder.add(bt, _const(4 * lanes * j)), vi, 1)
              for j in range(per_row)]
    mask = splat(I32, lanes, 0x03030303)
    bytes_ = vector(I8, 4 * lanes)
    for n in range(4):
        if tile.gfni and n:
            codes = [builder.bitcast(code_vectors(builder, builder.bitcast(p, bytes_), n, True),
                                     vi) for p in packed]
        else:
            codes = [builder.and_(builder.lshr(p, splat(I32, lanes, 2 * n)) if n else p, mask)
                     for p in packed]
        for r in range(rows):
            q = broadcast(builder, load(builder, ap, builder.add(at, _const(16 * r + 4 * n)),
                                        I32, 1), lanes)
            for j in range(per_row):
                acc = accs[r * per_row + j]
                builder.store(multiply_add(builder.load(acc), codes[j], q), acc)


def make_tile(tile: Tile):
    """The micro-kernel intrinsic for ``tile``."""
    lanes, rows, cols = tile.lanes, tile.rows, tile.cols
    per_row = cols // lanes
    vi, vd = vector(I32, lanes), vector(F64, lanes)

    @intrinsic
    def gemm_tile(typingctx, a, aoff, b, boff, words, segments, scales, soff, xsum, xoff, c):
        arrays = ((a, types.int8), (b, types.uint8), (xsum, types.int32), (c, types.float64))
        if not (all(isinstance(t, types.Array) and t.dtype == d for t, d in arrays)
                and isinstance(scales, types.Array)
                and scales.dtype in (types.float32, types.float64)):
            return None
        sig = types.none(a, types.intp, b, types.intp, types.intp, types.intp, scales,
                         types.intp, xsum, types.intp, c)

        def codegen(context, builder, sig, args):
            ap = pointer(context, builder, sig.args[0], args[0], args[1], I8)
            bp = pointer(context, builder, sig.args[2], args[2], args[3], I8)
            sp = pointer(context, builder, sig.args[6], args[6], args[7],
                         F64 if sig.args[6].dtype == types.float64 else F32)
            xp = pointer(context, builder, sig.args[8], args[8], args[9], I32)
            cp = pointer(context, builder, sig.args[10], args[10], _const(0), F64)
            words = args[4]
            multiply_add = _multiply_add(builder, tile)
            accs = [cgutils.alloca_once(builder, vi) for _ in range(rows * per_row)]
            for i in range(SLOTS * rows * per_row):
                builder.store(ir.Constant(vd, None), _doubles(builder, cp, _const(lanes * i),
                                                              lanes), align=1)
            with cgutils.for_range(builder, args[5]) as seg:
                s = seg.index
                sums = builder.gep(xp, [builder.mul(s, _const(rows))])
                for r in range(rows):
                    start = broadcast(builder, builder.neg(builder.load(
                        builder.gep(sums, [_const(r)]))), lanes)
                    for j in range(per_row):
                        builder.store(start, accs[r * per_row + j])
                first = builder.mul(s, words)
                with cgutils.for_range(builder, words) as step:
                    _step(builder, tile, ap, bp, builder.add(first, step.index), accs,
                          multiply_add)
                slot = builder.mul(builder.and_(s, _const(SLOTS - 1)), _const(rows * cols))
                _scale_into(builder, accs, tile, builder.gep(sp, [builder.mul(s, _const(cols))]),
                            builder.gep(cp, [slot]))
            for i in range(rows * per_row):  # the slots summed by halves, into the first
                vs = [builder.load(_doubles(builder, cp, _const(rows * cols * k + lanes * i),
                                            lanes), align=1) for k in range(SLOTS)]
                while len(vs) > 1:
                    half = len(vs) // 2
                    vs = [builder.fadd(a, b) for a, b in zip(vs[:half], vs[half:], strict=True)]
                builder.store(vs[0], _doubles(builder, cp, _const(lanes * i), lanes), align=1)
            return context.get_dummy_value()

        return sig, codegen

    return gemm_tile


def make_transpose(lanes: int):
    """The ``lanes x lanes`` 32-bit word transpose intrinsic: the weight panel's copy.

    ``transpose_words(src, soff, sstride, dst, doff, dstride)`` (uint8 arrays, byte
    offsets and strides) reads ``lanes`` rows of ``lanes`` words, row i from byte
    ``soff + i * sstride`` of ``src``, and writes word k of each, in row order, from
    byte ``doff + k * dstride`` of ``dst``: ``log2(lanes)`` stages of two-vector
    shuffles, each pairing rows ``d`` apart and swapping their ``d``-word blocks.
    """
    vi = vector(I32, lanes)

    @intrinsic
    def transpose_words(typingctx, src, soff, sstride, dst, doff, dstride):
        if not all(isinstance(t, types.Array) and t.dtype == types.uint8 for t in (src, dst)):
            return None
        sig = types.none(src, types.intp, types.intp, dst, types.intp, types.intp)

        def codegen(context, builder, sig, args):
            sp = pointer(context, builder, sig.args[0], args[0], args[1], I8)
            dp = pointer(context, builder, sig.args[3], args[3], args[4], I8)
            rows = [load(builder, sp, builder.mul(args[2], _const(i)), vi, 1)
                    for i in range(lanes)]
            d = lanes // 2
            while d:
                low = ir.Constant(vector(I32, lanes),
                                  [k if not k & d else lanes + k - d for k in range(lanes)])
                high = ir.Constant(vector(I32, lanes),
                                   [k + d if not k & d else lanes + k for k in range(lanes)])
                for i in (i for i in range(lanes) if not i & d):
                    a, b = rows[i], rows[i + d]
                    rows[i] = builder.shuffle_vector(a, b, low)
                    rows[i + d] = builder.shuffle_vector(a, b, high)
                d //= 2
            for k, row in enumerate(rows):
                store(builder, row, dp, builder.mul(args[5], _const(k)), 1)
            return context.get_dummy_value()

        return sig, codegen

    return transpose_words


@intrinsic
def lay_out(typingctx, q, qoff, a, aoff, steps, stride):
    if not all(isinstance(t, types.Array) and t.dtype == types.int8 for t in (q, a)):
        return None
    sig = types.int32(q, types.intp, a, types.intp, types.intp, types.intp)

    def codegen(context, builder, sig, args):
        src = pointer(context, builder, sig.args[0], args[0], args[1], I8)
        dst = pointer(context, builder, sig.args[2], args[2], args[3], I8)
        v16, vi = vector(I8, 16), vector(I32, 16)
        order = ir.Constant(vector(I32, 16), [4 * (i % 4) + i // 4 for i in range(16)])
        total = cgutils.alloca_once_value(builder, ir.Constant(vi, None))
        with cgutils.for_range(builder, args[4]) as loop:
            t = loop.index
            run = load(builder, src, builder.mul(t, _const(16)), v16, 1)
            ptr = builder.gep(dst, [builder.mul(t, args[5])])
            builder.store(builder.shuffle_vector(run, run, order),
                          builder.bitcast(ptr, v16.as_pointer()), align=1)
            builder.store(builder.add(builder.load(total), builder.sext(run, vi)), total)
        return horizontal_sum(builder, builder.load(total), builder.add)

    return sig, codegen


gemm_tile = make_tile(TILE) if TILE is not None else None
# The GEMV's tile on VNNI CPUs with GFNI (:mod:`..group_gemv`): one row of activations by
# eight vectors of weight rows, eight independent sums; codes by one instruction each (the
# decode is not shared by other activation rows here)
ROW_TILE = (Tile(TILE.lanes, 1, 8 * TILE.lanes, "vnni", gfni=True)
            if TILE is not None and TILE.int8 == "vnni" and GFNI else None)
row_tile = make_tile(ROW_TILE) if ROW_TILE is not None else None
transpose_words = make_transpose(TILE.lanes) if TILE is not None else None
