"""The 2bit GEMV's SIMD dot product and decoder: numba intrinsics emitting LLVM vector IR.

``dot_2bit(w, woff, x, xoff, nblocks)`` is the dot product of ``nblocks``
blocks of ``B = BLOCK_BYTES`` bytes of 2bit codes (from flat element ``woff``
of ``w``) with the activations laid out for them (from flat element ``xoff`` of
``x``): block k, code n (bits 2n..2n+1) of byte m pairs with
``x[xoff + 4Bk + Bn + m]``. So one block is one B-byte load whose four
shifted-and-masked copies meet four contiguous B-element runs of ``x``. Codes
are ``trit + 1`` (0, 1, 2). ``decode_2bit(w, woff, out, ooff, nblocks)`` writes
the float32 trits of the blocks in that layout (the GEMM's tiles).

The target (:mod:`tritnum._isa`) sets B and the instructions:

- float32 ``x``: the sum of ``trit * x`` in float32 (see :func:`_sum_float`):
  from AVX2 on, ``vpermilps`` turns each 2-bit code into its float trit in one
  instruction (8 lanes; 16 on AVX-512, B = 64); portably a mask, a subtraction
  and a conversion do.
- int8 ``x``: with VNNI, ``vpdpbusd`` multiplies 4 unsigned codes by 4 signed
  int8 and adds them into each int32 lane (256-bit on AVX-VNNI, 512-bit on
  AVX-512 VNNI with B = 64); on AVX2, ``vpmaddubsw`` (pairs into int16: at most
  4 * 2 * 2 * 128 = 2048 per block, no saturation) and ``vpmaddwd`` into int32,
  as bitnet.cpp's I2_S kernel does; portably the same sums with plain widening
  multiplies. Returns the sum of ``code * x`` (the caller subtracts the sum of
  ``x``) as int32 (exact while ``2 * 128 * elements < 2**31``, which the caller
  keeps to).

Plain numba loops do not get there: the shifts and the int64 literals of
numba's typing leave the inner loop scalar or half-vectorized (measured on
these machines: float 3.6 ms and int8 1.8 ms for a 4096 x 4096 GEMV, against
0.85 ms and 0.29 ms with AVX2 here). The caller keeps every block in bounds:
nothing here is bounds-checked.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ...._isa import ISA
from . import F32, F64, I8, I16, I32, broadcast, horizontal_sum, load, pointer, splat, vector


@dataclass(frozen=True)
class Target:
    """What the intrinsics emit for one level of :mod:`tritnum._isa`."""

    block: int  # weight bytes per SIMD block (4 * block trits)
    lanes: int  # float32 lanes of the float dot and the decoder
    permil: bool  # vpermilps picks the float trits
    int8: str  # "portable", "maddubs" (AVX2) or "vnni"


TARGETS = {
    "portable": Target(32, 8, False, "portable"),
    "avx2": Target(32, 8, True, "maddubs"),
    "avxvnni": Target(32, 8, True, "vnni"),
    "avx512vnni": Target(64, 16, True, "vnni"),
}
TARGET = TARGETS[ISA]
BLOCK_BYTES = TARGET.block


def _codes(builder, block, n):
    """Code n of each byte of a block: ``(block >> 2n) & 3``."""
    size = block.type.count
    return builder.and_(builder.lshr(block, splat(I8, size, 2 * n)), splat(I8, size, 3))


def _blocks(builder, count, ws, x, size, body):
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
            codes.append([_codes(builder, block, n) for n in range(4)])
        xk = builder.mul(k, ir.Constant(k.type, 4 * size))

        def run(n, ty):
            return load(builder, x, builder.add(xk, ir.Constant(k.type, size * n)), ty, 1)

        body(codes, run)


def _trits_permil(builder, lanes_i32, n, weight=None):
    """AVX: ``vpermilps`` picks -1, 0 or +1 (times ``weight``) by code n of each lane."""
    lanes = lanes_i32.type.count
    vf, vi = vector(F32, lanes), vector(I32, lanes)
    permute = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vf, [vf, vi]),
        "llvm.x86.avx.vpermilvar.ps.256" if lanes == 8 else "llvm.x86.avx512.vpermilvar.ps.512")
    table = ir.Constant(vf, [ir.Constant(F32, v) for v in (-1.0, 0.0, 1.0, 0.0) * (lanes // 4)])
    if weight is not None:  # loop-invariant: LLVM scales the table once per call
        table = builder.fmul(table, weight)
    index = lanes_i32 if n == 0 else builder.lshr(lanes_i32, splat(I32, lanes, 2 * n))
    return builder.call(permute, [table, index]), 1.0


def _trits_masked(builder, lanes_i32, n, exact=False, weight=None):
    """Portable: ``b & (3 << 2n)`` is ``code * 4**n``; minus ``4**n``, ``trit * 4**n``.

    Returns the float trit times ``4**n`` (and ``weight``) and ``4**-n`` to scale it
    back, or with ``exact`` the trit itself (one shift more).
    """
    lanes = lanes_i32.type.count
    field = builder.and_(lanes_i32, splat(I32, lanes, 3 << (2 * n)))
    trit = builder.sub(field, splat(I32, lanes, 1 << (2 * n)))
    if exact and n:
        trit = builder.ashr(trit, splat(I32, lanes, 2 * n))
    t = builder.sitofp(trit, vector(F32, lanes))
    if weight is not None:
        t = builder.fmul(t, weight)
    return t, 1.0 if exact else 4.0 ** -n


def _trit_vectors(builder, w, count, target, exact, body, weight=None):
    """``body(t, scale, n, part, offset)`` for every ``lanes`` float trits of ``count`` blocks.

    With ``weight`` (a float32 vector, or a function of the block index giving one
    for each block) the trits come multiplied by it.

    Each ``lanes`` bytes (part ``part`` of the block) are zero-extended once into
    int32 lanes and code n of every lane becomes a float trit (times ``1 / scale``:
    a power of 4 on the portable path unless ``exact``); ``offset`` is its place
    in the block layout, ``4Bk + Bn + lanes * part``.
    """
    size, lanes = target.block, target.lanes
    vi = vector(I32, lanes)
    with cgutils.for_range(builder, count) as loop:
        k = loop.index
        wk = weight(k) if callable(weight) else weight
        for part in range(size // lanes):
            off = builder.add(builder.mul(k, ir.Constant(k.type, size)),
                              ir.Constant(k.type, lanes * part))
            lanes_i32 = builder.zext(load(builder, w, off, vector(I8, lanes), 1), vi)
            for n in range(4):
                if target.permil:
                    t, scale = _trits_permil(builder, lanes_i32, n, wk)
                else:
                    t, scale = _trits_masked(builder, lanes_i32, n, exact, wk)
                offset = builder.add(builder.mul(k, ir.Constant(k.type, 4 * size)),
                                     ir.Constant(k.type, size * n + lanes * part))
                body(t, scale, n, part, offset)


def _float_chains(target) -> int:
    """Accumulators per code n of the float dot: one per part of a block on AVX-512, else two.

    AVX-512's 32 registers hold the 16. Measured (4096 x 4096, 1 thread): group-scaled
    weights (g=256, one block a group) took 1.17x the per-tensor time with two, where
    the FMA latency and throughput are both at their bound; 1.09-1.15x with four.
    """
    return target.block // target.lanes if target.lanes == 16 else 2


def _float_accumulators(builder, target):
    """The float dot's accumulators: :func:`_float_chains` per code n (they hide the latency)."""
    vf = vector(F32, target.lanes)
    return [cgutils.alloca_once_value(builder, ir.Constant(vf, None))
            for _ in range(4 * _float_chains(target))]


