"""The 2bit GEMV's block layout and the SIMD targets of its intrinsics.

A block is ``B = BLOCK_BYTES`` bytes of 2bit codes; code n (bits 2n..2n+1) of
byte m of block k meets ``x[4Bk + Bn + m]`` (see :mod:`.gemv`). :class:`Target`
says what the intrinsics emit on one level of :mod:`tritnum._isa`;
:func:`code_vectors` splits a loaded block into its four code vectors and
:func:`block_loop` walks blocks of one or more weight rows beside the runs of
``x`` they meet (the int8 dots of :mod:`.dot_int8` and :mod:`.dot_q8k`).
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir
from numba.core import cgutils

from ...._isa import ISA, TABLE, Level
from . import I8, load, splat, vector


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


def code_vectors(builder, block, n):
    """Code n of each byte of a block: ``(block >> 2n) & 3``."""
    size = block.type.count
    return builder.and_(builder.lshr(block, splat(I8, size, 2 * n)), splat(I8, size, 3))


def block_loop(builder, count, ws, x, size, body):
    """Loop over blocks of ``size`` bytes calling ``body(codes, run)``.

    ``codes[i][n]`` is code n of the block of weight row ``ws[i]``, ``run(n, type)`` the
    activations that meet it (the rows share them: LLVM loads each once).
    """
    with cgutils.for_range(builder, count) as loop:
        k = loop.index
        codes = []
        for w in ws:
            block = load(builder, w, builder.mul(k, ir.Constant(k.type, size)),
                         vector(I8, size), 1)
            codes.append([code_vectors(builder, block, n) for n in range(4)])
        xk = builder.mul(k, ir.Constant(k.type, 4 * size))

        def run(n, ty):
            return load(builder, x, builder.add(xk, ir.Constant(k.type, size * n)), ty, 1)

        body(codes, run)
