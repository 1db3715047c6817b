"""The 2bit GEMV's SIMD dot product and decoder: numba intrinsics emitting LLVM vector IR.

``dot_2bit(w, woff, x, xoff, nblocks)`` is the dot product of ``nblocks``
blocks of ``B = BLOCK_BYTES`` bytes of 2bit codes (from flat element ``woff``
of ``w``) with the activations laid out for them (from flat element ``xoff`` of
``x``): block k, code n (bits 2n..2n+1) of byte m pairs with
``x[xoff + 4Bk + Bn + m]``. So one block is one B-byte load whose four
shifted-and-masked copies meet four contiguous B-element runs of ``x``. Codes
are ``trit + 1`` (0, 1, 2). ``decode_2bit(w, woff, out, ooff, nblocks)`` writes
the float32 trits of the blocks in their own order (the GEMM's tiles).

The target (:mod:`.gemv_target`, one per level of :mod:`tritnum._isa`) sets B and
the instructions; this module holds the intrinsics, the row and block drivers
that call the dots of :mod:`.dot_float` and :mod:`.dot_int8` (llama.cpp's Q8_K
dots are :mod:`.dot_q8k`):

- float32 ``x``: the sum of ``trit * x`` in float32 (see :func:`.dot_float.sum_float`):
  from AVX2 on, ``vpermilps`` turns each 2-bit code into its float trit in one
  instruction (8 lanes; 16 on AVX-512, B = 64); portably a mask, a subtraction
  and a conversion do.
- int8 ``x``: with VNNI, ``vpdpbusd`` multiplies 4 unsigned codes by 4 signed
  int8 and adds them into each int32 lane (256-bit on AVX-VNNI, 512-bit on
  AVX-512 VNNI with B = 64); on AVX2, ``vpmaddubsw`` (pairs into int16: at most
  4 * 2 * 2 * 128 = 2048 per block, no saturation) and ``vpmaddwd`` into int32,
  as bitnet.cpp's I2_S kernel does; portably the same sums with plain widening
  multiplies. Returns the sum of ``code * x`` (the caller subtracts the sum of
  ``x``) as int32 (exact while ``2 * 128 * elements < 2**31``, which the caller
  keeps to).

Plain numba loops do not get there: the shifts and the int64 literals of
numba's typing leave the inner loop scalar or half-vectorized (measured on
these machines: float 3.6 ms and int8 1.8 ms for a 4096 x 4096 GEMV, against
0.85 ms and 0.29 ms with AVX2 here). The caller keeps every block in bounds:
nothing here is bounds-checked.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from . import (
    F32,
    F64,
    I8,
    I16,
    I32,
    broadcast,
    horizontal_sum,
    load,
    masked_load,
    pointer,
    splat,
    store,
    vector,
)
from .dot_float import accumulate_float, float_accumulators, float_total, sum_float, trit_vectors
from .dot_int8 import SUM_INT8, sum_int8_vnni
from .gemv_target import BLOCK_BYTES, TARGET, Target


def _sum_lanes(target: Target, is_float: bool) -> int:
    if is_float:
        return target.lanes
    return {"portable": target.block, "maddubs": 8, "vnni": target.block // 4}[target.int8]


def _lane_sums(context, builder, sig, args, target):
    """``(lanes, is_int8, x pointer)``: the lanes summing to the dot of ``args``' blocks."""
    wp = pointer(context, builder, sig.args[0], args[0], args[1], I8)
    if sig.args[2].dtype == types.float32:
        xp = pointer(context, builder, sig.args[2], args[2], args[3], F32)
        return sum_float(builder, wp, xp, args[4], target)
    xp = pointer(context, builder, sig.args[2], args[2], args[3], I8)
    zero = ir.Constant(vector(I32, _sum_lanes(target, False)), None)
    return SUM_INT8[target.int8](builder, [wp], xp, args[4], target.block, [zero])[0]


def _operands_ok(w, x) -> bool:
    return (isinstance(w, types.Array) and w.dtype == types.uint8
            and isinstance(x, types.Array) and x.dtype in (types.float32, types.int8))


def make_dot(target: Target):
    """The dot product intrinsic of ``target``."""
    @intrinsic
    def dot(typingctx, w, woff, x, xoff, nblocks):
        if not _operands_ok(w, x):
            return None
        result = types.float32 if x.dtype == types.float32 else types.int32
        sig = result(w, types.intp, x, types.intp, types.intp)

        def codegen(context, builder, sig, args):
            lanes = _lane_sums(context, builder, sig, args, target)
            add = builder.fadd if sig.return_type == types.float32 else builder.add
            return horizontal_sum(builder, lanes, add)

        return sig, codegen

    return dot


