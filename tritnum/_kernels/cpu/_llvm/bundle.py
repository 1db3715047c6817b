"""Bit-sliced counting as LLVM IR: how many of ``n`` bit-plane rows set each bit of a column block.

The inner kernel of the CPU bundle (``cpu.vsa._bundle_planes``). A block of
``words`` uint64 columns (a few vector registers wide) is read from every row in
turn and counted with carry-save adders (Harley-Seal): bits 0-3 of each bit
lane's count stay in registers, 16 rows at a time, and the carries out of bit 3
ripple into the higher bits in memory (the L1-resident counter rows). Per 16 rows
and vector that is 15 adders (about 2 ``vpternlogq`` each on AVX-512) against 16
loads: numba's loop over the same arithmetic, its counters in memory, did not
vectorize (scalar code, 136-171 µs for 1,000 rows of 10,000 trits, one thread).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from . import I64, broadcast, masked_load, pointer, vector

LANES = 8  # uint64 words per vector: <8 x i64>, one AVX-512 register, two AVX2 ones
GROUP = 16  # rows per step of the adder tree; counts of bits 0-3 stay in registers


def _csa(builder, a, b, c):
    """Carry-save adder: (carries, sums) of each bit lane of three vectors."""
    u = builder.xor(a, b)
    return builder.or_(builder.and_(a, b), builder.and_(u, c)), builder.xor(u, c)


def make_count_bits(words: int):
    """The counting intrinsic for blocks of ``words`` columns (a multiple of ``LANES``).

    ``count_bits(rows, off, stride, n, valid, cnt, top)`` writes, for each of the
    first ``valid`` columns ``w`` of the block (``valid <= words``) and each bit
    lane, bit ``k`` of the number of rows ``i < n`` whose word at flat element
    ``off + i * stride + w`` of ``rows`` has that bit set to flat element
    ``k * words + w`` of ``cnt``, for ``k < top`` (``4 <= top`` and ``n < 2**top``).
    Columns ``valid..words`` are not read (masked loads) and count 0. Nothing is
    bounds-checked: the caller keeps every word it names in ``rows`` and ``cnt``.
    """
    nvec = words // LANES
    vt = vector(I64, LANES)

    @intrinsic
    def count_bits(typingctx, rows, off, stride, n, valid, cnt, top):
        if not all(isinstance(a, types.Array) and a.dtype == types.uint64 for a in (rows, cnt)):
            return None
        sig = types.void(rows, types.intp, types.intp, types.intp, types.intp, cnt, types.intp)

        def codegen(context, builder, sig, args):
            _, off, stride, n, valid, _, top = args
            base = pointer(context, builder, sig.args[0], args[0], off, I64)
            out = pointer(context, builder, sig.args[5], args[5], ir.Constant(I64, 0), I64)
            zero = ir.Constant(vt, None)
            lanes = broadcast(builder, valid, LANES)
            masks = [builder.icmp_signed("<", ir.Constant(vt, [v * LANES + j
                                                               for j in range(LANES)]), lanes)
                     for v in range(nvec)]

            def row(i):
                """The block's vectors of row ``i`` (columns past ``valid`` read as 0)."""
                start = builder.gep(base, [builder.mul(i, stride)])
                return [masked_load(builder, builder.bitcast(
                    builder.gep(start, [ir.Constant(I64, v * LANES)]), vt.as_pointer()), masks[v])
                    for v in range(nvec)]

            def level(k, v):
                """Pointer to vector ``v`` of counter bit ``k`` in ``cnt``."""
                at = builder.add(builder.mul(k, ir.Constant(I64, words)),
                                 ir.Constant(I64, v * LANES))
                return builder.bitcast(builder.gep(out, [at]), vt.as_pointer())

            def ripple(carries, first):
                """Add ``carries`` (one bit each) into the counter bits ``first..top`` in memory."""
                slots = [cgutils.alloca_once_value(builder, c) for c in carries]
                with cgutils.for_range_slice(builder, ir.Constant(I64, first), top,
                                             ir.Constant(I64, 1)) as (k, _):
                    for v, slot in enumerate(slots):
                        ptr = level(k, v)
                        x, c = builder.load(ptr, align=8), builder.load(slot)
                        builder.store(builder.xor(x, c), ptr, align=8)
                        builder.store(builder.and_(x, c), slot)

            with cgutils.for_range_slice(builder, ir.Constant(I64, 0), top,
                                         ir.Constant(I64, 1)) as (k, _):
                for v in range(nvec):
                    builder.store(zero, level(k, v), align=8)
            regs = [[cgutils.alloca_once_value(builder, zero) for _ in range(nvec)]
                    for _ in range(4)]  # bits 0-3 of the counts: promoted to registers
            groups = builder.sdiv(n, ir.Constant(I64, GROUP))
            with cgutils.for_range(builder, groups) as loop:
                first = builder.mul(loop.index, ir.Constant(I64, GROUP))
                ins = [row(builder.add(first, ir.Constant(I64, r))) for r in range(GROUP)]
                carries = []
                for v in range(nvec):
                    bits = [builder.load(regs[k][v]) for k in range(4)]
                    d = [ins[r][v] for r in range(GROUP)]
                    eights = []
                    for half in (d[:8], d[8:]):
                        fours = []
                        for quarter in (half[:4], half[4:]):
                            ta, bits[0] = _csa(builder, bits[0], quarter[0], quarter[1])
                            tb, bits[0] = _csa(builder, bits[0], quarter[2], quarter[3])
                            f, bits[1] = _csa(builder, bits[1], ta, tb)
                            fours.append(f)
                        e, bits[2] = _csa(builder, bits[2], *fours)
                        eights.append(e)
                    sixteens, bits[3] = _csa(builder, bits[3], *eights)
                    for k in range(4):
                        builder.store(bits[k], regs[k][v])
                    carries.append(sixteens)
                ripple(carries, 4)
            for k in range(4):  # bits 0-3 into memory, where the rows left are added
                for v in range(nvec):
                    builder.store(builder.load(regs[k][v]), level(ir.Constant(I64, k), v),
                                  align=8)
            with cgutils.for_range_slice(builder, builder.mul(groups, ir.Constant(I64, GROUP)),
                                         n, ir.Constant(I64, 1)) as (i, _):
                ripple(row(i), 0)
            return context.get_dummy_value()

        return sig, codegen

    return count_bits
