"""Unaligned word loads and stores on int8/uint8 rows (LLVM ``align 1``).

They let the word-parallel (SWAR) kernels work on rows that start at any
byte, e.g. row ``r`` of a C-contiguous ``(rows, n)`` int8 array with ``n`` not
a multiple of 8. The row must have a unit stride; offsets are in bytes and the
caller keeps them in bounds (numba's bounds checking does not see them).
:func:`load_u32_head` loads the first bytes of a word only, the others 0.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from . import I8, I32, broadcast, masked_load, pointer, vector


def _word_pointer(context, builder, array_type, array, offset, bits):
    byte = pointer(context, builder, array_type, array, offset, I8)
    return builder.bitcast(byte, ir.IntType(bits).as_pointer())


def _loader(bits, word):
    @intrinsic
    def load(typingctx, row, offset):
        def codegen(context, builder, sig, args):
            ptr = _word_pointer(context, builder, sig.args[0], args[0], args[1], bits)
            return builder.load(ptr, align=1)

        return word(row, types.intp), codegen

    return load


def _storer(bits, word):
    @intrinsic
    def store(typingctx, row, offset, value):
        def codegen(context, builder, sig, args):
            ptr = _word_pointer(context, builder, sig.args[0], args[0], args[1], bits)
            builder.store(args[2], ptr, align=1)
            return context.get_dummy_value()

        return types.none(row, types.intp, word), codegen

    return store


load_u32 = _loader(32, types.uint32)
load_u64 = _loader(64, types.uint64)
store_u32 = _storer(32, types.uint32)
store_u64 = _storer(64, types.uint64)


@intrinsic
def load_u32_head(typingctx, row, offset, count):
    """The uint32 at byte ``offset`` of its first ``count`` bytes only, the others 0.

    ``count`` of 4 or more is :func:`load_u32`; of 0 or less, 0 without a read. The
    bytes past ``count`` are not read (a masked load), so a word ending past the row
    is read safely.
    """
    def codegen(context, builder, sig, args):
        ptr = builder.bitcast(pointer(context, builder, sig.args[0], args[0], args[1], I8),
                              vector(I8, 4).as_pointer())
        lanes = ir.Constant(vector(args[2].type, 4), list(range(4)))
        mask = builder.icmp_signed("<", lanes, broadcast(builder, args[2], 4))
        return builder.bitcast(masked_load(builder, ptr, mask), I32)

    return types.uint32(row, types.intp, types.intp), codegen
