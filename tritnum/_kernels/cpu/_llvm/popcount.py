"""Popcounts as LLVM IR: of one uint64 word, and of the product of two bit-plane rows."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from . import I8, I16, I64, load, pointer, vector


@intrinsic
def popcount(typingctx, x):
    """Population count of a uint64 (one ``popcnt`` instruction)."""

    def codegen(context, builder, sig, args):
        return builder.ctpop(args[0])

    return types.uint64(types.uint64), codegen


def _word_vector(builder, base, offset):
    """Four uint64 words from ``base + offset`` as 32 bytes."""
    return load(builder, base, offset, vector(I8, 32), 1)


@intrinsic
def dot_planes(typingctx, a, aoff, b, boff, nw):
    """The dot product of two bit-plane rows: ``sum popc(P) - popc(N)`` over ``nw`` words.

    ``a`` and ``b`` are uint64 arrays holding rows of ``2 * nw`` words from
    ``aoff`` and ``boff`` (plus plane, then minus plane); ``P = ap & bp | am & bm``
    marks products +1 and ``N = ap & bm | am & bp`` products -1. Four words at a
    time, counted per byte (``ctpop`` on bytes: a table lookup on AVX2) into
    byte accumulators that are widened only every 31 steps (31 * 8 < 256).
    """
    if not (isinstance(a, types.Array) and a.dtype == types.uint64
            and isinstance(b, types.Array) and b.dtype == types.uint64):
        return None
    sig = types.int64(a, types.intp, b, types.intp, types.intp)

    def codegen(context, builder, sig, args):
        ap = pointer(context, builder, sig.args[0], args[0], args[1], I64)
        bp = pointer(context, builder, sig.args[2], args[2], args[3], I64)
        nw = args[4]
        module = builder.module
        v32 = vector(I8, 32)
        ctpop8 = cgutils.get_or_insert_function(module, ir.FunctionType(v32, [v32]),
                                                "llvm.ctpop.v32i8")
        reduce16 = cgutils.get_or_insert_function(
            module, ir.FunctionType(I16, [vector(I16, 32)]), "llvm.vector.reduce.add.v32i16")
        ctpop64 = cgutils.get_or_insert_function(module, ir.FunctionType(I64, [I64]),
                                                 "llvm.ctpop.I64")
        total = cgutils.alloca_once_value(builder, ir.Constant(I64, 0))
        four = ir.Constant(nw.type, 4)
        vectors = builder.udiv(nw, four)
        chunks = builder.udiv(builder.add(vectors, ir.Constant(nw.type, 30)),
                              ir.Constant(nw.type, 31))
        accs = [cgutils.alloca_once(builder, v32) for _ in range(2)]

        def planes(w):
            return ([_word_vector(builder, ap, w), _word_vector(builder, ap, builder.add(w, nw))],
                    [_word_vector(builder, bp, w), _word_vector(builder, bp, builder.add(w, nw))])

        with cgutils.for_range(builder, chunks) as chunk:
            for acc in accs:
                builder.store(ir.Constant(v32, None), acc)
            first = builder.mul(chunk.index, ir.Constant(nw.type, 31))
            last = builder.select(builder.icmp_unsigned("<", vectors, builder.add(
                first, ir.Constant(nw.type, 31))), vectors, builder.add(first, ir.Constant(
                    nw.type, 31)))
            with cgutils.for_range_slice(builder, first, last, ir.Constant(nw.type, 1)) as (v, _):
                (xp, xm), (yp, ym) = planes(builder.mul(v, four))
                pos = builder.or_(builder.and_(xp, yp), builder.and_(xm, ym))
                neg = builder.or_(builder.and_(xp, ym), builder.and_(xm, yp))
                for acc, bits in zip(accs, (pos, neg), strict=True):
                    builder.store(builder.add(builder.load(acc), builder.call(ctpop8, [bits])),
                                  acc)
            sums = [builder.zext(builder.call(reduce16, [builder.zext(builder.load(acc), vector(
                I16, 32))]), I64) for acc in accs]
            builder.store(builder.add(builder.load(total), builder.sub(*sums)), total)
        with cgutils.for_range_slice(builder, builder.mul(vectors, four), nw,
                                     ir.Constant(nw.type, 1)) as (w, _):
            def word(base, off):
                return builder.load(builder.gep(base, [off]))
            xp, xm = word(ap, w), word(ap, builder.add(w, nw))
            yp, ym = word(bp, w), word(bp, builder.add(w, nw))
            pos = builder.call(ctpop64, [builder.or_(builder.and_(xp, yp), builder.and_(xm, ym))])
            neg = builder.call(ctpop64, [builder.or_(builder.and_(xp, ym), builder.and_(xm, yp))])
            builder.store(builder.add(builder.load(total), builder.sub(pos, neg)), total)
        return builder.load(total)

    return sig, codegen