def _fold(builder, v, lanes):
    """Lanes ``i`` and ``i + lanes`` (and so on) of ``v`` added: ``lanes`` lanes."""
    while v.type.count > lanes:
        half = v.type.count // 2
        lo = builder.shuffle_vector(v, v, ir.Constant(vector(I32, half), list(range(half))))
        hi = builder.shuffle_vector(v, v, ir.Constant(vector(I32, half),
                                                      list(range(half, 2 * half))))
        v = builder.add(lo, hi) if isinstance(v.type.element, ir.IntType) else builder.fadd(lo, hi)
    return v


SCALED_LANES = 8  # float64 lanes of the scaled dot's accumulators
SLOTS = 8  # float64 sums of the int8 rescale: group g adds into slot g % SLOTS (see make_group_dot)


def _add_scaled(builder, total, part, scale):
    """``total += part * scale`` of int32 lanes, folded to ``SCALED_LANES`` float64 lanes."""
    part = builder.sitofp(_fold(builder, part, SCALED_LANES), total.type.pointee)
    scaled = builder.fmul(part, broadcast(builder, builder.fpext(scale, F64), SCALED_LANES),
                          flags=("contract",))
    builder.store(builder.fadd(builder.load(total), scaled, flags=("contract",)), total)


def _part_scale(builder, target, sp, k, part, group_bytes):
    """The scales of part ``part`` of block ``k`` lane by lane, for groups of ``group_bytes``.

    A lane is a byte; groups smaller than a part (a multiple of 4 bytes: ``vpermilps``
    keeps to 4-lane runs) load their few scales and spread them, larger ones broadcast one.
    """
    lanes = target.lanes
    first = builder.add(builder.mul(k, ir.Constant(k.type, target.block)),
                        ir.Constant(k.type, lanes * part))
    g = builder.udiv(first, ir.Constant(k.type, group_bytes))
    if group_bytes >= lanes:
        return broadcast(builder, builder.load(builder.gep(sp, [g])), lanes)
    few = load(builder, sp, g, vector(F32, lanes // group_bytes), 4)
    return builder.shuffle_vector(few, few, ir.Constant(vector(I32, lanes),
                                                        [i // group_bytes for i in range(lanes)]))


def make_scaled_dot(target: Target, rows: int = 1, grouped: bool = False,
                    group_bytes: int | None = None):
    """The scaled dot intrinsic of ``target``, for weights with one scale per segment.

    ``scaled_dot(w, woff, wstride, x, xoff, nblocks, segments, scales, soff, sstride,
    xneg, xnoff)`` is, for each of ``rows`` weight rows ``i`` (from flat element
    ``woff + i * wstride`` of ``w``, scales from ``soff + i * sstride``),
    ``sum_g scales[g] * (dot_g + xneg[xnoff + g])`` in float64 over ``segments``
    consecutive runs of ``nblocks`` blocks, ``dot_g`` the dot of run g. int8 ``x``
    (one scale a row: :func:`make_group_dot` takes more): ``dot_g`` is the sum of
    ``code * q``; ``xneg`` (int32, minus the run's sum of ``q``) starts the first
    accumulator, so the sum is exact in int32; its lanes are folded to
    ``SCALED_LANES``, scaled and added as a vector. Below ``2**29`` a lane, each
    product with the scale is exact, and so is their sum (multiples of the scale's
    last bit): the bits of ``scale * sum``, whatever the order. float32 ``x``: ``xneg``
    is not read. Returns a float64, or a tuple of ``rows`` of them.

    ``grouped`` (float32 ``x``, for weights with more than one scale a row): one loop
    over all the blocks, each block's trits times its run's scale, instead of a loop
    per run; the same sums. With ``group_bytes`` (less than a block: scale groups of
    ``4 * group_bytes`` inputs inside each block; ``segments`` is then 1 and
    ``nblocks`` the whole row) the trits of each part of a block are multiplied lane
    by lane by their groups' scales (:func:`_part_scale`).
    """
    @intrinsic
    def scaled_dot(typingctx, w, woff, wstride, x, xoff, nblocks, segments, scales, soff,
                   sstride, xneg, xnoff):
        if not (_operands_ok(w, x) and isinstance(scales, types.Array)
                and scales.dtype == types.float32 and isinstance(xneg, types.Array)
                and xneg.dtype == types.int32):
            return None
        result = types.float64 if rows == 1 else types.UniTuple(types.float64, rows)
        sig = result(w, types.intp, types.intp, x, types.intp, types.intp, types.intp,
                     scales, types.intp, types.intp, xneg, types.intp)

        def codegen(context, builder, sig, args):
            is_float = sig.args[3].dtype == types.float32
            (_, woff, wstride, _, xoff, nblocks, segments, _, soff, sstride, _, xnoff) = args

            def at(k, offset, elt):
                return pointer(context, builder, sig.args[k], args[k], offset, elt)

            def row(i, offset, stride):
                return builder.add(offset, builder.mul(stride, ir.Constant(stride.type, i)))

            wps = [at(0, row(i, woff, wstride), I8) for i in range(rows)]
            sps = [at(7, row(i, soff, sstride), F32) for i in range(rows)]
            xp = at(3, xoff, F32 if is_float else I8)
            xn = at(10, xnoff, I32)
            size = target.block
            lanes = _sum_lanes(target, is_float)
            vd = vector(F64, SCALED_LANES)
            code_scales = [1.0] * 4
            totals = [cgutils.alloca_once_value(builder, ir.Constant(vd, None))
                      for _ in range(rows)]
            float_accs = [float_accumulators(builder, target) for _ in range(rows)]

            def add_runs(g, wgs, xg):
                """int8: each row's total += its scale * (the run's dot + xneg)."""
                first = builder.insert_element(ir.Constant(vector(I32, lanes), None),
                                               builder.load(builder.gep(xn, [g])),
                                               ir.Constant(I32, 0))
                parts = SUM_INT8[target.int8](builder, wgs, xg, nblocks, size, [first] * rows)
                for total, part, sp in zip(totals, parts, sps, strict=True):
                    _add_scaled(builder, total, part, builder.load(builder.gep(sp, [g])))

            def scale_at(sp, g):
                """Scale ``g`` of a row's scales ``sp``, in every lane."""
                return broadcast(builder, builder.load(builder.gep(sp, [g])), lanes)

            def float_runs(g, wgs, xg):
                """float: the scale rides on the trits, no sums to rescale per run."""
                for wg, accs, sp in zip(wgs, float_accs, sps, strict=True):
                    code_scales[:] = accumulate_float(builder, wg, xg, nblocks, target, accs,
                                                       scale_at(sp, g))

            def each_run(add):
                """``add(g, wgs, xg)`` for run ``g``: its weight rows' and ``x``'s pointers."""
                with cgutils.for_range(builder, segments) as loop:
                    g = loop.index
                    step = builder.mul(g, nblocks)
                    wgs = [builder.gep(wp, [builder.mul(step, ir.Constant(g.type, size))])
                           for wp in wps]
                    add(g, wgs, builder.gep(xp, [builder.mul(step, ir.Constant(g.type,
                                                                               4 * size))]))

            def block_scale(sp, k, part):
                """The scale of block ``k`` (of run ``k // nblocks``), in every lane."""
                if group_bytes is not None:
                    return _part_scale(builder, target, sp, k, part, group_bytes)
                return scale_at(sp, builder.udiv(k, nblocks))

            if is_float and grouped:  # one loop over every block, each with its run's scale:
                # 4096 x 4096, group 256, AVX-512, 1 thread: 0.78-0.83x the per-tensor speed
                # with a loop per run (of one block), 0.98-1.0x so
                blocks = builder.mul(segments, nblocks)
                for wp, accs, sp in zip(wps, float_accs, sps, strict=True):
                    code_scales[:] = accumulate_float(builder, wp, xp, blocks, target, accs,
                                                       functools.partial(block_scale, sp))
            elif is_float:
                each_run(float_runs)
            else:
                each_run(add_runs)
            if is_float:
                sums = [builder.fpext(_fold(builder, float_total(builder, accs, code_scales,
                                                                  target), SCALED_LANES), vd)
                        for accs in float_accs]
            else:
                sums = [builder.load(t) for t in totals]
            dots = [horizontal_sum(builder, v, builder.fadd) for v in sums]
            return dots[0] if rows == 1 else context.make_tuple(builder, sig.return_type, dots)

        return sig, codegen

    return scaled_dot


PACK_INPUTS = 128  # inputs a lane may sum for the int16 merge: in [-128 * 2 * 128, 128 * 2 * 127]


class _Sums(NamedTuple):
    """An int32 vector of group sums: ``groups[l]`` is lane l's group, ``inputs`` its inputs."""

    value: ir.Value
    groups: tuple[int, ...]
    inputs: int | None  # None: not known at compile time


def _paired(groups):
    """Whether lanes ``2j`` and ``2j + 1`` hold the same group."""
    return all(a == b for a, b in zip(groups[::2], groups[1::2], strict=True))


def _runs_paired(groups, width):
    """``(lo, hi)`` lane lists pairing runs of ``width`` lanes of the same groups, or None.

    Each run is paired with the next unpaired run holding the same groups lane by lane.
    """
    runs = [tuple(groups[i:i + width]) for i in range(0, len(groups), width)]
    lo, hi, taken = [], [], set()
    for i, run in enumerate(runs):
        if i in taken:
            continue
        j = next((j for j in range(i + 1, len(runs)) if j not in taken and runs[j] == run), None)
        if j is None:
            return None
        taken.add(j)
        lo += range(i * width, (i + 1) * width)
        hi += range(j * width, (j + 1) * width)
    return lo, hi


def _combine(builder, a, b, pack):
    """``a`` and ``b`` as one vector of their group sums: each lane two lanes of one group.

    With ``pack`` (x86) and lanes of at most ``PACK_INPUTS`` inputs, where adjacent lanes
    hold the same group: ``vpackssdw`` (exact: every sum fits int16) and ``vpmaddwd`` by
    ones, 2 instructions; else two shuffles pairing the widest runs of lanes that hold the
    same groups (128-bit runs: ``vshufi64x2``) and an add. The order of the additions
    inside a group is free (integers), so lanes move as the instructions put them.
    """
    n = len(a.groups)
    if (pack and a.inputs is not None and max(a.inputs, b.inputs) <= PACK_INPUTS
            and _paired(a.groups) and _paired(b.groups)):
        vi, vs = a.value.type, vector(I16, 2 * n)
        bits = 32 * n
        packs = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vs, [vi, vi]),
            "llvm.x86.avx512.packssdw.512" if bits == 512 else "llvm.x86.avx2.packssdw")
        madd = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vi, [vs, vs]),
            "llvm.x86.avx512.pmaddw.d.512" if bits == 512 else "llvm.x86.avx2.pmadd.wd")
        value = builder.call(madd, [builder.call(packs, [a.value, b.value]), splat(I16, 2 * n, 1)])
        # per 128 bits: a's 4 lanes, then b's, as int16; each int32 lane a pair of them
        groups = tuple(g for i in range(0, n, 4) for src in (a, b) for g in src.groups[i:i + 4:2])
        return _Sums(value, groups, 2 * a.inputs)
    both = a.groups + b.groups
    lo, hi = next(p for w in (n >> k for k in range(n.bit_length()))
                  if (p := _runs_paired(both, w)) is not None)
    pick = [builder.shuffle_vector(a.value, b.value, ir.Constant(vector(I32, n), idx))
            for idx in (lo, hi)]
    return _Sums(builder.add(*pick), tuple(both[i] for i in lo),
                 None if a.inputs is None else 2 * a.inputs)


def _merge(builder, stack, v, pack):
    """Push ``v`` (a :class:`_Sums`) on ``stack``, combining equal merges as they come.

    Merging each pair as soon as it is there keeps a few vectors live a row, not a step's
    blocks (4 rows of 8 blocks spilled 32 zmm registers).
    """
    level = 0
    while stack and stack[-1][1] == level:
        v, level = _combine(builder, stack.pop()[0], v, pack), level + 1
    stack.append((v, level))


def _in_order(builder, v):
    """The group sums of ``v`` (a :class:`_Sums`) in group order, one lane a group.

    Lanes of the same group are first added within ``v`` (halves of it, shuffled).
    """
    while len(v.groups) > len(set(v.groups)):
        n = len(v.groups)
        lo, hi = next(p for w in (n >> k for k in range(1, n.bit_length()))
                      if (p := _runs_paired(v.groups, w)) is not None)
        pick = [builder.shuffle_vector(v.value, v.value, ir.Constant(vector(I32, n // 2), idx))
                for idx in (lo, hi)]
        v = _Sums(builder.add(*pick), tuple(v.groups[i] for i in lo), None)
    order = [v.groups.index(g) for g in range(len(v.groups))]
    if order == list(range(len(order))):
        return v.value
    return builder.shuffle_vector(v.value, v.value, ir.Constant(vector(I32, len(order)), order))


def _lanes(builder, v, start, count):
    return builder.shuffle_vector(v, v, ir.Constant(vector(I32, count),
                                                    list(range(start, start + count))))


def _trap(builder):
    """``llvm.trap``: code numba types for a branch the caller never takes with these types."""
    builder.call(cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.trap"), [])


def make_group_dot(target: Target, rows: int, group_lanes: int, per_step: int | None = None):
    """The int8 dot intrinsic of ``target`` for weights with a scale per group of inputs.

    ``group_dot(w, woff, wstride, x, xoff, bpg, groups, scales, soff, sstride, xneg,
    xnoff)`` is, for each of ``rows`` weight rows ``i`` (as :func:`make_scaled_dot`), the
    float64 ``sum_g scales[g] * S_g`` over ``groups`` groups, ``S_g`` the exact int32 sum
    of ``trit * q`` of group g (``xneg[xnoff + g]`` is minus its sum of ``q``).

    An int32 lane of a block's sum gathers 16 consecutive inputs (4 on the portable
    level): a group is ``group_lanes`` adjacent lanes of one block (``bpg`` is then 1) or,
    with ``group_lanes`` the whole vector, ``bpg`` whole blocks. As many groups at a time
    as a vector has lanes (a step), their blocks' lane sums merge (:func:`_merge`) into
    one vector of group sums, put in group order, which adds the groups' ``xneg``; each
    ``SLOTS`` of them turn to float64 and meet their scales in one multiply-add: group
    ``g`` adds into float64 slot ``g % SLOTS``, in group order, and the slots are summed
    by halves (``horizontal_sum``). The products are exact (``|S_g| < 2**29``), so these
    bits are the rescale's definition: the integer GEMM (:mod:`.gemm`) and every other
    int8 path add in the same order, and a row's output does not depend on the batch it
    came in.
    """
    size, lanes = target.block, _sum_lanes(target, False)
    per_step = per_step or lanes  # scale groups a step
    if per_step % SLOTS or per_step > lanes:
        raise ValueError(f"no group dot of {per_step} groups a step on {lanes} lanes")
    units = per_step * group_lanes // lanes  # vectors merged a step: blocks, or bpg blocks
    per_block = lanes // group_lanes  # groups a unit holds
    pack = target.int8 != "portable"  # x86: vpackssdw + vpmaddwd merge lanes
    lane_inputs = 16 if pack else 4
    # one chain a block (a step's blocks are independent); groups of several blocks loop
    # with SUM_INT8's chains (one chain ran their multiply-adds at its latency)
    sum_int8 = (functools.partial(sum_int8_vnni, chains=1) if target.int8 == "vnni"
                else SUM_INT8[target.int8])

    @intrinsic
    def group_dot(typingctx, w, woff, wstride, x, xoff, bpg, groups, scales, soff, sstride,
                  xneg, xnoff):
        if not (_operands_ok(w, x)
                and isinstance(scales, types.Array) and scales.dtype == types.float32
                and isinstance(xneg, types.Array) and xneg.dtype == types.int32):
            return None
        sig = types.UniTuple(types.float64, rows)(
            w, types.intp, types.intp, x, types.intp, types.intp, types.intp, scales,
            types.intp, types.intp, xneg, types.intp)

        def codegen(context, builder, sig, args):
            if sig.args[3].dtype != types.int8:  # typed beside the float branches, never run
                _trap(builder)
                return ir.Constant(context.get_value_type(sig.return_type), ir.Undefined)
            (_, woff, wstride, _, xoff, bpg, groups, _, soff, sstride, _, xnoff) = args
            ty = woff.type

            def c(v):
                return ir.Constant(ty, v)

            def at(k, offset, elt):
                return pointer(context, builder, sig.args[k], args[k], offset, elt)

            wps = [at(0, builder.add(woff, builder.mul(wstride, c(i))), I8) for i in range(rows)]
            sps = [at(7, builder.add(soff, builder.mul(sstride, c(i))), F32) for i in range(rows)]
            xp, xn = at(3, xoff, I8), at(10, xnoff, I32)
            vs = vector(F64, SLOTS)
            slots = [cgutils.alloca_once_value(builder, ir.Constant(vs, None)) for _ in range(rows)]
            zero = ir.Constant(vector(I32, lanes), None)

            def unit(u, per_unit):
                """Each row's int32 lane sums of unit ``u`` (a block, or ``per_unit`` blocks)."""
                first = builder.mul(u, per_unit)
                total = sum_int8 if isinstance(per_unit, ir.Constant) else SUM_INT8[target.int8]
                return total(builder, [builder.gep(wp, [builder.mul(first, c(size))])
                                          for wp in wps],
                                builder.gep(xp, [builder.mul(first, c(4 * size))]),
                                per_unit, size, [zero] * rows)

            def sums(j, v, per_unit):
                """Unit ``j``'s lane sums ``v`` of a step as a :class:`_Sums`."""
                inputs = lane_inputs if isinstance(per_unit, ir.Constant) else None
                return _Sums(v, tuple(j * per_block + i // group_lanes for i in range(lanes)),
                             inputs)

            def load_at(base, g0, elt, count, mask):
                ptr = builder.bitcast(builder.gep(base, [g0]), vector(elt, count).as_pointer())
                return (builder.load(ptr, align=4) if mask is None
                        else masked_load(builder, ptr, mask))

            def rescale(g0, stacks, mask):
                """Each row's slots += scales * (group sums + xneg) for groups g0.. (``mask``).

                ``stacks``: each row's units merged (:func:`_merge`), one lane a group.
                """
                xg = load_at(xn, g0, I32, per_step, mask)
                for stack, sp, slot in zip(stacks, sps, slots, strict=True):
                    (merged, _), = stack
                    total = builder.add(_in_order(builder, merged), xg)
                    for k in range(0, per_step, SLOTS):  # SLOTS groups at a time, in order
                        part = None if mask is None else _lanes(builder, mask, k, SLOTS)
                        scale = builder.bitcast(load_at(sp, builder.add(g0, c(k)), I32, SLOTS,
                                                        part), vector(F32, SLOTS))
                        prod = builder.fmul(builder.sitofp(_lanes(builder, total, k, SLOTS), vs),
                                            builder.fpext(scale, vs), flags=("contract",))
                        builder.store(builder.fadd(builder.load(slot), prod,
                                                   flags=("contract",)), slot)

            def steps(per_unit):
                with cgutils.for_range(builder, builder.udiv(groups, c(per_step))) as loop:
                    step = loop.index
                    stacks = [[] for _ in range(rows)]
                    for j in range(units):
                        for stack, v in zip(stacks, unit(builder.add(builder.mul(step, c(units)),
                                                                     c(j)), per_unit),
                                            strict=True):
                            _merge(builder, stack, sums(j, v, per_unit), pack)
                    rescale(builder.mul(step, c(per_step)), stacks, None)

            # groups of one block (or in one) as straight-line code: LLVM schedules the
            # blocks of a step together (a loop of one block each kept them apart)
            per_unit = c(1) if group_lanes < lanes else bpg  # blocks of a unit
            with builder.if_else(builder.icmp_unsigned("==", per_unit, c(1))) as (one, more):
                with one:
                    steps(c(1))
                with more:
                    steps(per_unit)
            left = builder.urem(groups, c(per_step))
            with builder.if_then(builder.icmp_unsigned("!=", left, c(0))):
                # the last groups: the units there are (whole blocks: the caller's rows are),
                # zeros for the rest; their scales and xneg read under a mask
                g0 = builder.sub(groups, left)
                have = builder.udiv(builder.mul(left, c(group_lanes)), c(lanes))
                held = [[cgutils.alloca_once_value(builder, zero) for _ in range(units)]
                        for _ in range(rows)]
                base = builder.udiv(builder.mul(g0, c(group_lanes)), c(lanes))
                for j in range(units):
                    with builder.if_then(builder.icmp_unsigned("<", c(j), have)):
                        for ptr, v in zip((h[j] for h in held),
                                          unit(builder.add(base, c(j)), per_unit), strict=True):
                            builder.store(v, ptr)
                mask = builder.icmp_unsigned("<", ir.Constant(vector(ty, per_step),
                                                              list(range(per_step))),
                                             broadcast(builder, left, per_step))
                stacks = [[] for _ in range(rows)]
                for stack, h in zip(stacks, held, strict=True):
                    for j, p in enumerate(h):
                        _merge(builder, stack, sums(j, builder.load(p), per_unit), pack)
                rescale(g0, stacks, mask)
            dots = [horizontal_sum(builder, builder.load(s), builder.fadd) for s in slots]
            return context.make_tuple(builder, sig.return_type, dots)

        return sig, codegen

    return group_dot


def make_lane_sums(target: Target):
    """The lane sums intrinsic of ``target``: each block's dot, left in its SIMD lanes.

    ``lane_sums(w, woff, x, xoff, nblocks, out, ooff)`` writes, for each of ``nblocks``
    blocks k, the sums of the 4 codes of each lane from ``out[ooff + k * per]``: int8
    ``x``: the int32 sums of ``code * q`` of the ``INT8_LANES`` lanes of its dot (each 16
    consecutive inputs, 4 on the portable level; ``per = INT8_LANES``); float32 ``x``:
    the float32 sums of ``trit * x`` of each byte's 4 inputs (``per = BLOCK_BYTES``). Scale
    groups of any multiple of 32 inputs then add whole lanes: the GEMV's general path.
    """
    size, lanes = target.block, target.lanes
    sum_int8 = (functools.partial(sum_int8_vnni, chains=1) if target.int8 == "vnni"
                else SUM_INT8[target.int8])

    @intrinsic
    def lane_sums(typingctx, w, woff, x, xoff, nblocks, out, ooff):
        if not (_operands_ok(w, x) and isinstance(out, types.Array)
                and out.dtype in (types.float32, types.int32)):
            return None
        sig = types.none(w, types.intp, x, types.intp, types.intp, out, types.intp)

        def codegen(context, builder, sig, args):
            if (sig.args[2].dtype == types.float32) != (sig.args[5].dtype == types.float32):
                _trap(builder)  # typed beside the other dtype's branch, never run
                return context.get_dummy_value()
            wp = pointer(context, builder, sig.args[0], args[0], args[1], I8)
            ty = args[1].type
            if sig.args[2].dtype == types.float32:
                xp = pointer(context, builder, sig.args[2], args[2], args[3], F32)
                op = pointer(context, builder, sig.args[5], args[5], args[6], F32)
                vf = vector(F32, lanes)
                parts = {}

                def body(t, scale, n, part, offset):
                    prod = builder.fmul(t, load(builder, xp, offset, vf, 1))
                    parts[part] = prod if n == 0 else builder.fadd(parts[part], prod)
                    if n == 3:  # offset is 4Bk + 3B + lanes * part: byte Bk + lanes * part
                        block = builder.udiv(builder.sub(offset, ir.Constant(
                            ty, 3 * size + lanes * part)), ir.Constant(ty, 4))
                        store(builder, parts[part], op,
                              builder.add(block, ir.Constant(ty, lanes * part)), 1)

                trit_vectors(builder, wp, args[4], target, True, body)
            else:
                xp = pointer(context, builder, sig.args[2], args[2], args[3], I8)
                op = pointer(context, builder, sig.args[5], args[5], args[6], I32)
                per = _sum_lanes(target, False)
                zero = ir.Constant(vector(I32, per), None)
                with cgutils.for_range(builder, args[4]) as loop:
                    k = loop.index
                    v, = sum_int8(builder, [builder.gep(wp, [builder.mul(k, ir.Constant(
                        ty, size))])], builder.gep(xp, [builder.mul(k, ir.Constant(ty, 4 * size))]),
                        ir.Constant(ty, 1), size, [zero])
                    store(builder, v, op, builder.mul(k, ir.Constant(ty, per)), 1)
            return context.get_dummy_value()

        return sig, codegen

    return lane_sums


def _interleave(builder, vs):
    """The 4 vectors ``vs`` of ``L`` lanes as one of ``4L``: lane ``4m + n`` is ``vs[n][m]``."""
    lanes = vs[0].type.count

    def pairs(a, b):  # lane 2m + i: (a, b)[i][m]
        return builder.shuffle_vector(a, b, ir.Constant(vector(I32, 2 * lanes), [
            i * lanes + m for m in range(lanes) for i in range(2)]))

    lo, hi = pairs(vs[0], vs[1]), pairs(vs[2], vs[3])
    return builder.shuffle_vector(lo, hi, ir.Constant(vector(I32, 4 * lanes), [
        h * 2 * lanes + 2 * m + i for m in range(lanes) for h in range(2) for i in range(2)]))


def make_decode(target: Target, scaled: bool = False):
    """The decoder intrinsic of ``target``: float32 trits in their own order.

    ``decode(w, woff, out, ooff, nblocks)``: the ``4 * B * nblocks`` trits of ``nblocks``
    blocks of ``B`` bytes (from flat element ``woff`` of ``w``) at ``out[ooff:]``, trit
    ``4m + n`` (code n of byte m) in place ``4m + n``: each part's four code vectors
    (:func:`.dot_float.trit_vectors`) interleaved by two shuffles. The GEMM multiplies
    them by activations as they are, with no layout of its own. ``scaled``: a sixth
    argument, a float32 ``scale``, multiplies every trit (exactly: ``trit * scale``).
    """
    def typed(w, out):
        if not (isinstance(w, types.Array) and w.dtype == types.uint8
                and isinstance(out, types.Array) and out.dtype == types.float32):
            return None
        return types.none(w, types.intp, out, types.intp, types.intp,
                          *(types.float32,) * scaled)

    def codegen(context, builder, sig, args):
        wp = pointer(context, builder, sig.args[0], args[0], args[1], I8)
        op = pointer(context, builder, sig.args[2], args[2], args[3], F32)
        size, lanes = target.block, target.lanes
        vf = vector(F32, 4 * lanes)
        weight = broadcast(builder, args[5], lanes) if scaled else None
        codes = []

        def body(t, scale, n, part, offset):
            codes.append(t)
            if n == 3:  # the part's bytes whole: their 4 * lanes trits in order
                # offset = 4Bk + 3B + lanes * part: block k's first trit is 4Bk
                first = builder.sub(offset, ir.Constant(offset.type, 3 * size))
                at = builder.add(first, ir.Constant(offset.type, 3 * lanes * part))
                ptr = builder.bitcast(builder.gep(op, [at]), vf.as_pointer())
                builder.store(_interleave(builder, codes), ptr, align=1)
                codes.clear()

        trit_vectors(builder, wp, args[4], target, True, body, weight)
        return context.get_dummy_value()

    if scaled:
        @intrinsic
        def decode_scaled(typingctx, w, woff, out, ooff, nblocks, scale):
            sig = typed(w, out)
            return None if sig is None else (sig, codegen)

        return decode_scaled

    @intrinsic
    def decode(typingctx, w, woff, out, ooff, nblocks):
        sig = typed(w, out)
        return None if sig is None else (sig, codegen)

    return decode



dot_2bit = make_dot(TARGET)
SCALED_ROWS = 4  # weight rows per scaled dot of the GEMV: they share each load of x
scaled_dot_2bit = make_scaled_dot(TARGET)
scaled_dot_2bit_rows = make_scaled_dot(TARGET, SCALED_ROWS)
grouped_dot_2bit = make_scaled_dot(TARGET, grouped=True)  # float x, a scale per run
# groups inside a block: of 8, 16, 32 weight bytes (32, 64, 128 inputs), by size; a size of
# a block or more is the grouped dot's (float) or the whole-vector group dot's (int8)
SUB_BLOCK = tuple(b for b in (8, 16, 32) if b < BLOCK_BYTES)
grouped_dot_2bit_in = {b: make_scaled_dot(TARGET, grouped=True, group_bytes=b) for b in SUB_BLOCK}
INT8_LANES = _sum_lanes(TARGET, False)  # int32 lanes of a block's int8 sums
# groups of 128 inputs or more: a step of SLOTS groups (the merged vector folded in
# halves) keeps fewer blocks live than one of a vector's lanes (4096^2, 1 thread, kernel
# alone, min of 5 medians, 3 runs each, load ~1: g=256 102-110 -> 98-101 us, g=128
# 101-104 -> 96-107); smaller groups lose by it (one run: g=64 100 -> 110 us, g=32 128
# -> 146 us)
group_dot_2bit = {b: make_group_dot(TARGET, SCALED_ROWS, b * INT8_LANES // BLOCK_BYTES,
                                    SLOTS if b >= 32 else None)
                  for b in (*SUB_BLOCK, BLOCK_BYTES)}
# groups of several whole blocks, bpg a group: one row a dot (with four, a step's blocks
# spilled to the stack)
WHOLE = 2 * BLOCK_BYTES  # the key of groups of whole blocks (of more than one)
group_dot_2bit[WHOLE] = make_group_dot(TARGET, 1, INT8_LANES)
decode_2bit = make_decode(TARGET)
decode_2bit_scaled = make_decode(TARGET, scaled=True)
lane_sums_2bit = make_lane_sums(TARGET)
