"""Bit planes of int8 trits as LLVM IR: 64 trits to a plus and a minus word in two compares."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from . import I8, I64, load, pointer, splat, vector


@intrinsic
def trit_planes(typingctx, row, offset):
    """The plus and minus words of the 64 int8 trits from byte ``offset`` of ``row``.

    Bit ``i`` of the plus word is ``row[offset + i] == 1``, of the minus word
    ``row[offset + i] == -1``: a ``<64 x i8>`` compare whose ``<64 x i1>`` result
    is the word (``vpcmpeqb`` into a mask register and ``kmovq`` on AVX-512 BW,
    ``vpcmpeqb`` and ``vpmovmskb`` twice on AVX2). The row must hold valid trits
    and 64 bytes from ``offset`` (not bounds-checked).
    """
    if not (isinstance(row, types.Array) and row.dtype == types.int8):
        return None
    sig = types.UniTuple(types.uint64, 2)(row, types.intp)

    def codegen(context, builder, sig, args):
        base = pointer(context, builder, sig.args[0], args[0], ir.Constant(I64, 0), I8)
        block = load(builder, base, args[1], vector(I8, 64), 1)
        words = [builder.bitcast(builder.icmp_signed("==", block, splat(I8, 64, v)), I64)
                 for v in (1, -1)]
        return context.make_tuple(builder, sig.return_type, words)

    return sig, codegen
