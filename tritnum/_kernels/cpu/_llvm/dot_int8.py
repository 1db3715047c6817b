"""The int8 dot of the 2bit GEMV: unsigned 2-bit codes times int8 activations into int32 lanes.

With VNNI, ``vpdpbusd`` multiplies 4 unsigned codes by 4 signed int8 and adds them
into each int32 lane (256-bit on AVX-VNNI, 512-bit on AVX-512 VNNI with B = 64); on
AVX2, ``vpmaddubsw`` (pairs into int16: at most 4 * 2 * 2 * 128 = 2048 per block,
no saturation) and ``vpmaddwd`` into int32, as bitnet.cpp's I2_S kernel does;
portably the same sums with plain widening multiplies. Each sums ``code * x`` (the
caller subtracts the sum of ``x``) into int32 lanes, one or more weight rows at a
time (the rows share each load of ``x``): :data:`SUM_INT8` by the target's
``int8``. Nothing here is bounds-checked.
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils

from . import I8, I16, I32, splat, vector
from .gemv_target import GFNI, block_loop


def _accumulators(builder, ty, inits, chains):
    """``chains`` accumulators of type ``ty`` per row, the first starting at the row's init."""
    zero = ir.Constant(ty, None)
    return [[cgutils.alloca_once_value(builder, init if c == 0 else zero)
             for c in range(chains)] for init in inits]


def _sum_int8_maddubs(builder, ws, x, count, size, inits):
    module = builder.module
    v32i8, v16i16, v8i32 = vector(I8, 32), vector(I16, 16), vector(I32, 8)
    maddubs = cgutils.get_or_insert_function(
        module, ir.FunctionType(v16i16, [v32i8, v32i8]), "llvm.x86.avx2.pmadd.ub.sw")
    maddwd = cgutils.get_or_insert_function(
        module, ir.FunctionType(v8i32, [v16i16, v16i16]), "llvm.x86.avx2.pmadd.wd")
    accs = _accumulators(builder, v8i32, inits, 1)

    def body(codes, run):
        for (acc,), row in zip(accs, codes, strict=True):
            pairs = [builder.call(maddubs, [c, run(n, v32i8)]) for n, c in enumerate(row)]
            s = builder.add(builder.add(pairs[0], pairs[1]), builder.add(pairs[2], pairs[3]))
            widened = builder.call(maddwd, [s, splat(I16, 16, 1)])
            builder.store(builder.add(builder.load(acc), widened), acc)

    block_loop(builder, count, ws, x, size, body, GFNI)
    return [builder.load(acc) for (acc,) in accs]


def sum_int8_vnni(builder, ws, x, count, size, inits, chains=4):
    """``vpdpbusd`` into ``chains`` independent accumulators a row (code n into n % chains)."""
    vi = vector(I32, size // 4)
    dpbusd = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vi, [vi, vi, vi]),
        f"llvm.x86.avx512.vpdpbusd.{8 * size}")
    accs = _accumulators(builder, vi, inits, chains)

    def body(codes, run):
        for n in range(4):
            xs = builder.bitcast(run(n, vector(I8, size)), vi)
            for row_accs, row in zip(accs, codes, strict=True):
                acc = row_accs[n % chains]
                builder.store(builder.call(dpbusd, [builder.load(acc),
                                                    builder.bitcast(row[n], vi), xs]), acc)

    block_loop(builder, count, ws, x, size, body, GFNI)
    out = []
    for row_accs in accs:
        loads = [builder.load(acc) for acc in row_accs]
        while len(loads) > 1:
            loads = [builder.add(a, b) for a, b in zip(loads[::2], loads[1::2], strict=True)]
        out.append(loads[0])
    return out


def _sum_int8_portable(builder, ws, x, count, size, inits):
    vi16, vi32 = vector(I16, size), vector(I32, size)
    accs = _accumulators(builder, vi32, inits, 1)

    def body(codes, run):
        for (acc,), row in zip(accs, codes, strict=True):
            s = None
            for n, c in enumerate(row):
                p = builder.mul(builder.zext(c, vi16), builder.sext(run(n, vector(I8, size)), vi16))
                s = p if s is None else builder.add(s, p)
            builder.store(builder.add(builder.load(acc), builder.sext(s, vi32)), acc)

    block_loop(builder, count, ws, x, size, body)
    return [builder.load(acc) for (acc,) in accs]


SUM_INT8 = {"portable": _sum_int8_portable, "maddubs": _sum_int8_maddubs,
             "vnni": sum_int8_vnni}