def _accumulate_float(builder, w, x, count, target, accs, weight=None):
    """Add ``trit * x`` (times ``weight``) into ``accs``; returns the scale of each code n."""
    vf = vector(F32, target.lanes)
    scales = [1.0] * 4

    def body(t, scale, n, part, offset):
        scales[n] = scale
        chains = _float_chains(target)
        acc = accs[chains * n + part % chains]
        prod = builder.fmul(t, load(builder, x, offset, vf, 1), flags=("contract",))
        builder.store(builder.fadd(builder.load(acc), prod, flags=("contract",)), acc)

    _trit_vectors(builder, w, count, target, False, body, weight)
    return scales


def _float_total(builder, accs, scales, target):
    """Lanes whose sum is the float dot: the accumulators, each code n times its scale."""
    vf = vector(F32, target.lanes)
    total = None
    for n in range(4):
        chains = _float_chains(target)
        sums = [builder.load(acc) for acc in accs[chains * n:chains * (n + 1)]]
        while len(sums) > 1:
            sums = [builder.fadd(a, b) for a, b in zip(sums[::2], sums[1::2], strict=True)]
        part = sums[0]
        part = builder.fmul(part, ir.Constant(vf, [ir.Constant(F32, scales[n])] * target.lanes))
        total = part if total is None else builder.fadd(total, part)
    return total


