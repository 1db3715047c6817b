"""The Q8_K GEMM's micro-kernel (llama.cpp's activations) on the int8 GEMM's register tile.

ggml's ``ggml_vec_dot_tq2_0_q8_K`` keeps, per 256-value block ``b``, eight int32
lanes: lane ``L`` sums ``code * q`` over the values ``e`` with ``(e % 32) // 4 == L``,
that is over the weight bytes ``L, L + 8, ..., L + 56`` of the block's 64 (2bit
bytes hold 4 consecutive values), minus the block's values ``32 L .. 32 L + 31``.
Each lane is converted to float32, multiplied by ``float32(d_x[r, b] * d_w[o, b])``
and added to its float32 lane accumulator, block after block; the eight are then
added in ``hsum_float_8``'s order. So each of the ``m * out * K / 32`` lane sums
has its own float32 rounding: 32 multiply-adds (8 ``vpdpbusd`` lanes), then one
convert, one multiply and one add.

The micro-kernel of :mod:`.gemm` computes that partition as it is: its panels
put the 8 bytes of each lane in the two steps of one segment (:func:`q8k_panel`
for the weights, :func:`lay_out_q8k` for the activations), steps ordered
``(block, lane, half)``; after each segment of two steps the int32 accumulators
(started at minus the lane's chunk sum) are flushed into the ``8 * R * C``
float32 lane accumulators in ``c`` (in the L1 cache). ``c``'s eight lanes are
added at the end. The float scales ``d_x * d_w`` of a block are made once for its
eight lanes. Each lane update is one ``llvm.fma`` (GCC's contraction of ggml's AVX2
code) or, unfused, ``fmul`` then ``fadd`` (:func:`.dot_q8k.lane_update`).

Floor per lane sum, next to its 8 ``vpdpbusd`` lanes: one ``fmul`` (on Zen 5 the
pipes of ``vpdpbusd``), one ``fadd``, and the conversion to float32, which costs
no ``vcvtdq2ps``: an accumulator starts at the bits ``MAGIC`` of ``float32(OFFSET)``
minus the chunk sum, so its final bits are the float32 ``OFFSET + lane`` and one
``fsub`` (an add pipe) leaves the lane exactly.

Nothing is bounds-checked: the callers keep every access in bounds.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ...._isa import ISA, TABLE
from . import F32, I8, I32, broadcast, load, pointer, vector
from .dot_q8k import both_orders, lane_update
from .gemm import Tile, _const, _multiply_add, _step

LANES = 8  # ggml's int32 lanes per block
# int32 lane sums (|v| < 2**14) converted without vcvtdq2ps: the float32 whose bits are
# MAGIC + v is OFFSET + v exactly (for |v| < 2**22), so a subtraction leaves v
OFFSET = 3 << 22
MAGIC = 0x4B400000  # the bits of float32(OFFSET)
STEPS = 16  # steps of 16 values per block of 256: two per lane
# within a block's 64 weight bytes, step 2 L + h takes bytes L + 8 (4 h + i), i = 0..3
PANEL_ORDER = tuple(L + 8 * (4 * h + i) for L in range(LANES) for h in range(2) for i in range(4))


def make_q8k_tile(tile: Tile):
    """The Q8_K micro-kernel intrinsic for ``tile``.

    ``q8k_tile(a, aoff, b, boff, blocks, starts, soff, dx, xoff, dw, woff, c, fused)``: ``a``
    and ``b`` as :func:`.gemm.make_tile`'s panels, ``16 * blocks`` steps; ``starts``
    int32 ``[blocks][LANES][R]`` (``MAGIC`` minus the lanes' chunk sums), ``dx`` float32
    ``[blocks][R]``, ``dw`` float32 ``[blocks][C]``; ``c`` float32 of ``(LANES + blocks)
    * R * C`` elements: the result ``[R][C]`` in its first ``R * C``, the rest scratch.
    Step ``(L * blocks + b) * 2 + h`` of the panels holds lane ``L``'s half ``h`` of
    block ``b``: one lane after another, each over all blocks, its float32 sums in
    registers. ``fused`` (bool): each lane update one FMA.
    """
    lanes, rows, cols = tile.lanes, tile.rows, tile.cols
    per_row = cols // lanes
    vi, vf = vector(I32, lanes), vector(F32, lanes)

    @intrinsic
    def q8k_tile(typingctx, a, aoff, b, boff, blocks, starts, soff, dx, xoff, dw, woff, c,
                 fused):
        arrays = ((a, types.int8), (b, types.uint8), (starts, types.int32),
                  (dx, types.float32), (dw, types.float32), (c, types.float32))
        if not (all(isinstance(t, types.Array) and t.dtype == d for t, d in arrays)
                and isinstance(fused, types.Boolean)):
            return None
        sig = types.none(a, types.intp, b, types.intp, types.intp, starts, types.intp,
                         dx, types.intp, dw, types.intp, c, types.boolean)

        def codegen(context, builder, sig, args):
            ap = pointer(context, builder, sig.args[0], args[0], args[1], I8)
            bp = pointer(context, builder, sig.args[2], args[2], args[3], I8)
            sp = pointer(context, builder, sig.args[5], args[5], args[6], I32)
            xp = pointer(context, builder, sig.args[7], args[7], args[8], F32)
            wp = pointer(context, builder, sig.args[9], args[9], args[10], F32)
            cp = pointer(context, builder, sig.args[11], args[11], _const(0), F32)

            def scale(block, i):
                """The scale vector ``i`` of ``block``, past the lanes in ``c``."""
                return builder.bitcast(builder.gep(cp, [builder.add(
                    builder.mul(block, _const(rows * cols)),
                    _const(LANES * rows * cols + lanes * i))]), vf.as_pointer())

            def lane_acc(lane, i):
                return builder.bitcast(builder.gep(cp, [builder.add(
                    builder.mul(lane, _const(rows * cols)), _const(lanes * i))]),
                    vf.as_pointer())

            multiply_add = _multiply_add(builder, tile)
            offset = ir.Constant(vf, [ir.Constant(F32, float(OFFSET))] * lanes)
            accs = [cgutils.alloca_once(builder, vi) for _ in range(rows * per_row)]
            sums = [cgutils.alloca_once(builder, vf) for _ in range(rows * per_row)]
            with cgutils.for_range(builder, args[4]) as block:  # the scales, past the lanes
                bk = block.index
                weight = [load(builder, wp, builder.add(builder.mul(bk, _const(cols)),
                                                        _const(lanes * j)), vf, 1)
                          for j in range(per_row)]
                for r in range(rows):
                    xd = broadcast(builder, load(builder, xp, builder.add(
                        builder.mul(bk, _const(rows)), _const(r)), F32, 1), lanes)
                    for j in range(per_row):
                        i = r * per_row + j
                        builder.store(builder.fmul(xd, weight[j]),
                                      scale(bk, i), align=1)

            def lanes_of(fuse):
                with cgutils.for_range(builder, _const(LANES)) as lane:
                    for acc in sums:
                        builder.store(ir.Constant(vf, None), acc)
                    with cgutils.for_range(builder, args[4]) as block:
                        bk = block.index
                        first = builder.add(builder.mul(lane.index, args[4]), bk)
                        seg = builder.add(builder.mul(bk, _const(LANES)), lane.index)
                        for r in range(rows):
                            start = broadcast(builder, load(builder, sp, builder.add(
                                builder.mul(seg, _const(rows)), _const(r)), I32, 1), lanes)
                            for j in range(per_row):
                                builder.store(start, accs[r * per_row + j])
                        for h in range(2):
                            t = builder.add(builder.mul(first, _const(2)), _const(h))
                            _step(builder, tile, ap, bp, t, accs, multiply_add)
                        for i, (acc, total) in enumerate(zip(accs, sums, strict=True)):
                            exact = builder.fsub(builder.bitcast(builder.load(acc), vf), offset)
                            builder.store(lane_update(builder, fuse, builder.load(total), exact,
                                                      builder.load(scale(bk, i), align=1)), total)
                    for i, total in enumerate(sums):
                        builder.store(builder.load(total), lane_acc(lane.index, i), align=1)

            both_orders(builder, args[12], lanes_of)
            # hsum_float_8: ((0 + 4) + (2 + 6)) + ((1 + 5) + (3 + 7))
            for i in range(rows * per_row):
                v = [builder.load(lane_acc(_const(lane), i), align=1) for lane in range(LANES)]
                total = builder.fadd(
                    builder.fadd(builder.fadd(v[0], v[4]), builder.fadd(v[2], v[6])),
                    builder.fadd(builder.fadd(v[1], v[5]), builder.fadd(v[3], v[7])))
                builder.store(total, lane_acc(_const(0), i), align=1)
            return context.get_dummy_value()

        return sig, codegen

    return q8k_tile


def _step_at(builder, base, s, stride, lane_stride):
    """Where step ``s = 2 L + h`` of a block goes: ``base + L * lane_stride + h * stride``."""
    return builder.gep(base, [builder.add(builder.mul(_const(s // 2), lane_stride),
                                          builder.mul(_const(s % 2), stride))])


@intrinsic
def q8k_panel(typingctx, w, woff, b, boff, stride, lane_stride):
    """One block's 64 weight bytes (from byte ``woff`` of ``w``) as 16 steps of 4 bytes.

    Step ``s = 2 L + h`` (bytes ``PANEL_ORDER[4 s .. 4 s + 3]``) goes to byte
    ``boff + L * lane_stride + h * stride`` of ``b``.
    """
    if not all(isinstance(t, types.Array) and t.dtype == types.uint8 for t in (w, b)):
        return None
    sig = types.none(w, types.intp, b, types.intp, types.intp, types.intp)

    def codegen(context, builder, sig, args):
        src = pointer(context, builder, sig.args[0], args[0], args[1], I8)
        dst = pointer(context, builder, sig.args[2], args[2], args[3], I8)
        v64 = vector(I8, 64)
        block = load(builder, src, _const(0), v64, 1)
        order = ir.Constant(vector(I32, 64), list(PANEL_ORDER))
        words = builder.bitcast(builder.shuffle_vector(block, block, order), vector(I32, STEPS))
        for s in range(STEPS):
            ptr = _step_at(builder, dst, s, args[4], args[5])
            builder.store(builder.extract_element(words, ir.Constant(I32, s)),
                          builder.bitcast(ptr, I32.as_pointer()), align=1)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def lay_out_q8k(typingctx, q, qoff, a, aoff, stride, lane_stride):
    """One block's 256 int8 activations (from element ``qoff`` of ``q``) as 16 steps.

    Step ``s = 2 L + h`` meets the weight bytes ``L + 8 (4 h + i)`` (:data:`PANEL_ORDER`):
    the 4 values of byte ``k`` are ``4 k .. 4 k + 3``; as in :func:`.gemm.lay_out`, of
    the step's 16 bytes ``4 n + i`` holds value ``n`` of its byte ``i``. Step ``s``
    goes to byte ``aoff + L * lane_stride + h * stride`` of ``a``.
    """
    if not all(isinstance(t, types.Array) and t.dtype == types.int8 for t in (q, a)):
        return None
    sig = types.none(q, types.intp, a, types.intp, types.intp, types.intp)

    def codegen(context, builder, sig, args):
        src = pointer(context, builder, sig.args[0], args[0], args[1], I8)
        dst = pointer(context, builder, sig.args[2], args[2], args[3], I8)
        v256 = vector(I8, 256)
        block = load(builder, src, _const(0), v256, 1)
        for s in range(STEPS):
            order = [4 * PANEL_ORDER[4 * s + i % 4] + i // 4 for i in range(16)]
            run = builder.shuffle_vector(block, block, ir.Constant(vector(I32, 16), order))
            ptr = _step_at(builder, dst, s, args[4], args[5])
            builder.store(run, builder.bitcast(ptr, vector(I8, 16).as_pointer()), align=1)
        return context.get_dummy_value()

    return sig, codegen


# Float32 lane sums stay in registers beside the int32 ones: 10 + 10 of 32 zmm (the int8 GEMM's
# 8 x 32 would need 32), 4 + 4 of 16 ymm. AVX-512 rows per tile, measured on Zen 5 at
# 256 x 4096 x 4096 (TQ2_0 blocks; speed against the int8 GEMM, median of 18 in alternating
# processes): 4 rows 0.89-0.90x, 5 rows 0.91-0.93x, 6 rows 0.88-0.89x (1 and 2 threads)
TILE_ROWS = {32: 2, 64: 5}  # activation rows of a tile by vector bytes
TILES = {name: tile for name, level in TABLE.items()
         if (tile := Tile.of(level, TILE_ROWS)) is not None}
TILE = TILES.get(ISA)
q8k_tile = make_q8k_tile(TILE) if TILE is not None else None
