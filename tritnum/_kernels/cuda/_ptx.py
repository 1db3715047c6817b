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
def load4(typingctx, a, i):
    """``a[i : i + 4]`` as a 4-tuple by one ``ld.global.nc.v4`` (128-bit, read-only path).

    ``a``: a C-contiguous 1-D uint32 or float32 array; ``i``: a uint32 element index,
    a multiple of 4 from a 16-byte aligned base. Unchecked, like any index here.
    """
    if not (isinstance(a, types.Array) and a.ndim == 1 and a.dtype in _REGS
            and i == types.uint32):
        return None
    kind, reg, _ = _REGS[a.dtype]
    sig = types.UniTuple(a.dtype, 4)(a, i)

    def codegen(context, builder, signature, args):
        arr = context.make_array(signature.args[0])(context, builder, args[0])
        elem = context.get_value_type(signature.args[0].dtype)
        ptr = builder.gep(arr.data, [builder.zext(args[1], ir.IntType(64))])
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
def trit(typingctx, word, shift):
    """The trit at bit ``shift`` of a "2bit" code word as float32, without a convert.

    ``as_float(0x4B000000 | code) = 2**23 + code`` exactly, so subtracting ``2**23 + 1``
    gives ``code - 1`` exactly: a shift, an and/or (one ``LOP3``) and an add, all
    full-rate, where ``float32(code - 1)`` costs a quarter-rate ``I2F``.
    """
    if not (word == types.uint32 and isinstance(shift, types.Integer)):
        return None
    sig = types.float32(word, shift)

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        s = builder.trunc(args[1], i32) if args[1].type.width > 32 else args[1]
        code = builder.and_(builder.lshr(args[0], s), ir.Constant(i32, 3))
        magic = builder.bitcast(builder.or_(code, ir.Constant(i32, 0x4B000000)),
                                ir.FloatType())
        return builder.fsub(magic, ir.Constant(ir.FloatType(), 8388609.0))

    return sig, codegen
