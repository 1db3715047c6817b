"""Unaligned word loads and stores on int8/uint8 rows (LLVM ``align 1``).

They let the word-parallel (SWAR) kernels work on rows that start at any
byte, e.g. row ``r`` of a C-contiguous ``(rows, n)`` int8 array with ``n`` not
a multiple of 8. The row must have a unit stride; offsets are in bytes and the
caller keeps them in bounds (numba's bounds checking does not see them).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from . import I8, pointer


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