def _sum_float(builder, w, x, count, target):
    """Lanes whose sum is that of ``trit * x``."""
    accs = _float_accumulators(builder, target)
    return _float_total(builder, accs, _accumulate_float(builder, w, x, count, target, accs),
                        target)


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

    _blocks(builder, count, ws, x, size, body)
    return [builder.load(acc) for (acc,) in accs]


def _sum_int8_vnni(builder, ws, x, count, size, inits, chains=4):
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

    _blocks(builder, count, ws, x, size, body)
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

    _blocks(builder, count, ws, x, size, body)
    return [builder.load(acc) for (acc,) in accs]


_SUM_INT8 = {"portable": _sum_int8_portable, "maddubs": _sum_int8_maddubs,
             "vnni": _sum_int8_vnni}


def _sum_lanes(target: Target, is_float: bool) -> int:
    if is_float:
        return target.lanes
    return {"portable": target.block, "maddubs": 8, "vnni": target.block // 4}[target.int8]


def _lane_sums(context, builder, sig, args, target):
    """``(lanes, is_int8, x pointer)``: the lanes summing to the dot of ``args``' blocks."""
    wp = pointer(context, builder, sig.args[0], args[0], args[1], I8)
    if sig.args[2].dtype == types.float32:
        xp = pointer(context, builder, sig.args[2], args[2], args[3], F32)
        return _sum_float(builder, wp, xp, args[4], target)
    xp = pointer(context, builder, sig.args[2], args[2], args[3], I8)
    zero = ir.Constant(vector(I32, _sum_lanes(target, False)), None)
    return _SUM_INT8[target.int8](builder, [wp], xp, args[4], target.block, [zero])[0]


def _operands_ok(w, x) -> bool:
    return (isinstance(w, types.Array) and w.dtype == types.uint8
            and isinstance(x, types.Array) and x.dtype in (types.float32, types.int8))


def make_dot(target: Target):
    """The dot product intrinsic of ``target``."""
    @intrinsic
    def dot(typingctx, w, woff, x, xoff, nblocks):
        if not _operands_ok(w, x):
            return None
        result = types.float32 if x.dtype == types.float32 else types.int32
        sig = result(w, types.intp, x, types.intp, types.intp)

        def codegen(context, builder, sig, args):
            lanes = _lane_sums(context, builder, sig, args, target)
            add = builder.fadd if sig.return_type == types.float32 else builder.add
            return horizontal_sum(builder, lanes, add)

        return sig, codegen

    return dot


def _fold(builder, v, lanes):
    """Lanes ``i`` and ``i + lanes`` (and so on) of ``v`` added: ``lanes`` lanes."""
    while v.type.count > lanes:
        half = v.type.count // 2
        lo = builder.shuffle_vector(v, v, ir.Constant(vector(I32, half), list(range(half))))
        hi = builder.shuffle_vector(v, v, ir.Constant(vector(I32, half),
                                                      list(range(half, 2 * half))))
        v = builder.add(lo, hi) if isinstance(v.type.element, ir.IntType) else builder.fadd(lo, hi)
    return v


SCALED_LANES = 8  # float64 lanes of the scaled dot's accumulators


def _add_scaled(builder, total, part, scale, narrow):
    """``total += part * scale`` of int32 lanes: in float32 (``narrow``) or float64."""
    if narrow:
        part = builder.sitofp(part, total.type.pointee)
    else:
        part = builder.sitofp(_fold(builder, part, SCALED_LANES), total.type.pointee)
        scale = builder.fpext(scale, F64)
    scaled = builder.fmul(part, broadcast(builder, scale, part.type.count), flags=("contract",))
    builder.store(builder.fadd(builder.load(total), scaled, flags=("contract",)), total)


def make_scaled_dot(target: Target, rows: int = 1, grouped: bool = False):
    """The scaled dot intrinsic of ``target``, for weights with one scale per segment.

    ``scaled_dot(w, woff, wstride, x, xoff, nblocks, segments, scales, soff, sstride,
    xneg, xnoff)`` is, for each of ``rows`` weight rows ``i`` (from flat element
    ``woff + i * wstride`` of ``w``, scales from ``soff + i * sstride``),
    ``sum_g scales[g] * (dot_g + xneg[xnoff + g])`` in float64 over ``segments``
    consecutive runs of ``nblocks`` blocks, ``dot_g`` the dot of run g. int8 ``x``:
    ``dot_g`` is the sum of ``code * q``; ``xneg`` (int32, minus the run's sum of
    ``q``) starts the first accumulator, so each run's sum is exact in int32. The
    rows share each load of ``x``. Each run's lanes are folded to ``SCALED_LANES``,
    scaled and added as a vector: no horizontal sum per scale group. float32 ``x``:
    ``xneg`` is not read. Returns a float64, or a tuple of ``rows`` of them.

    ``grouped`` (int8 ``x``, for short segments): each run's int32 lanes are converted
    to float32 as they are (exact below ``2**24``: a lane of a run of up to 1024
    inputs stays below ``2**18``, minus the run's sum of ``q`` included), scaled and
    added in float32: a conversion and an FMA a run, in place of the fold, the
    float64 conversion and the adds of four VNNI chains (one chain per run: the rows
    and the runs are independent). Measured at 4096 x 4096, group 256, 1 thread,
    AVX-512: 1.64x the per-tensor time before, 1.24x after. The float32 sums add a
    relative error of about ``2**-24`` per group. ``grouped`` with float32 ``x`` (for
    weights with more than one scale a row): one loop over all the blocks, each block's
    trits times its run's scale, instead of a loop per run; the same sums.
    """
    @intrinsic
    def scaled_dot(typingctx, w, woff, wstride, x, xoff, nblocks, segments, scales, soff,
                   sstride, xneg, xnoff):
        if not (_operands_ok(w, x) and isinstance(scales, types.Array)
                and scales.dtype == types.float32 and isinstance(xneg, types.Array)
                and xneg.dtype == types.int32):
            return None
        result = types.float64 if rows == 1 else types.UniTuple(types.float64, rows)
        sig = result(w, types.intp, types.intp, x, types.intp, types.intp, types.intp,
                     scales, types.intp, types.intp, xneg, types.intp)

        def codegen(context, builder, sig, args):
            is_float = sig.args[3].dtype == types.float32
            (_, woff, wstride, _, xoff, nblocks, segments, _, soff, sstride, _, xnoff) = args

            def at(k, offset, elt):
                return pointer(context, builder, sig.args[k], args[k], offset, elt)

            def row(i, offset, stride):
                return builder.add(offset, builder.mul(stride, ir.Constant(stride.type, i)))

            wps = [at(0, row(i, woff, wstride), I8) for i in range(rows)]
            sps = [at(7, row(i, soff, sstride), F32) for i in range(rows)]
            xp = at(3, xoff, F32 if is_float else I8)
            xn = at(10, xnoff, I32)
            size = target.block
            lanes = _sum_lanes(target, is_float)
            narrow = grouped and not is_float
            vd = vector(F32, lanes) if narrow else vector(F64, SCALED_LANES)
            code_scales = [1.0] * 4
            sum_int8 = _SUM_INT8[target.int8]
            if narrow and target.int8 == "vnni":
                sum_int8 = functools.partial(_sum_int8_vnni, chains=1)
            totals = [cgutils.alloca_once_value(builder, ir.Constant(vd, None))
                      for _ in range(rows)]
            float_accs = [_float_accumulators(builder, target) for _ in range(rows)]

            def add_runs(g, wgs, xg, count):
                """int8: each row's total += its scale * (the run's dot + xneg)."""
                first = builder.insert_element(ir.Constant(vector(I32, lanes), None),
                                               builder.load(builder.gep(xn, [g])),
                                               ir.Constant(I32, 0))
                parts = sum_int8(builder, wgs, xg, count, size, [first] * rows)
                for total, part, sp in zip(totals, parts, sps, strict=True):
                    _add_scaled(builder, total, part, builder.load(builder.gep(sp, [g])), narrow)

            def scale_at(sp, g):
                """Scale ``g`` of a row's scales ``sp``, in every lane."""
                return broadcast(builder, builder.load(builder.gep(sp, [g])), lanes)

            def float_runs(g, wgs, xg):
                """float: the scale rides on the trits, no sums to rescale per run."""
                for wg, accs, sp in zip(wgs, float_accs, sps, strict=True):
                    code_scales[:] = _accumulate_float(builder, wg, xg, nblocks, target, accs,
                                                       scale_at(sp, g))

            def narrow_runs(g, wgs, xg):
                """int8, short runs: a run of one block as straight-line code of its own.

                111 -> 98 µs at 4096 x 4096, group 256, AVX-512, 1 thread (LLVM folds each
                scale's broadcast into its FMA; the loop over one block, its loads in another
                basic block than their uses, did not).
                """
                one = builder.icmp_unsigned("==", nblocks, ir.Constant(nblocks.type, 1))
                with builder.if_else(one) as (then, otherwise):
                    with then:
                        add_runs(g, wgs, xg, ir.Constant(nblocks.type, 1))
                    with otherwise:
                        add_runs(g, wgs, xg, nblocks)

            def each_run(add):
                """``add(g, wgs, xg)`` for run ``g``: its weight rows' and ``x``'s pointers."""
                with cgutils.for_range(builder, segments) as loop:
                    g = loop.index
                    step = builder.mul(g, nblocks)
                    wgs = [builder.gep(wp, [builder.mul(step, ir.Constant(g.type, size))])
                           for wp in wps]
                    add(g, wgs, builder.gep(xp, [builder.mul(step, ir.Constant(g.type,
                                                                               4 * size))]))

            def block_scale(sp, k):
                """The scale of block ``k`` (of run ``k // nblocks``), in every lane."""
                return scale_at(sp, builder.udiv(k, nblocks))

            if is_float and grouped:  # one loop over every block, each with its run's scale:
                # 4096 x 4096, group 256, AVX-512, 1 thread: 0.78-0.83x the per-tensor speed
                # with a loop per run (of one block), 0.98-1.0x so
                blocks = builder.mul(segments, nblocks)
                for wp, accs, sp in zip(wps, float_accs, sps, strict=True):
                    code_scales[:] = _accumulate_float(builder, wp, xp, blocks, target, accs,
                                                       functools.partial(block_scale, sp))
            elif is_float:
                each_run(float_runs)
            else:
                each_run(narrow_runs if narrow else
                         lambda g, wgs, xg: add_runs(g, wgs, xg, nblocks))
            if is_float:
                sums = [builder.fpext(_fold(builder, _float_total(builder, accs, code_scales,
                                                                  target), SCALED_LANES), vd)
                        for accs in float_accs]
            else:
                sums = [builder.load(t) for t in totals]
            dots = [horizontal_sum(builder, v, builder.fadd) for v in sums]
            if narrow:
                dots = [builder.fpext(d, F64) for d in dots]
            return dots[0] if rows == 1 else context.make_tuple(builder, sig.return_type, dots)

        return sig, codegen

    return scaled_dot


def make_decode(target: Target):
    """The decoder intrinsic of ``target``: float32 trits in its dot's layout."""
    @intrinsic
    def decode(typingctx, w, woff, out, ooff, nblocks):
        if not (isinstance(w, types.Array) and w.dtype == types.uint8
                and isinstance(out, types.Array) and out.dtype == types.float32):
            return None
        sig = types.none(w, types.intp, out, types.intp, types.intp)

        def codegen(context, builder, sig, args):
            wp = pointer(context, builder, sig.args[0], args[0], args[1], I8)
            op = pointer(context, builder, sig.args[2], args[2], args[3], F32)
            vf = vector(F32, target.lanes)

            def body(t, scale, n, part, offset):
                ptr = builder.bitcast(builder.gep(op, [offset]), vf.as_pointer())
                builder.store(t, ptr, align=1)

            _trit_vectors(builder, wp, args[4], target, True, body)
            return context.get_dummy_value()

        return sig, codegen

    return decode


# Q8_K (llama.cpp): within each 32-byte block, position 16a + 2i + j takes byte 16a + i + 8j,
# so that the two bytes each maddubs pair adds, and the two 16-byte halves added after it,
# share ``byte % 8``: ggml's lane of the block's values 4 * byte .. 4 * byte + 3.
Q8K_ROWS = 2  # rows of x per weight decode in dot_q8k_rows
Q8K_BYTE_ORDER = tuple(16 * a + i + 8 * j for a in range(2) for i in range(8) for j in range(2))


def _q8k_pairs(builder, codes, run, avx2):
    """``<16 x i16>``: lane l sums code * x over positions 2l, 2l + 1 of the four code runs."""
    v32i8, v16i16 = vector(I8, 32), vector(I16, 16)
    if avx2:
        maddubs = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(v16i16, [v32i8, v32i8]), "llvm.x86.avx2.pmadd.ub.sw")
        pairs = [builder.call(maddubs, [c, run(n)]) for n, c in enumerate(codes)]
        return builder.add(builder.add(pairs[0], pairs[1]), builder.add(pairs[2], pairs[3]))
    v32i16 = vector(I16, 32)
    s = None
    for n, c in enumerate(codes):
        p = builder.mul(builder.zext(c, v32i16), builder.sext(run(n), v32i16))
        s = p if s is None else builder.add(s, p)
    even = ir.Constant(vector(I32, 16), list(range(0, 32, 2)))
    odd = ir.Constant(vector(I32, 16), list(range(1, 32, 2)))
    return builder.add(builder.shuffle_vector(s, s, even), builder.shuffle_vector(s, s, odd))


