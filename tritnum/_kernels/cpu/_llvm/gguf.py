"""The TQ2_0 and TQ1_0 block codes as LLVM vector IR: 256 float32 values to their code bytes.

``encode_tq2(x, xoff, inv, qs, qoff)`` writes the 64 TQ2_0 code bytes of the
block ``x[xoff:xoff + 256]`` (flat element offset of a float32 array) at flat
byte ``qoff`` of the C-contiguous uint8 array ``qs``; ``encode_tq1`` the 52
TQ1_0 bytes (``qs[48]`` then ``qh[4]``). ``inv`` is the block's ``1 / d`` as
``..shared.gguf.block_inverse`` gives it; the codes follow
``..shared.gguf``: ``1 + (v >= 0.5) - (v <= -0.5)`` for ``v = x * inv`` (a NaN
gives 1). ``absmax_bits(bits, off)`` is the largest ``bits & 0x7FFFFFFF`` of
256 float32 bit patterns (``bits[off:off + 256]``, a uint32 view), or 0x7FC00000
if one is a NaN (as ``..shared.floatbits.block_absmax_bits``).

Each run of contiguous values whose codes share bytes is one vector of
``lanes`` float32 (16 on the AVX-512 level of :mod:`tritnum._isa`, 8 else;
LLVM lowers the compares into mask registers there): TQ2_0 sums the 4 codes of
a byte as ``sum(4^n code_n)`` and TQ1_0 its base-3 digits as ``q = sum(3^(4-n)
code_n)`` in int8 lanes, by masked adds of the weights (see :func:`_digit_sum`);
TQ1_0 then divides ``256 q + 242`` by 243 as a multiply-shift in int32 lanes.
With the absmax as one tree of vector maxima, a 4096 x 4096 block encode
takes 2.4-2.5 ms on one Zen 5 core, against 6.1 (TQ2_0) and 7.1 ms (TQ1_0)
with the numba loops of ``..shared.gguf`` (reading the input alone: 1.4-1.7
ms). Not bounds-checked: the caller passes whole blocks.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ...._isa import ISA, TABLE
from . import F32, I8, I32, broadcast, load, pointer, splat, store, vector


def lanes_of(level: str) -> int:
    """float32 lanes of the vectors at ``level``: an AVX-512 register, else an AVX2 one."""
    return TABLE[level].float_lanes


def _digit_sum(builder, xp, inv, runs, count):
    """int8 lanes ``sum(w * code)`` over ``runs = [(offset, w), ...]`` of ``count`` values.

    A code is ``1 + (v >= 0.5) - (v <= -0.5)``, so the sum is ``sum(w)`` plus ``w``
    where ``v >= 0.5`` minus ``w`` where ``v <= -0.5``: masked adds and subtractions
    (results below 256; the int8 lanes wrap in between).
    """
    vf, vb = vector(F32, count), vector(I8, count)
    scale = broadcast(builder, inv, count)
    half = ir.Constant(vf, [ir.Constant(F32, 0.5)] * count)
    total = splat(I8, count, sum(w for _, w in runs))
    for offset, w in runs:
        v = builder.fmul(load(builder, xp, ir.Constant(I32, offset), vf, 4), scale)
        weight, zero = splat(I8, count, w), ir.Constant(vb, None)
        total = builder.add(total, builder.select(builder.fcmp_ordered(">=", v, half),
                                                  weight, zero))
        total = builder.sub(total, builder.select(builder.fcmp_ordered("<=", v, builder.fneg(
            half)), weight, zero))
    return total


def _tq2(builder, xp, inv, qp, lanes):
    """Byte 32 h + k holds values 128 h + k + 32 n at bits 2 n."""
    for h in range(2):
        for part in range(32 // lanes):
            runs = [(128 * h + 32 * n + lanes * part, 4 ** n) for n in range(4)]
            store(builder, _digit_sum(builder, xp, inv, runs, lanes), qp,
                  ir.Constant(I32, 32 * h + lanes * part), 1)


def _tq1(builder, xp, inv, qp, lanes):
    """Base-3 bytes: ``qs[k]`` of values k + 32 n, ``qs[32 + k]`` of 160 + k + 16 n, ``qh``.

    ``qh``'s fifth digit is 0: its 4 digits have weights 81, 27, 9 and 3.
    """
    for first, count, start, digits in ((0, 32, 0, 5), (32, 16, 160, 5), (48, 4, 240, 4)):
        width = min(lanes, count)
        for part in range(count // width):
            runs = [(start + count * n + width * part, 3 ** (4 - n)) for n in range(digits)]
            q = builder.zext(_digit_sum(builder, xp, inv, runs, width), vector(I32, width))
            # (256 q + 242) // 243 == ((256 q + 242) * 17262) >> 22 for q <= 242
            byte = builder.lshr(builder.add(builder.mul(q, splat(I32, width, 256 * 17262)),
                                            splat(I32, width, 242 * 17262)),
                                splat(I32, width, 22))
            store(builder, builder.trunc(byte, vector(I8, width)), qp,
                  ir.Constant(I32, first + width * part), 1)


def _make_encoder(body, lanes):
    @intrinsic
    def encode(typingctx, x, xoff, inv, qs, qoff):
        if not (isinstance(x, types.Array) and x.dtype == types.float32 and x.layout == "C"
                and isinstance(qs, types.Array) and qs.dtype == types.uint8
                and qs.layout == "C"):
            return None
        sig = types.void(x, types.intp, types.float32, qs, types.intp)

        def codegen(context, builder, sig, args):
            xp = pointer(context, builder, sig.args[0], args[0], args[1], F32)
            qp = pointer(context, builder, sig.args[3], args[3], args[4], I8)
            body(builder, xp, args[2], qp, lanes)
            return context.get_dummy_value()

        return sig, codegen

    return encode


def _smax(builder, a, b):
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(a.type, [a.type, a.type]),
                                        f"llvm.smax.v{a.type.count}i32")
    return builder.call(fn, [a, b])


def _make_absmax(lanes):
    @intrinsic
    def absmax_bits(typingctx, bits, off):
        if not (isinstance(bits, types.Array) and bits.dtype == types.uint32):
            return None
        sig = types.uint32(bits, types.intp)

        def codegen(context, builder, sig, args):
            bp = pointer(context, builder, sig.args[0], args[0], args[1], I32)
            magnitude = splat(I32, lanes, 0x7FFFFFFF)
            parts = [builder.and_(load(builder, bp, ir.Constant(I32, lanes * i),
                                       vector(I32, lanes), 4), magnitude)
                     for i in range(256 // lanes)]
            while len(parts) > 1:  # a tree: independent maxima
                parts = [_smax(builder, a, b) for a, b in zip(parts[::2], parts[1::2],
                                                             strict=True)]
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(I32, [parts[0].type]),
                f"llvm.vector.reduce.smax.v{lanes}i32")
            m = builder.call(fn, parts)
            nan = builder.icmp_signed(">", m, ir.Constant(I32, 0x7F800000))
            return builder.select(nan, ir.Constant(I32, 0x7FC00000), m)

        return sig, codegen

    return absmax_bits


def make_encoders(lanes: int):
    """``(encode_tq2, encode_tq1, absmax_bits)`` with vectors of ``lanes`` float32."""
    return _make_encoder(_tq2, lanes), _make_encoder(_tq1, lanes), _make_absmax(lanes)


encode_tq2, encode_tq1, absmax_bits = make_encoders(lanes_of(ISA))
