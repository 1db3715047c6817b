"""Cache control as LLVM IR: prefetching rows, streaming (non-temporal) stores, a fence."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from . import F32, I8, I32, I64, load, pointer, vector

PREFETCH_BYTES = 8192  # how far ahead of the row it works on a streaming kernel prefetches


@intrinsic
def rows_ahead(typingctx, a):
    """Rows of ``a`` in ``PREFETCH_BYTES`` (at least one): the distance for :func:`prefetch_row`.

    ``max(1, PREFETCH_BYTES // max(1, a.strides[0]))``; an intrinsic, which compiles
    nothing apart (as an inlined function, it and its ``max`` took 0.06 s of the first GEMV).
    """
    if not (isinstance(a, types.Array) and a.ndim >= 1):
        return None
    sig = types.intp(a)

    def codegen(context, builder, sig, args):
        strides = context.make_array(sig.args[0])(context, builder, args[0]).strides
        one = ir.Constant(I64, 1)

        def at_least_one(v):
            return builder.select(builder.icmp_signed("<", v, one), one, v)

        stride = at_least_one(builder.extract_value(strides, 0))
        return at_least_one(builder.sdiv(ir.Constant(I64, PREFETCH_BYTES), stride))

    return sig, codegen


@intrinsic
def prefetch_row(typingctx, a, row):
    """Ask the CPU to start loading row ``row`` of the 2-D or 3-D array ``a`` into cache.

    One ``prefetcht1`` (into L2, leaving L1 to the data being worked on) per
    64-byte line of the ``shape[1] * strides[1]`` bytes from the row's start
    (``llvm.prefetch``: a hint, which never faults, even out of bounds).
    Streaming kernels call it a few rows ahead of the row they work on: the
    hardware prefetchers alone leave the search over
    10,000 bitplane rows (25 MB, beyond the cache) at half the speed.
    """
    if not (isinstance(a, types.Array) and a.ndim >= 2):
        return None
    sig = types.void(a, types.intp)

    def codegen(context, builder, sig, args):
        arr = context.make_array(sig.args[0])(context, builder, args[0])
        shape = cgutils.unpack_tuple(builder, arr.shape, sig.args[0].ndim)
        strides = cgutils.unpack_tuple(builder, arr.strides, sig.args[0].ndim)
        start = pointer(context, builder, sig.args[0], args[0],
                        builder.mul(args[1], strides[0]), I8)
        nbytes = builder.mul(shape[1], strides[1])
        hint = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [I8.as_pointer(), I32, I32, I32]),
            "llvm.prefetch.p0i8")
        read, keep, data = ir.Constant(I32, 0), ir.Constant(I32, 2), ir.Constant(I32, 1)
        with cgutils.for_range_slice(builder, ir.Constant(I64, 0), nbytes,
                                     ir.Constant(I64, 64)) as (offset, _):
            builder.call(hint, [builder.gep(start, [offset]), read, keep, data])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def stream_floats(typingctx, dst, doff, src, soff, n):
    """Copy ``n`` float32 from flat element ``soff`` of ``src`` to ``doff`` of ``dst``, streaming.

    The 32-byte-aligned run of ``dst`` is written with non-temporal stores
    (``vmovntps`` on x86): the destination lines are neither read first nor
    kept in the cache, so writing a large output that nothing reads soon
    takes about half the time (a 64 MiB float32 array: 3.2 ms instead of
    5.6-7.0 ms on these machines). The unaligned head and tail, and a ``dst``
    not aligned to 4 bytes, are written with plain stores. Call
    :func:`store_fence` before the data is handed to another thread. Not
    bounds-checked.
    """
    f32 = types.float32
    if not (isinstance(dst, types.Array) and dst.dtype == f32
            and isinstance(src, types.Array) and src.dtype == f32):
        return None
    sig = types.void(dst, types.intp, src, types.intp, types.intp)

    def codegen(context, builder, sig, args):
        dp = pointer(context, builder, sig.args[0], args[0], args[1], F32)
        sp = pointer(context, builder, sig.args[2], args[2], args[3], F32)
        n = args[4]
        i64 = n.type
        v8 = vector(F32, 8)
        addr = builder.ptrtoint(dp, i64)
        to_align = builder.lshr(builder.and_(builder.neg(addr), ir.Constant(i64, 31)),
                                ir.Constant(i64, 2))
        head = builder.select(builder.icmp_unsigned("<", to_align, n), to_align, n)
        odd = builder.icmp_unsigned("!=", builder.and_(addr, ir.Constant(i64, 3)),
                                    ir.Constant(i64, 0))
        head = builder.select(odd, n, head)  # not float-aligned: no vector stores at all
        vectors = builder.lshr(builder.sub(n, head), ir.Constant(i64, 3))
        body_end = builder.add(head, builder.shl(vectors, ir.Constant(i64, 3)))
        flag = builder.module.add_metadata([ir.Constant(I32, 1)])

        def plain(lo, hi):
            with cgutils.for_range_slice(builder, lo, hi, ir.Constant(i64, 1)) as (i, _):
                builder.store(builder.load(builder.gep(sp, [i])), builder.gep(dp, [i]))

        plain(ir.Constant(i64, 0), head)
        with cgutils.for_range(builder, vectors) as loop:
            i = builder.add(head, builder.shl(loop.index, ir.Constant(i64, 3)))
            value = load(builder, sp, i, v8, 4)
            store = builder.store(value, builder.bitcast(builder.gep(dp, [i]), v8.as_pointer()),
                                  align=32)
            store.set_metadata("nontemporal", flag)
        plain(body_end, n)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def store_fence(typingctx):
    """A full memory fence (``mfence``): orders :func:`stream_floats`' stores before later ones."""
    def codegen(context, builder, sig, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.void(), codegen