def _dot_q8k(builder, w, xs, csums, xds, scales, groups, per_scale, avx2):
    """The AVX2 ``ggml_vec_dot_tq2_0_q8_K`` of ggml: one weight row against ``len(xs)`` rows.

    Per block of 256 values: the weight bytes are shuffled and split into codes
    once, then for each row the int32 lanes (exact; at most 2 * 4 * 4 * 2 * 128 =
    8192 per int16 lane before the chunk sums ``csums`` come off), converted to
    float32, times ``xd[b] * scales[b // per_scale]`` (float32), added to the
    row's float32 lane sums; then each row's lanes are summed in
    ``hsum_float_8``'s order. Plain ``fmul``/``fadd`` without fast-math flags:
    never fused into an FMA. Returns one float32 value per row.
    """
    v32i8, v8i32, v8f = vector(I8, 32), vector(I32, 8), vector(F32, 8)
    order = ir.Constant(vector(I32, 32), list(Q8K_BYTE_ORDER))
    low = ir.Constant(vector(I32, 8), list(range(8)))
    high = ir.Constant(vector(I32, 8), list(range(8, 16)))
    accs = [cgutils.alloca_once_value(builder, ir.Constant(v8f, None)) for _ in xs]
    with cgutils.for_range(builder, groups) as outer:
        weight_scale = builder.load(builder.gep(scales, [outer.index]))
        with cgutils.for_range(builder, per_scale) as inner:
            b = builder.add(builder.mul(outer.index, per_scale), inner.index)
            pairs = [None] * len(xs)
            for h in range(2):
                woff = builder.add(builder.mul(b, ir.Constant(b.type, 64)),
                                   ir.Constant(b.type, 32 * h))
                block = load(builder, w, woff, v32i8, 1)
                block = builder.shuffle_vector(block, block, order)
                codes = [_codes(builder, block, n) for n in range(4)]
                xoff = builder.add(builder.mul(b, ir.Constant(b.type, 256)),
                                   ir.Constant(b.type, 128 * h))
                for i, x in enumerate(xs):

                    def run(n, x=x, xoff=xoff):
                        return load(builder, x, builder.add(xoff, ir.Constant(b.type, 32 * n)),
                                    v32i8, 1)

                    part = _q8k_pairs(builder, codes, run, avx2)
                    pairs[i] = part if pairs[i] is None else builder.add(pairs[i], part)
            for acc, part, csum, xd in zip(accs, pairs, csums, xds, strict=True):
                lanes = builder.add(builder.shuffle_vector(part, part, low),
                                    builder.shuffle_vector(part, part, high))
                chunk_sums = load(builder, csum, builder.mul(b, ir.Constant(b.type, 8)), v8i32, 4)
                lanes = builder.sub(builder.sext(lanes, v8i32), chunk_sums)
                scale = builder.fmul(builder.load(builder.gep(xd, [b])), weight_scale)
                product = builder.fmul(builder.sitofp(lanes, v8f), broadcast(builder, scale, 8))
                builder.store(builder.fadd(builder.load(acc), product), acc)
    return [horizontal_sum(builder, builder.load(acc), builder.fadd) for acc in accs]


