"""The 2bit GEMV's SIMD dot product and decoder: numba intrinsics emitting LLVM vector IR.

``dot_2bit(w, woff, x, xoff, nblocks)`` is the dot product of ``nblocks``
blocks of ``B = BLOCK_BYTES`` bytes of 2bit codes (from flat element ``woff``
of ``w``) with the activations laid out for them (from flat element ``xoff`` of
``x``): block k, code n (bits 2n..2n+1) of byte m pairs with
``x[xoff + 4Bk + Bn + m]``. So one block is one B-byte load whose four
shifted-and-masked copies meet four contiguous B-element runs of ``x``. Codes
are ``trit + 1`` (0, 1, 2). ``decode_2bit(w, woff, out, ooff, nblocks)`` writes
the float32 trits of the blocks in that layout (the GEMM's tiles).

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

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from . import F32, F64, I8, I32, broadcast, horizontal_sum, pointer, vector
from .dot_float import accumulate_float, float_accumulators, float_total, sum_float, trit_vectors
from .dot_int8 import SUM_INT8, sum_int8_vnni
from .gemv_target import TARGET, Target


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


def _add_scaled(builder, total, part, scale, narrow):
    """``total += part * scale`` of int32 lanes: in float32 (``narrow``) or float64."""
    if narrow:
        part = builder.sitofp(part, total.type.pointee)
    else:
        part = builder.sitofp(_fold(builder, part, SCALED_LANES), total.type.pointee)
        scale = builder.fpext(scale, F64)
    scaled = builder.fmul(part, broadcast(builder, scale, part.type.count), flags=("contract",))
    builder.store(builder.fadd(builder.load(total), scaled, flags=("contract",)), total)


def make_scaled_dot(target: Target, rows: int = 1, grouped: bool = False):
    """The scaled dot intrinsic of ``target``, for weights with one scale per segment.

    ``scaled_dot(w, woff, wstride, x, xoff, nblocks, segments, scales, soff, sstride,
    xneg, xnoff)`` is, for each of ``rows`` weight rows ``i`` (from flat element
    ``woff + i * wstride`` of ``w``, scales from ``soff + i * sstride``),
    ``sum_g scales[g] * (dot_g + xneg[xnoff + g])`` in float64 over ``segments``
    consecutive runs of ``nblocks`` blocks, ``dot_g`` the dot of run g. int8 ``x``:
    ``dot_g`` is the sum of ``code * q``; ``xneg`` (int32, minus the run's sum of
    ``q``) starts the first accumulator, so each run's sum is exact in int32. The
    rows share each load of ``x``. Each run's lanes are folded to ``SCALED_LANES``,
    scaled and added as a vector: no horizontal sum per scale group. float32 ``x``:
    ``xneg`` is not read. Returns a float64, or a tuple of ``rows`` of them.

    ``grouped`` (int8 ``x``, for short segments): each run's int32 lanes are converted
    to float32 as they are (exact below ``2**24``: a lane of a run of up to 1024
    inputs stays below ``2**18``, minus the run's sum of ``q`` included), scaled and
    added in float32: a conversion and an FMA a run, in place of the fold, the
    float64 conversion and the adds of four VNNI chains (one chain per run: the rows
    and the runs are independent). Measured at 4096 x 4096, group 256, 1 thread,
    AVX-512: 1.64x the per-tensor time before, 1.24x after. The float32 sums add a
    relative error of about ``2**-24`` per group. ``grouped`` with float32 ``x`` (for
    weights with more than one scale a row): one loop over all the blocks, each block's
    trits times its run's scale, instead of a loop per run; the same sums.
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
            narrow = grouped and not is_float
            vd = vector(F32, lanes) if narrow else vector(F64, SCALED_LANES)
            code_scales = [1.0] * 4
            sum_int8 = SUM_INT8[target.int8]
            if narrow and target.int8 == "vnni":
                sum_int8 = functools.partial(sum_int8_vnni, chains=1)
            totals = [cgutils.alloca_once_value(builder, ir.Constant(vd, None))
                      for _ in range(rows)]
            float_accs = [float_accumulators(builder, target) for _ in range(rows)]

            def add_runs(g, wgs, xg, count):
                """int8: each row's total += its scale * (the run's dot + xneg)."""
                first = builder.insert_element(ir.Constant(vector(I32, lanes), None),
                                               builder.load(builder.gep(xn, [g])),
                                               ir.Constant(I32, 0))
                parts = sum_int8(builder, wgs, xg, count, size, [first] * rows)
                for total, part, sp in zip(totals, parts, sps, strict=True):
                    _add_scaled(builder, total, part, builder.load(builder.gep(sp, [g])), narrow)

            def scale_at(sp, g):
                """Scale ``g`` of a row's scales ``sp``, in every lane."""
                return broadcast(builder, builder.load(builder.gep(sp, [g])), lanes)

            def float_runs(g, wgs, xg):
                """float: the scale rides on the trits, no sums to rescale per run."""
                for wg, accs, sp in zip(wgs, float_accs, sps, strict=True):
                    code_scales[:] = accumulate_float(builder, wg, xg, nblocks, target, accs,
                                                       scale_at(sp, g))

            def narrow_runs(g, wgs, xg):
                """int8, short runs: a run of one block as straight-line code of its own.

                111 -> 98 µs at 4096 x 4096, group 256, AVX-512, 1 thread (LLVM folds each
                scale's broadcast into its FMA; the loop over one block, its loads in another
                basic block than their uses, did not).
                """
                one = builder.icmp_unsigned("==", nblocks, ir.Constant(nblocks.type, 1))
                with builder.if_else(one) as (then, otherwise):
                    with then:
                        add_runs(g, wgs, xg, ir.Constant(nblocks.type, 1))
                    with otherwise:
                        add_runs(g, wgs, xg, nblocks)

            def each_run(add):
                """``add(g, wgs, xg)`` for run ``g``: its weight rows' and ``x``'s pointers."""
                with cgutils.for_range(builder, segments) as loop:
                    g = loop.index
                    step = builder.mul(g, nblocks)
                    wgs = [builder.gep(wp, [builder.mul(step, ir.Constant(g.type, size))])
                           for wp in wps]
                    add(g, wgs, builder.gep(xp, [builder.mul(step, ir.Constant(g.type,
                                                                               4 * size))]))

            def block_scale(sp, k):
                """The scale of block ``k`` (of run ``k // nblocks``), in every lane."""
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
                each_run(narrow_runs if narrow else
                         lambda g, wgs, xg: add_runs(g, wgs, xg, nblocks))
            if is_float:
                sums = [builder.fpext(_fold(builder, float_total(builder, accs, code_scales,
                                                                  target), SCALED_LANES), vd)
                        for accs in float_accs]
            else:
                sums = [builder.load(t) for t in totals]
            dots = [horizontal_sum(builder, v, builder.fadd) for v in sums]
            if narrow:
                dots = [builder.fpext(d, F64) for d in dots]
            return dots[0] if rows == 1 else context.make_tuple(builder, sig.return_type, dots)

        return sig, codegen

    return scaled_dot


def make_decode(target: Target):
    """The decoder intrinsic of ``target``: float32 trits in its dot's layout."""
    @intrinsic
    def decode(typingctx, w, woff, out, ooff, nblocks):
        if not (isinstance(w, types.Array) and w.dtype == types.uint8
                and isinstance(out, types.Array) and out.dtype == types.float32):
            return None
        sig = types.none(w, types.intp, out, types.intp, types.intp)

        def codegen(context, builder, sig, args):
            wp = pointer(context, builder, sig.args[0], args[0], args[1], I8)
            op = pointer(context, builder, sig.args[2], args[2], args[3], F32)
            vf = vector(F32, target.lanes)

            def body(t, scale, n, part, offset):
                ptr = builder.bitcast(builder.gep(op, [offset]), vf.as_pointer())
                builder.store(t, ptr, align=1)

            trit_vectors(builder, wp, args[4], target, True, body)
            return context.get_dummy_value()

        return sig, codegen

    return decode



dot_2bit = make_dot(TARGET)
SCALED_ROWS = 4  # weight rows per scaled dot of the GEMV: they share each load of x
scaled_dot_2bit = make_scaled_dot(TARGET)
scaled_dot_2bit_rows = make_scaled_dot(TARGET, SCALED_ROWS)
grouped_dot_2bit_rows = make_scaled_dot(TARGET, SCALED_ROWS, grouped=True)
grouped_dot_2bit = make_scaled_dot(TARGET, grouped=True)  # float x, a scale per run
decode_2bit = make_decode(TARGET)
