"""Inline-PTX device operations numba-cuda 0.30 has no API for (real GPUs only).

The CUDA simulator runs none of these: every kernel that uses them has a portable
twin built from the same body (see :mod:`.gemv`).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.cuda.extending import intrinsic

_REGS = {types.uint32: ("u32", "r", 32), types.float32: ("f32", "f", None)}


@intrinsic
def load4(typingctx, a, i, k):
    """``a[i + k : i + k + 4]`` as a 4-tuple by one ``ld.global.nc.v4`` (128-bit, read-only).

    ``a``: a C-contiguous 1-D uint32 or float32 array; ``i``: a uint32 element index;
    ``k``: a small constant added in 64 bits (so it folds into the load's immediate
    offset, which a 32-bit ``i + k`` that may wrap cannot); ``i + k`` a multiple of 4
    from a 16-byte aligned base. Unchecked, like any index here.
    """
    if not (isinstance(a, types.Array) and a.ndim == 1 and a.dtype in _REGS
            and i == types.uint32 and isinstance(k, types.Integer)):
        return None
    kind, reg, _ = _REGS[a.dtype]
    sig = types.UniTuple(a.dtype, 4)(a, i, k)

    def codegen(context, builder, signature, args):
        arr = context.make_array(signature.args[0])(context, builder, args[0])
        elem = context.get_value_type(signature.args[0].dtype)
        i64 = ir.IntType(64)
        off = args[2] if args[2].type.width == 64 else builder.sext(args[2], i64)
        ptr = builder.gep(arr.data, [builder.add(builder.zext(args[1], i64), off)])
        addr = builder.ptrtoint(ptr, ir.IntType(64))
        fnty = ir.FunctionType(ir.LiteralStructType([elem] * 4), [ir.IntType(64)])
        asm = ir.InlineAsm(fnty, f"ld.global.nc.v4.{kind} {{$0, $1, $2, $3}}, [$4];",
                           f"={reg},={reg},={reg},={reg},l")
        got = builder.call(asm, [addr])
        return context.make_tuple(builder, signature.return_type,
                                  [builder.extract_value(got, k) for k in range(4)])

    return sig, codegen


@intrinsic
def dp4a(typingctx, a, b, c):
    """``c + Σ_k byte_k(a) * int8(byte_k(b))`` by one ``dp4a.u32.s32`` (a unsigned, b signed)."""
    if not (a == types.uint32 and b == types.uint32 and c == types.int32):
        return None
    sig = types.int32(a, b, c)

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(i32, [i32, i32, i32])
        asm = ir.InlineAsm(fnty, "dp4a.u32.s32 $0, $1, $2, $3;", "=r,r,r,r")
        return builder.call(asm, list(args))

    return sig, codegen


@intrinsic
def prmt(typingctx, a, b, c):
    """``prmt.b32``: byte ``k`` of the result is byte ``nibble_k(c) & 7`` of ``(b, a)``.

    Bytes 0-3 are those of ``a``, 4-7 those of ``b``; the nibbles used here have no
    sign-replicate bit.
    """
    if not (a == types.uint32 and b == types.uint32 and c == types.uint32):
        return None
    sig = types.uint32(a, b, c)

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        asm = ir.InlineAsm(ir.FunctionType(i32, [i32, i32, i32]), "prmt.b32 $0, $1, $2, $3;",
                           "=r,r,r,r")
        return builder.call(asm, list(args))

    return sig, codegen


@intrinsic
def as_float(typingctx, a):
    """The float32 whose bits are uint32 ``a`` (a register move, no instruction)."""
    if a != types.uint32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(a), codegen
