"""The 2bit GEMV's SIMD dot product and decoder: numba intrinsics emitting LLVM vector IR.

``dot_2bit(w, woff, x, xoff, nblocks)`` is the dot product of ``nblocks``
32-byte blocks of 2bit codes (from flat element ``woff`` of ``w``) with the
activations laid out for them (from flat element ``xoff`` of ``x``): block k,
code n (bits 2n..2n+1) of byte m pairs with ``x[xoff + 128k + 32n + m]``.
So one block is one 32-byte load whose four shifted-and-masked copies meet
four contiguous 32-element runs of ``x``. Codes are ``trit + 1`` (0, 1, 2).
``decode_2bit(w, woff, out, ooff, nblocks)`` writes the float32 trits of the
blocks in that layout (the GEMM's tiles).

- float32 ``x``: the sum of ``trit * x`` in float32 (see :func:`_dot_float`):
  on AVX2, ``vpermilps`` turns each 2-bit code into its float trit in one
  instruction; elsewhere a mask, a subtraction and a conversion do.
- int8 ``x``: on AVX2, ``vpmaddubsw`` (unsigned codes times signed int8, pairs
  added into int16: at most 4 * 2 * 2 * 128 = 2048 per block, no saturation)
  and ``vpmaddwd`` into int32 lanes, as bitnet.cpp's I2_S kernel does; on other
  targets the same sums with plain widening multiplies. Returns the sum of
  ``code * x`` (the caller subtracts the sum of ``x``) as int32 (exact
  while ``128 * 2 * elements < 2**31``, which the caller keeps to).

Plain numba loops do not get there: the shifts and the int64 literals of
numba's typing leave the inner loop scalar or half-vectorized (measured on
these machines: float 3.6 ms and int8 1.8 ms for a 4096 x 4096 GEMV, against
0.85 ms and 0.29 ms here). The caller keeps every block in bounds: nothing
here is bounds-checked.
"""

from __future__ import annotations

import llvmlite.binding as llvm
from llvmlite import ir
from numba import types
from numba.core import cgutils, config
from numba.extending import intrinsic

from . import F32, I8, I16, I32, horizontal_sum, load, pointer, splat, vector


def _target_has_avx2() -> bool:
    """Whether numba compiles for a CPU with AVX2 (the host, unless NUMBA_CPU_NAME says)."""
    if config.CPU_NAME in (None, "host"):
        return bool(llvm.get_host_cpu_features().get("avx2", False))
    return "+avx2" in (config.CPU_FEATURES or "")


HAS_AVX2 = _target_has_avx2()


def _codes(builder, block, n):
    """Code n of each of the 32 bytes: ``(block >> 2n) & 3``."""
    return builder.and_(builder.lshr(block, splat(I8, 32, 2 * n)), splat(I8, 32, 3))


def _blocks(builder, count, w, x, body):
    """Loop over blocks: ``body(codes_of(n), x_run(n, type))`` for each of the 4 codes."""
    with cgutils.for_range(builder, count) as loop:
        k = loop.index
        block = load(builder, w, builder.mul(k, ir.Constant(k.type, 32)), vector(I8, 32), 1)
        xk = builder.mul(k, ir.Constant(k.type, 128))

        def run(n, ty):
            return load(builder, x, builder.add(xk, ir.Constant(k.type, 32 * n)), ty, 1)

        body([_codes(builder, block, n) for n in range(4)], run)


def _trits_permil(builder, bytes8, n):
    """AVX: ``vpermilps`` picks -1, 0 or +1 by the low two bits of each lane (code n)."""
    vf, v8 = vector(F32, 8), vector(I32, 8)
    permute = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vf, [vf, v8]), "llvm.x86.avx.vpermilvar.ps.256")
    table = ir.Constant(vf, [ir.Constant(F32, v) for v in (-1.0, 0.0, 1.0, 0.0) * 2])
    index = bytes8 if n == 0 else builder.lshr(bytes8, splat(I32, 8, 2 * n))
    return builder.call(permute, [table, index]), 1.0