# VNNI (one row): per 64-byte block, position 32h + 4L + k takes byte 8(k + 4h) + L, so that each
# int32 lane of ``vpdpbusd`` sums four bytes of one ggml lane L (``byte % 8``); the two halves h
# (the upper 8 lanes of a 512-bit vector, or a second 256-bit one) are added after the block.
Q8K_VNNI_ORDER = tuple(8 * (k + 4 * h) + lane for h in range(2) for lane in range(8)
                       for k in range(4))


def _dot_q8k_vnni(builder, ws, x, csum, xd, scales, groups, per_scale, size):
    """:func:`_dot_q8k` of weight rows ``ws`` against one row of ``x``, on ``vpdpbusd``.

    ``size``-byte vectors (32 or 64); ``scales`` the rows' scales, ``csum`` minus the
    chunk sums.

    The block's codes meet the activations laid out as :data:`Q8K_VNNI_ORDER` says
    (run n of a block: position p holds the value of code n of byte ``order[p]``),
    so the int32 sums fall in ggml's lanes exactly: no int16 step, no pair adds; one
    chain of ``vpdpbusd`` a row and block, starting at minus the chunk sums. The
    weight rows share each load of ``x``, ``csum`` and ``xd``. The float32 steps
    after the sums are :func:`_dot_q8k`'s, ``xd[b] * scale`` as a vector (the same
    product in every lane); on 512-bit vectors two rows share them, one row's eight
    lanes in each half (the lanes are independent: the same additions in the same order).
    """
    vi, vb = vector(I32, size // 4), vector(I8, size)
    dpbusd = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vi, [vi, vi, vi]), f"llvm.x86.avx512.vpdpbusd.{8 * size}")
    halves = 64 // size
    orders = [ir.Constant(vector(I32, size), list(Q8K_VNNI_ORDER[size * h:size * (h + 1)]))
              for h in range(halves)]
    together = 2 if halves == 1 and len(ws) % 2 == 0 else 1  # rows in one float vector
    pairs = [ws[i:i + together] for i in range(0, len(ws), together)]
    width = 8 * len(pairs[0])
    vf = vector(F32, width)
    accs = [cgutils.alloca_once_value(builder, ir.Constant(vf, None)) for _ in pairs]
    with cgutils.for_range(builder, groups) as outer:
        row_scales = [builder.load(builder.gep(sp, [outer.index])) for sp in scales]
        weight_scales = []
        for k in range(0, len(ws), len(pairs[0])):  # [scale a] * 8 + [scale b] * 8
            v = ir.Constant(vf, None)
            for lane in range(width):
                v = builder.insert_element(v, row_scales[k + lane // 8], ir.Constant(I32, lane))
            weight_scales.append(v)
        with cgutils.for_range(builder, per_scale) as inner:
            b = builder.add(builder.mul(outer.index, per_scale), inner.index)
            first = load(builder, csum, builder.mul(b, ir.Constant(b.type, 8)),
                         vector(I32, 8), 4)
            if halves == 1:  # minus the chunk sums in the lower 8 lanes
                first = builder.shuffle_vector(first, ir.Constant(vector(I32, 8), None),
                                               ir.Constant(vector(I32, 16), list(range(16))))
            chains = [first] * len(ws)
            for h in range(halves):  # 256-bit: both halves' sums in the same 8 lanes
                xv = [builder.bitcast(load(builder, x, builder.add(
                    builder.mul(b, ir.Constant(b.type, 256)),
                    ir.Constant(b.type, 64 * n + size * h)), vb, 1), vi) for n in range(4)]
                for i, w in enumerate(ws):
                    block = load(builder, w, builder.mul(b, ir.Constant(b.type, 64)),
                                 vector(I8, 64), 1)
                    part = builder.shuffle_vector(block, block, orders[h])
                    for n in range(4):
                        codes = builder.bitcast(_codes(builder, part, n), vi)
                        chains[i] = builder.call(dpbusd, [chains[i], codes, xv[n]])
            xd_b = broadcast(builder, builder.load(builder.gep(xd, [b])), width)
            for k, (acc, weight_scale) in enumerate(zip(accs, weight_scales, strict=True)):
                row = chains[len(pairs[0]) * k:len(pairs[0]) * (k + 1)]
                lanes = row[0]
                if halves == 1:  # [a lower + a upper | b lower + b upper], or a's alone
                    other = row[-1] if together == 2 else ir.Constant(vi, None)
                    lo = ir.Constant(vector(I32, width), [*range(8), *range(16, 24)][:width])
                    hi = ir.Constant(vector(I32, width), [*range(8, 16), *range(24, 32)][:width])
                    lanes = builder.add(builder.shuffle_vector(row[0], other, lo),
                                        builder.shuffle_vector(row[0], other, hi))
                product = builder.fmul(builder.sitofp(lanes, vf),
                                       builder.fmul(xd_b, weight_scale))
                builder.store(builder.fadd(builder.load(acc), product), acc)
    sums = []
    for acc in accs:
        v = builder.load(acc)
        for h in range(width // 8):
            lanes = builder.shuffle_vector(v, v, ir.Constant(vector(I32, 8),
                                                             list(range(8 * h, 8 * h + 8))))
            sums.append(horizontal_sum(builder, lanes, builder.fadd))
    return sums


def _make_dot_q8k(avx2: bool, rows: int, vnni: int = 0):
    @intrinsic
    def dot_q8k(typingctx, w, o, x, r, csum, xd, scales):
        """Weight row ``o`` against Q8_K rows ``r .. r + rows - 1`` (see :func:`_dot_q8k`).

        2-D arrays with unit-stride rows: ``w`` "2bit" ``(out, n / 4)`` uint8, ``x``
        ``(m, n)`` int8 laid out as ``Q8K_BYTE_ORDER`` says, ``csum`` ``(m, n / 32)``
        int32 chunk sums, ``xd`` ``(m, n / 256)`` float32, ``scales`` ``(out, groups)``
        float32 with ``groups >= 1`` dividing ``n / 256``. Returns a float32, or a
        tuple of ``rows`` of them. With ``vnni`` (the vector bytes of
        :func:`_dot_q8k_vnni`): weight rows ``o .. o + rows - 1`` against Q8_K row
        ``r``, laid out as ``Q8K_VNNI_ORDER`` says.
        """
        arrays = ((w, types.uint8), (x, types.int8), (csum, types.int32), (xd, types.float32),
                  (scales, types.float32))
        if not all(isinstance(a, types.Array) and a.ndim == 2 and a.dtype == dt
                   for a, dt in arrays):
            return None
        result = types.float32 if rows == 1 else types.UniTuple(types.float32, rows)
        sig = result(w, types.intp, x, types.intp, csum, xd, scales)

        def codegen(context, builder, sig, args):
            def row(k, index, elt):
                """Pointer to row ``index`` of array argument ``k``, and its shape."""
                arr = context.make_array(sig.args[k])(context, builder, args[k])
                stride = cgutils.unpack_tuple(builder, arr.strides, 2)[0]
                start = builder.gep(builder.bitcast(arr.data, I8.as_pointer()),
                                    [builder.mul(index, stride)])
                return builder.bitcast(start, elt.as_pointer()), cgutils.unpack_tuple(
                    builder, arr.shape, 2)

            if vnni:  # weight rows o .. o + rows - 1 against x row r
                os = [builder.add(args[1], ir.Constant(args[1].type, i)) for i in range(rows)]
                groups = row(6, args[1], F32)[1][1]
                xd, (_, blocks) = row(5, args[3], F32)
                sums = _dot_q8k_vnni(builder, [row(0, o, I8)[0] for o in os],
                                     row(2, args[3], I8)[0], row(4, args[3], I32)[0], xd,
                                     [row(6, o, F32)[0] for o in os], groups,
                                     builder.udiv(blocks, groups), vnni)
                return sums[0] if rows == 1 else context.make_tuple(builder, sig.return_type,
                                                                    sums)
            w_row, _ = row(0, args[1], I8)
            scale_row, (_, groups) = row(6, args[1], F32)
            rs = [builder.add(args[3], ir.Constant(args[3].type, i)) for i in range(rows)]
            xs = [row(2, r, I8)[0] for r in rs]
            csums = [row(4, r, I32)[0] for r in rs]
            xds = [row(5, r, F32) for r in rs]
            per_scale = builder.udiv(xds[0][1][1], groups)
            sums = _dot_q8k(builder, w_row, xs, csums, [p for p, _ in xds], scale_row, groups,
                            per_scale, avx2)
            return sums[0] if rows == 1 else context.make_tuple(builder, sig.return_type, sums)

        return sig, codegen

    return dot_q8k


_MADDUBS = TARGET.int8 != "portable"  # every x86 level has AVX2's vpmaddubsw
dot_q8k = _make_dot_q8k(_MADDUBS, 1)
dot_q8k_rows = _make_dot_q8k(_MADDUBS, Q8K_ROWS)  # the GEMM: one decode of w for Q8K_ROWS rows
dot_q8k_portable = _make_dot_q8k(False, 1)
# the GEMV's dot on VNNI levels (None elsewhere): ggml's lanes straight from vpdpbusd
Q8K_VNNI_ROWS = 4  # weight rows per dot_q8k_vnni_rows: they share each load of x
dot_q8k_vnni = _make_dot_q8k(True, 1, TARGET.block) if TARGET.int8 == "vnni" else None
dot_q8k_vnni_rows = (_make_dot_q8k(True, Q8K_VNNI_ROWS, TARGET.block) if TARGET.int8 == "vnni"
                     else None)
dot_2bit = make_dot(TARGET)
SCALED_ROWS = 4  # weight rows per scaled dot of the GEMV: they share each load of x
scaled_dot_2bit = make_scaled_dot(TARGET)
scaled_dot_2bit_rows = make_scaled_dot(TARGET, SCALED_ROWS)
grouped_dot_2bit_rows = make_scaled_dot(TARGET, SCALED_ROWS, grouped=True)
grouped_dot_2bit = make_scaled_dot(TARGET, grouped=True)  # float x, a scale per run
decode_2bit = make_decode(TARGET)
