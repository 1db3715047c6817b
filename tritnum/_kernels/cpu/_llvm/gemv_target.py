"""The 2bit GEMV's block layout and the SIMD targets of its intrinsics.

A block is ``B = BLOCK_BYTES`` bytes of 2bit codes; code n (bits 2n..2n+1) of
byte m of block k meets ``x[4Bk + Bn + m]`` (see :mod:`.gemv`). :class:`Target`
says what the intrinsics emit on one level of :mod:`tritnum._isa`;
:func:`code_vectors` splits a loaded block into its four code vectors and
:func:`block_loop` walks blocks of one or more weight rows beside the runs of
``x`` they meet (the int8 dots of :mod:`.dot_int8` and :mod:`.dot_q8k`).
:func:`lay_out_blocks` puts int8 activations in that order.
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ...._isa import ISA, TABLE, Level, target_features
from . import I8, I32, I64, load, pointer, splat, store, vector


@dataclass(frozen=True)
class Target:
    """What the intrinsics emit for one level of :mod:`tritnum._isa`."""

    block: int  # weight bytes per SIMD block (4 * block trits)
    lanes: int  # float32 lanes of the float dot and the decoder
    permil: bool  # vpermilps picks the float trits
    int8: str  # "portable", "maddubs" (AVX2) or "vnni"


    @classmethod
    def of(cls, level: Level) -> Target:
        """A block is one vector; every x86 level has ``vpermilps``."""
        return cls(level.vector_bytes, level.float_lanes, level.x86, level.int8_dot)


TARGETS = {name: Target.of(level) for name, level in TABLE.items()}
TARGET = TARGETS[ISA]
BLOCK_BYTES = TARGET.block


# x86 CPUs with GFNI: vgf2p8affineqb takes code n out of each byte in one instruction, the
# shift and the mask one bit matrix (LLVM shifts bytes with it, then masks: two). 4096^2
# int8 GEMV, 1 thread, kernel alone, min of 5 medians, 2 runs each, load ~1: groups of
# 32/64/128/256 120-121/99-102/97-108/97-101 -> 112-113/97/89-91/92 us, one scale 71-72
# -> 68-69 us
# (GFNI with AVX2: an Atom without AVX has GFNI on 16-byte vectors only, and these are wider)
GFNI = {"gfni", "avx2"} <= target_features()


def _affine(builder, block, n):
    """``(block >> 2n) & 3`` as one ``vgf2p8affineqb``: output bits 0, 1 are input bits 2n, 2n+1.

    The qword matrix's byte ``7 - i`` selects the input bits of output bit ``i``.
    """
    size = block.type.count
    fn = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(block.type, [block.type, block.type, I8]),
        f"llvm.x86.vgf2p8affineqb.{8 * size}")
    rows = (1 << 2 * n) << 56 | (1 << 2 * n + 1) << 48
    matrix = builder.bitcast(splat(I64, size // 8, rows), block.type)
    return builder.call(fn, [block, matrix, ir.Constant(I8, 0)])


def code_vectors(builder, block, n, gfni=False):
    """Code n of each byte of a block: ``(block >> 2n) & 3`` (``gfni``: by :func:`_affine`)."""
    size = block.type.count
    if gfni and n:
        return _affine(builder, block, n)
    return builder.and_(builder.lshr(block, splat(I8, size, 2 * n)), splat(I8, size, 3))


def block_loop(builder, count, ws, x, size, body, gfni=False):
    """Loop over blocks of ``size`` bytes calling ``body(codes, run)``.

    ``codes[i][n]`` is code n of the block of weight row ``ws[i]`` (``gfni``: see
    :data:`GFNI`), ``run(n, type)`` the activations that meet it (the rows share them:
    LLVM loads each once).
    """
    with cgutils.for_range(builder, count) as loop:
        k = loop.index
        codes = []
        for w in ws:
            block = load(builder, w, builder.mul(k, ir.Constant(k.type, size)),
                         vector(I8, size), 1)
            codes.append([code_vectors(builder, block, n, gfni) for n in range(4)])
        xk = builder.mul(k, ir.Constant(k.type, 4 * size))

        def run(n, ty):
            return load(builder, x, builder.add(xk, ir.Constant(k.type, size * n)), ty, 1)

        body(codes, run)


@intrinsic
def lay_out_blocks(typingctx, q, qoff, laid, loff, blocks, xneg, xoff, per):
    """Int8 activations in the GEMV's order, into ``laid`` from ``loff``; minus group sums.

    ``blocks`` blocks of ``4B`` values from flat element ``qoff`` of ``q``: position
    ``4Bk + Bc + m`` gets element ``4Bk + 4m + c``, block k's ``B`` words (``4B`` int8
    values) shifted right by ``8c`` and narrowed to bytes, one vector each. ``xneg[xoff +
    g]`` (int32) gets minus the sum of elements ``32 per g .. 32 per (g + 1) - 1``: scale
    groups are multiples of 32 inputs, whole blocks or inside them. Written by hand where
    numba's loops left LLVM to vectorize them: the fused quantizer of the int8 GEMV
    compiled 0.1-0.2 s longer (its first call).
    """
    arrays = ((q, types.int8), (laid, types.int8), (xneg, types.int32))
    if not all(isinstance(a, types.Array) and a.dtype == dt for a, dt in arrays):
        return None
    sig = types.void(q, types.intp, laid, types.intp, types.intp, xneg, types.intp,
                     types.intp)

    def codegen(context, builder, sig, args):
        size = BLOCK_BYTES
        src = pointer(context, builder, sig.args[0], args[0], args[1], I8)
        dst = pointer(context, builder, sig.args[2], args[2], args[3], I8)
        out = pointer(context, builder, sig.args[5], args[5], args[6], I32)
        vi = vector(I32, size)
        zero, one = ir.Constant(I32, 0), ir.Constant(I64, 1)
        total = cgutils.alloca_once_value(builder, zero)  # of the group so far
        left = cgutils.alloca_once_value(builder, args[7])  # its sums of 32 still to come
        group = cgutils.alloca_once_value(builder, ir.Constant(I64, 0))
        with cgutils.for_range(builder, args[4]) as loop:
            at = builder.mul(loop.index, ir.Constant(loop.index.type, 4 * size))
            block = load(builder, src, at, vi, 1)
            words = ir.Constant(vi, None)  # lane m: the sum of word m's 4 values
            for c in range(4):
                code = builder.trunc(builder.ashr(block, splat(I32, size, 8 * c)),
                                     vector(I8, size))
                store(builder, code, dst, builder.add(at, ir.Constant(at.type, size * c)), 1)
                words = builder.add(words, builder.sext(code, vi))
            while words.type.count > size // 8:  # adjacent lanes summed: 8 words, 32 values
                half = words.type.count // 2
                pick = [ir.Constant(vector(I32, half), list(range(j, 2 * half, 2)))
                        for j in (0, 1)]
                words = builder.add(builder.shuffle_vector(words, words, pick[0]),
                                    builder.shuffle_vector(words, words, pick[1]))
            for i in range(size // 8):
                builder.store(builder.add(builder.load(total),
                                          builder.extract_element(words, ir.Constant(I32, i))),
                              total)
                builder.store(builder.sub(builder.load(left), one), left)
                with builder.if_then(builder.icmp_signed("==", builder.load(left),
                                                         ir.Constant(I64, 0))):
                    g = builder.load(group)
                    builder.store(builder.neg(builder.load(total)), builder.gep(out, [g]))
                    builder.store(builder.add(g, one), group)
                    builder.store(zero, total)
                    builder.store(args[7], left)
        return context.get_dummy_value()

    return sig, codegen
