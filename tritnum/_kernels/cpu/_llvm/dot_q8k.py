"""The Q8_K dots of the 2bit GEMV: llama.cpp's ``ggml_vec_dot_tq2_0_q8_K`` (x86 AVX2), bit for bit.

``dot_q8k`` (and ``dot_q8k_rows``, several rows of ``x`` per decode of a weight row)
sums ``code * q`` in ggml's AVX2 lanes with ``vpmaddubsw`` (plain widening
multiplies on the portable level: ``dot_q8k_portable``), then scales and adds them
in float32 in ggml's order: each lane update ``acc + lane * scale`` one
``llvm.fma`` (a GCC build's contraction) or, with ``fused`` false, an ``fmul``
then an ``fadd`` (:func:`lane_update`). On VNNI levels ``dot_q8k_vnni`` (and ``_rows``, several
weight rows against one row of ``x``) get the same lanes straight from
``vpdpbusd``, with ``x`` laid out as :data:`Q8K_VNNI_ORDER` says. Nothing here is
bounds-checked.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from . import F32, I8, I16, I32, broadcast, horizontal_sum, load, vector
from .gemv_target import GFNI, TARGET, code_vectors

# Q8_K (llama.cpp): within each 32-byte block, position 16a + 2i + j takes byte 16a + i + 8j,
# so that the two bytes each maddubs pair adds, and the two 16-byte halves added after it,
# share ``byte % 8``: ggml's lane of the block's values 4 * byte .. 4 * byte + 3.
Q8K_ROWS = 2  # rows of x per weight decode in dot_q8k_rows
Q8K_BYTE_ORDER = tuple(16 * a + i + 8 * j for a in range(2) for i in range(8) for j in range(2))


def lane_update(builder, fused, acc, lanes, scale):
    """``acc + lanes * scale`` (float32 vectors), fused or not.

    ``llvm.fma`` if ``fused`` (a Python bool), else ``fmul`` then ``fadd``, each
    rounded (no fast-math flags: LLVM never contracts them).
    """
    if fused:
        vt = acc.type
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vt, [vt] * 3),
                                             f"llvm.fma.v{vt.count}f32")
        return builder.call(fma, [lanes, scale, acc])
    return builder.fadd(acc, builder.fmul(lanes, scale))


def both_orders(builder, fused, emit):
    """``emit(True)`` where the runtime ``i1`` ``fused`` is set, ``emit(False)`` elsewhere.

    Two copies of the loops, so that neither pays for the other's choice per block.
    """
    with builder.if_else(fused) as (then, otherwise):
        with then:
            emit(True)
        with otherwise:
            emit(False)


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


def _dot_q8k(builder, w, xs, csums, xds, scales, groups, per_scale, avx2, fused):
    """The AVX2 ``ggml_vec_dot_tq2_0_q8_K`` of ggml: one weight row against ``len(xs)`` rows.

    Per block of 256 values: the weight bytes are shuffled and split into codes
    once, then for each row the int32 lanes (exact; at most 2 * 4 * 4 * 2 * 128 =
    8192 per int16 lane before the chunk sums ``csums`` come off), converted to
    float32, times ``xd[b] * scales[b // per_scale]`` (float32), added to the
    row's float32 lane sums (:func:`lane_update`, by the runtime ``i1`` ``fused``);
    then each row's lanes are summed in ``hsum_float_8``'s order. Returns one
    float32 value per row.
    """
    v32i8, v8i32, v8f = vector(I8, 32), vector(I32, 8), vector(F32, 8)
    order = ir.Constant(vector(I32, 32), list(Q8K_BYTE_ORDER))
    low = ir.Constant(vector(I32, 8), list(range(8)))
    high = ir.Constant(vector(I32, 8), list(range(8, 16)))
    accs = [cgutils.alloca_once_value(builder, ir.Constant(v8f, None)) for _ in xs]

    def blocks(fuse):
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
                    codes = [code_vectors(builder, block, n, GFNI) for n in range(4)]
                    xoff = builder.add(builder.mul(b, ir.Constant(b.type, 256)),
                                       ir.Constant(b.type, 128 * h))
                    for i, x in enumerate(xs):

                        def run(n, x=x, xoff=xoff):
                            return load(builder, x,
                                        builder.add(xoff, ir.Constant(b.type, 32 * n)), v32i8, 1)

                        part = _q8k_pairs(builder, codes, run, avx2)
                        pairs[i] = part if pairs[i] is None else builder.add(pairs[i], part)
                for acc, part, csum, xd in zip(accs, pairs, csums, xds, strict=True):
                    lanes = builder.add(builder.shuffle_vector(part, part, low),
                                        builder.shuffle_vector(part, part, high))
                    chunk_sums = load(builder, csum, builder.mul(b, ir.Constant(b.type, 8)),
                                      v8i32, 4)
                    lanes = builder.sub(builder.sext(lanes, v8i32), chunk_sums)
                    scale = builder.fmul(builder.load(builder.gep(xd, [b])), weight_scale)
                    builder.store(lane_update(builder, fuse, builder.load(acc),
                                              builder.sitofp(lanes, v8f),
                                              broadcast(builder, scale, 8)), acc)

    both_orders(builder, fused, blocks)
    return [horizontal_sum(builder, builder.load(acc), builder.fadd) for acc in accs]


# VNNI (one row): per 64-byte block, position 32h + 4L + k takes byte 8(k + 4h) + L, so that each
# int32 lane of ``vpdpbusd`` sums four bytes of one ggml lane L (``byte % 8``); the two halves h
# (the upper 8 lanes of a 512-bit vector, or a second 256-bit one) are added after the block.
Q8K_VNNI_ORDER = tuple(8 * (k + 4 * h) + lane for h in range(2) for lane in range(8)
                       for k in range(4))


def _dot_q8k_vnni(builder, ws, x, csum, xd, scales, groups, per_scale, size, fused):
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
    Codes 1-3 by one ``vgf2p8affineqb`` each where the CPU has GFNI, as the int8 dots
    (4096 x 4096 in TQ2_0 blocks, one row, 1 thread, Zen 4: 214-220 -> 206-214 µs).
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

    def blocks(fuse):
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
                            codes = builder.bitcast(code_vectors(builder, part, n, GFNI), vi)
                            chains[i] = builder.call(dpbusd, [chains[i], codes, xv[n]])
                xd_b = broadcast(builder, builder.load(builder.gep(xd, [b])), width)
                for k, (acc, weight_scale) in enumerate(zip(accs, weight_scales, strict=True)):
                    row = chains[len(pairs[0]) * k:len(pairs[0]) * (k + 1)]
                    lanes = row[0]
                    if halves == 1:  # [a lower + a upper | b lower + b upper], or a's alone
                        other = row[-1] if together == 2 else ir.Constant(vi, None)
                        vw = vector(I32, width)
                        lo = ir.Constant(vw, [*range(8), *range(16, 24)][:width])
                        hi = ir.Constant(vw, [*range(8, 16), *range(24, 32)][:width])
                        lanes = builder.add(builder.shuffle_vector(row[0], other, lo),
                                            builder.shuffle_vector(row[0], other, hi))
                    builder.store(lane_update(builder, fuse, builder.load(acc),
                                              builder.sitofp(lanes, vf),
                                              builder.fmul(xd_b, weight_scale)), acc)

    both_orders(builder, fused, blocks)
    sums = []
    for acc in accs:
        v = builder.load(acc)
        for h in range(width // 8):
            lanes = builder.shuffle_vector(v, v, ir.Constant(vector(I32, 8),
                                                             list(range(8 * h, 8 * h + 8))))
            sums.append(horizontal_sum(builder, lanes, builder.fadd))
    return sums


def make_dot_q8k(avx2: bool, rows: int, vnni: int = 0):
    @intrinsic
    def dot_q8k(typingctx, w, o, x, r, csum, xd, scales, fused):
        """Weight row ``o`` against Q8_K rows ``r .. r + rows - 1`` (see :func:`_dot_q8k`).

        2-D arrays with unit-stride rows: ``w`` "2bit" ``(out, n / 4)`` uint8, ``x``
        ``(m, n)`` int8 laid out as ``Q8K_BYTE_ORDER`` says, ``csum`` ``(m, n / 32)``
        int32 chunk sums, ``xd`` ``(m, n / 256)`` float32, ``scales`` ``(out, groups)``
        float32 with ``groups >= 1`` dividing ``n / 256``. Returns a float32, or a
        tuple of ``rows`` of them. With ``vnni`` (the vector bytes of
        :func:`_dot_q8k_vnni`): weight rows ``o .. o + rows - 1`` against Q8_K row
        ``r``, laid out as ``Q8K_VNNI_ORDER`` says. ``fused`` (bool): each lane update
        one FMA, else a multiply and an add (:func:`lane_update`).
        """
        arrays = ((w, types.uint8), (x, types.int8), (csum, types.int32), (xd, types.float32),
                  (scales, types.float32))
        if not all(isinstance(a, types.Array) and a.ndim == 2 and a.dtype == dt
                   for a, dt in arrays) or not isinstance(fused, types.Boolean):
            return None
        result = types.float32 if rows == 1 else types.UniTuple(types.float32, rows)
        sig = result(w, types.intp, x, types.intp, csum, xd, scales, types.boolean)

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
                                     builder.udiv(blocks, groups), vnni, args[7])
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
                            per_scale, avx2, args[7])
            return sums[0] if rows == 1 else context.make_tuple(builder, sig.return_type, sums)

        return sig, codegen

    return dot_q8k


_MADDUBS = TARGET.int8 != "portable"  # every x86 level has AVX2's vpmaddubsw
dot_q8k = make_dot_q8k(_MADDUBS, 1)
dot_q8k_rows = make_dot_q8k(_MADDUBS, Q8K_ROWS)  # the GEMM: one decode of w for Q8K_ROWS rows
dot_q8k_portable = make_dot_q8k(False, 1)
# the GEMV's dot on VNNI levels (None elsewhere): ggml's lanes straight from vpdpbusd
Q8K_VNNI_ROWS = 4  # weight rows per dot_q8k_vnni_rows: they share each load of x
dot_q8k_vnni = make_dot_q8k(True, 1, TARGET.block) if TARGET.int8 == "vnni" else None
dot_q8k_vnni_rows = (make_dot_q8k(True, Q8K_VNNI_ROWS, TARGET.block) if TARGET.int8 == "vnni"
                     else None)