def _trits_masked(builder, bytes8, n, exact=False):
    """Portable: ``b & (3 << 2n)`` is ``code * 4**n``; minus ``4**n``, ``trit * 4**n``.

    Returns the float trit times ``4**n`` and ``4**-n`` to scale it back, or with
    ``exact`` the trit itself (one shift more).
    """
    field = builder.and_(bytes8, splat(I32, 8, 3 << (2 * n)))
    trit = builder.sub(field, splat(I32, 8, 1 << (2 * n)))
    if exact and n:
        trit = builder.ashr(trit, splat(I32, 8, 2 * n))
    return builder.sitofp(trit, vector(F32, 8)), 1.0 if exact else 4.0 ** -n


def _trit_vectors(builder, w, count, avx2, exact, body):
    """``body(t, scale, n, offset)`` for every 8 float trits of ``count`` 32-byte blocks.

    Each 8 bytes are zero-extended once into int32 lanes and code n of every lane
    becomes a float trit (times ``1 / scale``: a power of 4 on the portable path
    unless ``exact``); ``offset`` is its place in the block layout,
    ``128 k + 32 n + 8 quarter``.
    """
    trits = _trits_permil if avx2 else (lambda b, v, n: _trits_masked(b, v, n, exact))
    v8 = vector(I32, 8)
    with cgutils.for_range(builder, count) as loop:
        k = loop.index
        for quarter in range(4):
            off = builder.add(builder.mul(k, ir.Constant(k.type, 32)),
                              ir.Constant(k.type, 8 * quarter))
            bytes8 = builder.zext(load(builder, w, off, vector(I8, 8), 1), v8)
            for n in range(4):
                t, scale = trits(builder, bytes8, n)
                offset = builder.add(builder.mul(k, ir.Constant(k.type, 128)),
                                     ir.Constant(k.type, 32 * n + 8 * quarter))
                body(t, scale, n, quarter, offset)


def _dot_float(builder, w, x, count, avx2):
    """Sum of ``trit * x``: multiply-adds into two accumulators per code n."""
    vf = vector(F32, 8)
    accs = [cgutils.alloca_once_value(builder, ir.Constant(vf, None)) for _ in range(8)]
    scales = [1.0] * 4

    def body(t, scale, n, quarter, offset):
        scales[n] = scale
        acc = accs[2 * n + (quarter & 1)]  # two chains per n hide the latency
        prod = builder.fmul(t, load(builder, x, offset, vf, 1), flags=("contract",))
        builder.store(builder.fadd(builder.load(acc), prod, flags=("contract",)), acc)

    _trit_vectors(builder, w, count, avx2, False, body)
    total = None
    for n in range(4):
        part = builder.fadd(builder.load(accs[2 * n]), builder.load(accs[2 * n + 1]))
        part = builder.fmul(part, ir.Constant(vf, [ir.Constant(F32, scales[n])] * 8))
        total = part if total is None else builder.fadd(total, part)
    return horizontal_sum(builder, total, builder.fadd)


def _dot_int8_avx2(builder, w, x, count):
    module = builder.module
    v32i8, v16i16, v8i32 = vector(I8, 32), vector(I16, 16), vector(I32, 8)
    maddubs = cgutils.get_or_insert_function(
        module, ir.FunctionType(v16i16, [v32i8, v32i8]), "llvm.x86.avx2.pmadd.ub.sw")
    maddwd = cgutils.get_or_insert_function(
        module, ir.FunctionType(v8i32, [v16i16, v16i16]), "llvm.x86.avx2.pmadd.wd")
    acc = cgutils.alloca_once_value(builder, ir.Constant(v8i32, None))

    def body(codes, run):
        pairs = [builder.call(maddubs, [c, run(n, v32i8)]) for n, c in enumerate(codes)]
        s = builder.add(builder.add(pairs[0], pairs[1]), builder.add(pairs[2], pairs[3]))
        widened = builder.call(maddwd, [s, splat(I16, 16, 1)])
        builder.store(builder.add(builder.load(acc), widened), acc)

    _blocks(builder, count, w, x, body)
    return horizontal_sum(builder, builder.load(acc), builder.add)


def _dot_int8_portable(builder, w, x, count):
    v32i16, v32i32 = vector(I16, 32), vector(I32, 32)
    acc = cgutils.alloca_once_value(builder, ir.Constant(v32i32, None))

    def body(codes, run):
        s = None
        for n, c in enumerate(codes):
            p = builder.mul(builder.zext(c, v32i16), builder.sext(run(n, vector(I8, 32)), v32i16))
            s = p if s is None else builder.add(s, p)
        builder.store(builder.add(builder.load(acc), builder.sext(s, v32i32)), acc)

    _blocks(builder, count, w, x, body)
    return horizontal_sum(builder, builder.load(acc), builder.add)


def _make_dot(avx2: bool):
    @intrinsic
    def dot(typingctx, w, woff, x, xoff, nblocks):
        if not (isinstance(w, types.Array) and w.dtype == types.uint8
                and isinstance(x, types.Array) and x.dtype in (types.float32, types.int8)):
            return None
        result = types.float32 if x.dtype == types.float32 else types.int32
        sig = result(w, types.intp, x, types.intp, types.intp)

        def codegen(context, builder, sig, args):
            wp = pointer(context, builder, sig.args[0], args[0], args[1], I8)
            if sig.args[2].dtype == types.float32:
                xp = pointer(context, builder, sig.args[2], args[2], args[3], F32)
                return _dot_float(builder, wp, xp, args[4], avx2)
            xp = pointer(context, builder, sig.args[2], args[2], args[3], I8)
            impl = _dot_int8_avx2 if avx2 else _dot_int8_portable
            return impl(builder, wp, xp, args[4])

        return sig, codegen

    return dot


def _make_decode(avx2: bool):
    @intrinsic
    def decode(typingctx, w, woff, out, ooff, nblocks):
        if not (isinstance(w, types.Array) and w.dtype == types.uint8
                and isinstance(out, types.Array) and out.dtype == types.float32):
            return None
        sig = types.none(w, types.intp, out, types.intp, types.intp)

        def codegen(context, builder, sig, args):
            wp = pointer(context, builder, sig.args[0], args[0], args[1], I8)
            op = pointer(context, builder, sig.args[2], args[2], args[3], F32)

            def body(t, scale, n, quarter, offset):
                ptr = builder.bitcast(builder.gep(op, [offset]), vector(F32, 8).as_pointer())
                builder.store(t, ptr, align=1)

            _trit_vectors(builder, wp, args[4], avx2, True, body)
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
                splat = builder.insert_element(ir.Constant(v8f, None), scale, ir.Constant(I32, 0))
                splat = builder.shuffle_vector(splat, splat, ir.Constant(vector(I32, 8), [0] * 8))
                product = builder.fmul(builder.sitofp(lanes, v8f), splat)
                builder.store(builder.fadd(builder.load(acc), product), acc)
    return [horizontal_sum(builder, builder.load(acc), builder.fadd) for acc in accs]


def _make_dot_q8k(avx2: bool, rows: int):
    @intrinsic
    def dot_q8k(typingctx, w, o, x, r, csum, xd, scales):
        """Weight row ``o`` against Q8_K rows ``r .. r + rows - 1`` (see :func:`_dot_q8k`).

        2-D arrays with unit-stride rows: ``w`` "2bit" ``(out, n / 4)`` uint8, ``x``
        ``(m, n)`` int8 laid out as ``Q8K_BYTE_ORDER`` says, ``csum`` ``(m, n / 32)``
        int32 chunk sums, ``xd`` ``(m, n / 256)`` float32, ``scales`` ``(out, groups)``
        float32 with ``groups >= 1`` dividing ``n / 256``. Returns a float32, or a
        tuple of ``rows`` of them.
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


dot_2bit = _make_dot(HAS_AVX2)
decode_2bit = _make_decode(HAS_AVX2)  # float32 trits in the dot's layout
decode_2bit_portable = _make_decode(False)
dot_2bit_portable = _make_dot(False)  # what non-x86 targets get; tested everywhere
dot_q8k = _make_dot_q8k(HAS_AVX2, 1)
dot_q8k_rows = _make_dot_q8k(HAS_AVX2, Q8K_ROWS)  # the GEMM: one decode of w for Q8K_ROWS rows
dot_q8k_portable = _make_dot_q8k(False, 1)
