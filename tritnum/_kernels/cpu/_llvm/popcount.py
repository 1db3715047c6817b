"""Popcounts as LLVM IR: of one uint64 word, and of a tile of query x memory bit-plane rows.

(And the int8 dot tile that replaces the popcounts where vectors are short,
:func:`tile_int8`: the search's other inner kernel.)

The tile is the inner kernel of the CPU search (:mod:`..vsa_search`). A query
row comes as two planes ``A`` (non-zero: plus | minus) and ``S`` (minus), a
memory row as its stored planes ``P`` (plus) and ``M`` (minus). Per word of a
pair, ``AB = A & (P | M)`` marks the positions where both are non-zero and
``X = AB & (S ^ M)`` those where their signs differ, so the dot product is
``popc(AB) - 2 popc(X)``, the number of equal positions
``d - nnz(a) - nnz(b) + 2 popc(AB) - popc(X)``, and cosine follows from the dot:
two popcounts and two logic operations (``vpand`` and one ``vpternlogq`` on
AVX-512) per word pair, whatever the metric. :func:`tile_counts` returns the
two counts of each pair; :func:`tile_dots` the dots, compared in registers with
the k-th best dot of each query so far (the dot metric's top k).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from . import I8, I16, I32, I64, broadcast, load, masked_load, pointer, splat, vector
from .gemm import Tile, _multiply_add

WIDE_WORDS = 8  # uint64 words per vector of the wide tile (<8 x i64>: one AVX-512 register)
NARROW_WORDS = 4  # per vector of the portable tile (<32 x i8>: one AVX2 register)
NARROW_STEPS = 31  # narrow vectors summed in byte counters before they are widened (31 * 8 < 256)


@intrinsic
def popcount(typingctx, x):
    """Population count of a uint64 (one ``popcnt`` instruction)."""

    def codegen(context, builder, sig, args):
        return builder.ctpop(args[0])

    return types.uint64(types.uint64), codegen


def _tile_code(builder, module, tq, tm, wide, nonzeros, qbase, qstride, qplane, mbase, mstride,
               mplane, nwords, obase, lbase=None):
    """IR of one tile shape (see :func:`tile_counts`), at the builder's position.

    With ``lbase`` (see :func:`tile_dots`) the dots are written and compared with the
    limits instead: the result is the mask of the pairs above their limit.
    """
    vt = vector(I64, WIDE_WORDS) if wide else vector(I8, 8 * NARROW_WORDS)
    words = WIDE_WORDS if wide else NARROW_WORDS
    it = nwords.type
    full = builder.udiv(nwords, ir.Constant(it, words))
    rest = builder.urem(nwords, ir.Constant(it, words))
    ctpop = cgutils.get_or_insert_function(
        module, ir.FunctionType(vt, [vt]), f"llvm.ctpop.v{vt.count}i{vt.element.width}")
    accs = [cgutils.alloca_once(builder, vt) for _ in range(2 * tq * tm + nonzeros * tm)]
    # the word of each lane, against the words left in the last, partial vector
    lane_words = ir.Constant(vt, [ir.Constant(vt.element, i * words // vt.count)
                                  for i in range(vt.count)])
    tail = builder.icmp_unsigned("<", lane_words, broadcast(builder, builder.trunc(
        rest, vt.element) if vt.element.width < it.width else rest, vt.count))

    def vec(base, offset, mask=None):
        ptr = builder.bitcast(builder.gep(base, [offset]), vt.as_pointer())
        if mask is None:
            return builder.load(ptr, align=8)
        return masked_load(builder, ptr, mask)

    def add(acc, bits):
        builder.store(builder.add(builder.load(acc), builder.call(ctpop, [bits])), acc)

    def step(v, mask=None):
        """Add the counts of vector ``v`` of every pair to the accumulators.

        ``mask``: the lanes of the last vector that hold words of the memory rows
        (only those are loaded: the rest read as 0 and never touch memory).
        """
        w = builder.mul(v, ir.Constant(v.type, words))
        rows = []
        for r in range(tm):
            at = builder.add(builder.mul(ir.Constant(I64, r), mstride), w)
            minus = vec(mbase, builder.add(at, mplane), mask)
            rows.append((builder.or_(vec(mbase, at, mask), minus), minus))
            if nonzeros:
                add(accs[2 * tq * tm + r], rows[r][0])
        for j in range(tq):
            at = builder.add(builder.mul(ir.Constant(I64, j), qstride), w)
            a, s = vec(qbase, at), vec(qbase, builder.add(at, qplane))
            for r, (nonzero, minus) in enumerate(rows):
                both = builder.and_(a, nonzero)
                t = 2 * (j * tm + r)
                add(accs[t], both)
                add(accs[t + 1], builder.and_(both, builder.xor(s, minus)))

    def clear():
        for acc in accs:
            builder.store(ir.Constant(vt, None), acc)

    def last_step():
        with builder.if_then(builder.icmp_unsigned("!=", rest, ir.Constant(it, 0))):
            step(full, tail)

    if wide:
        clear()
        with cgutils.for_range(builder, full) as loop:
            step(loop.index)
        last_step()
        sums = [builder.load(acc) for acc in accs]
        if lbase is not None:  # popc(AB) - 2 popc(X) of each pair, before the lanes are summed
            sums = [builder.sub(builder.sub(sums[t], sums[t + 1]), sums[t + 1])
                    for t in range(0, 2 * tq * tm, 2)]
        sums += [ir.Constant(vt, None)] * (-len(sums) % WIDE_WORDS)
        mask = ir.Constant(I64, 0)
        for g in range(0, len(sums), WIDE_WORDS):
            total = _sum_lanes(builder, sums[g:g + WIDE_WORDS])
            builder.store(total, builder.bitcast(
                builder.gep(obase, [ir.Constant(I64, g)]), vt.as_pointer()), align=8)
            if lbase is not None:
                limit = builder.load(builder.bitcast(builder.gep(lbase, [ir.Constant(I64, g)]),
                                                     vt.as_pointer()), align=8)
                above = builder.bitcast(builder.icmp_signed(">", total, limit), I8)
                mask = builder.or_(mask, builder.shl(builder.zext(above, I64),
                                                     ir.Constant(I64, g)))
        return builder.and_(mask, ir.Constant(I64, (1 << tq * tm) - 1))  # not the padding lanes
    wide16 = vector(I16, vt.count)
    reduce = cgutils.get_or_insert_function(
        module, ir.FunctionType(I16, [wide16]), "llvm.vector.reduce.add.v32i16")
    totals = [cgutils.alloca_once_value(builder, ir.Constant(I64, 0)) for _ in accs]

    def flush():
        for acc, total in zip(accs, totals, strict=True):
            part = builder.call(reduce, [builder.zext(builder.load(acc), wide16)])
            builder.store(builder.add(builder.load(total), builder.zext(part, I64)), total)

    span = ir.Constant(it, NARROW_STEPS)
    chunks = builder.udiv(builder.add(full, ir.Constant(it, NARROW_STEPS - 1)), span)
    with cgutils.for_range(builder, chunks) as chunk:
        clear()
        first = builder.mul(chunk.index, span)
        last = builder.add(first, span)
        last = builder.select(builder.icmp_unsigned("<", full, last), full, last)
        with cgutils.for_range_slice(builder, first, last, ir.Constant(it, 1)) as (v, _):
            step(v)
        flush()
    clear()
    last_step()
    flush()
    totals = [builder.load(total) for total in totals]
    if lbase is None:
        for t, total in enumerate(totals):
            builder.store(total, builder.gep(obase, [ir.Constant(I64, t)]))
        return None
    mask = ir.Constant(I64, 0)
    for t in range(tq * tm):
        dot = builder.sub(builder.sub(totals[2 * t], totals[2 * t + 1]), totals[2 * t + 1])
        builder.store(dot, builder.gep(obase, [ir.Constant(I64, t)]))
        limit = builder.load(builder.gep(lbase, [ir.Constant(I64, t)]))
        above = builder.icmp_signed(">", dot, limit)
        mask = builder.or_(mask, builder.shl(builder.zext(above, I64), ir.Constant(I64, t)))
    return mask


def _sum_lanes(builder, vs):
    """Eight ``<8 x i64>`` vectors to one whose lane ``i`` is the sum of ``vs[i]``.

    A transposing tree: at each level pairs of vectors trade halves of their
    partial sums and add, 21 shuffles and adds instead of 8 reductions of 7.
    """
    width = 4
    while len(vs) > 1:
        lo, hi = [], []
        for first in range(0, 8, 2 * width):  # lanes of a, then of b, that each level keeps
            lo += [first + i for i in range(width)]
            hi += [first + width + i for i in range(width)]
        lo += [8 + i for i in lo]
        hi += [8 + i for i in hi]
        vs = [builder.add(builder.shuffle_vector(a, b, ir.Constant(vector(I32, 8), lo)),
                          builder.shuffle_vector(a, b, ir.Constant(vector(I32, 8), hi)))
              for a, b in zip(vs[::2], vs[1::2], strict=True)]
        width //= 2
    return vs[0]


def tile_counts(shapes: tuple[tuple[int, int, bool, bool], ...]):
    """An intrinsic counting ``popc(AB)`` and ``popc(X)`` for tiles of queries x memory rows.

    ``counts(shape, q, qoff, qstride, qplane, m, moff, mstride, mplane, nwords, out)``
    runs the tile ``shapes[shape] = (tq, tm, wide, nonzeros)``. Query ``j < tq`` has
    its ``A`` plane at flat word ``qoff + j * qstride`` of the uint64 array ``q`` and
    its ``S`` plane ``qplane`` words further; memory row ``r < tm`` has ``P`` at
    ``moff + r * mstride`` of ``m`` and ``M`` ``mplane`` words further. Each plane has
    ``nwords`` words, read in vectors of ``WIDE_WORDS`` (``wide``) or ``NARROW_WORDS``:
    the last vector of the memory rows is loaded masked (nothing past the rows is
    read), the query's whole (it must be readable: padded). ``out[2 t]`` and
    ``out[2 t + 1]`` (int64) receive the two counts of pair ``t = j * tm + r``; with
    ``nonzeros``, ``out[2 tq tm + r]`` the non-zeros of memory row ``r`` (two
    operations more per row and vector, on data already in registers). The wide tile
    writes whole groups of 8 counts: ``out`` must have room for their number rounded
    up to a multiple of 8.

    Every vector of the ``tm`` memory rows is loaded once for the ``tq`` queries
    (register blocking). ``wide``: ``ctpop`` on ``<8 x i64>`` (``vpopcntq`` with
    AVX-512 VPOPCNTDQ) into 64-bit lanes. Portable: ``ctpop`` on ``<32 x i8>``
    (a ``vpshufb`` table lookup on AVX2, ``vpopcntb`` with AVX-512 BITALG) into
    byte counters widened every ``NARROW_STEPS`` vectors. Not bounds-checked.
    """

    @intrinsic
    def counts(typingctx, shape, q, qoff, qstride, qplane, m, moff, mstride, mplane, nwords,
               out):
        return _typed(shapes, q, m, (out,))

    return counts


def tile_dots(shapes: tuple[tuple[int, int, bool], ...]):
    """An intrinsic computing the dot products of a tile of query x memory rows, with limits.

    ``dots(shape, q, qoff, qstride, qplane, m, moff, mstride, mplane, nwords, limits, out)``
    runs the tile ``shapes[shape] = (tq, tm, wide)`` of :func:`tile_counts` (same
    arguments) and writes the dot ``popc(AB) - 2 popc(X)`` of pair ``t = j * tm + r``
    to ``out[t]``; it returns the mask (int64) whose bit ``t`` tells that the dot
    exceeds ``limits[t]`` (the limits past the tile's pairs are ignored, whatever they
    hold). The comparison stays in registers: a search reads ``out``
    only where the mask is not 0 (a scalar read of the vectors just stored would wait
    for them). ``out`` and ``limits`` need room for the pairs rounded up to a multiple
    of 8 (``WIDE_WORDS``) on the wide tile. Not bounds-checked.
    """
    shapes = tuple((tq, tm, wide, False) for tq, tm, wide in shapes)

    @intrinsic
    def dots(typingctx, shape, q, qoff, qstride, qplane, m, moff, mstride, mplane, nwords,
             limits, out):
        return _typed(shapes, q, m, (limits, out))

    return dots


def _typed(shapes: tuple[tuple[int, int, bool, bool], ...], q, m, arrays):
    """The signature and code of a tile intrinsic over ``shapes``, or None for other types.

    ``arrays``: ``(out,)`` for :func:`tile_counts`, ``(limits, out)`` for :func:`tile_dots`
    (which returns its mask). One intrinsic for all shapes, a switch on ``shape``: a
    numba function wrapping the call would reference-count its arrays on every tile.
    """
    if not all(isinstance(a, types.Array) for a in (q, m, *arrays)):
        return None
    if [a.dtype for a in (q, m, *arrays)] != [types.uint64] * 2 + [types.int64] * len(arrays):
        return None
    dots = len(arrays) == 2
    ip = types.intp
    sig = (types.int64 if dots else types.void)(ip, q, ip, ip, ip, m, ip, ip, ip, ip, *arrays)

    def codegen(context, builder, sig, args):
        shape, qarr, qoff, qstride, qplane, marr, moff, mstride, mplane, nwords = args[:10]
        qbase = pointer(context, builder, sig.args[1], qarr, qoff, I64)
        mbase = pointer(context, builder, sig.args[5], marr, moff, I64)
        lbase, obase = (pointer(context, builder, sig.args[i], args[i], ir.Constant(I64, 0), I64)
                        if i >= 10 else None for i in (len(args) - 2, len(args) - 1))
        result = cgutils.alloca_once_value(builder, ir.Constant(I64, 0))
        done = builder.append_basic_block("tile.done")
        switch = builder.switch(shape, done)
        for i, (tq, tm, wide, nonzeros) in enumerate(shapes):
            block = builder.append_basic_block(f"tile.{i}")
            switch.add_case(ir.Constant(shape.type, i), block)
            builder.position_at_end(block)
            mask = _tile_code(builder, builder.module, tq, tm, wide, nonzeros, qbase, qstride,
                              qplane, mbase, mstride, mplane, nwords, obase, lbase)
            if dots:
                builder.store(mask, result)
            builder.branch(done)
        builder.position_at_end(done)
        return builder.load(result) if dots else context.get_dummy_value()

    return sig, codegen


INT8_ROWS = 8  # memory rows of an int8 tile: its sums come out as one <8 x i32> per query
CHECK, NONZEROS = 1, 2  # what a tile's first pass over rows counts (``stats``; see tile_int8)


def tile_int8(shapes: tuple[tuple[int, int, bool], ...], tile: Tile):
    """An intrinsic of the int8 dots of ``tq`` queries x ``INT8_ROWS`` memory rows (small ``d``).

    ``dots(shape, q, qoff, qplane, m, moff, mstride, steps, rest, out, ooff, ostride, bplane,
    nnz, noff)`` runs ``shapes[shape] = (tq, stats, both, planes)`` on the int8 dot of ``tile``
    (:class:`.gemm.Tile`: ``vpdpbusd`` with VNNI, else ``vpmaddubsw`` + ``vpmaddwd``), in
    vectors of ``V = 4 * tile.lanes`` bytes. A memory trit is read as its code
    ``trit + 1`` (unsigned), so a sum is the dot plus the query's trit sum:

    - ``q`` (int8): query ``j < tq`` from byte ``qoff + 2 j qplane``: its trits (0 past
      ``d``), then at ``+ qplane`` its non-zero flags ``|trit|``; ``steps`` whole vectors
      and the one holding the ``rest`` bytes are read.
    - ``m`` (bytes): memory row ``r`` from byte ``moff + r * mstride``, ``steps`` vectors and
      ``rest`` bytes more (a masked load: nothing past them is read). With ``planes`` the
      row is bit planes instead, its minus plane ``rest`` bytes after its plus plane: each
      step reads ``V`` bits of each (zero padded: no mask) as a ``<V x i1>`` mask
      sign-extended to bytes (``vpmovm2b``), minus minus plus (the decode of
      :func:`.packing.unpack_planes`, in registers).
    - ``out`` (int32): ``out[ooff + j * ostride + r] = sum((trit_m + 1) * trit_q)``; with
      ``both``, ``out[ooff + bplane + j * ostride + r]`` the number of positions where
      both are non-zero (the Hamming metric's count).
    - ``stats``: 0, or ``CHECK``: the result is the largest code (an unsigned byte) of the
      rows, more than 2 where a value is not a trit; ``NONZEROS`` too: the rows'
      non-zeros to ``nnz[noff + r]`` (int32). ``tq`` may be 0 (the rows' pass alone).

    Each memory vector is loaded (and its codes made) once for the ``tq`` queries;
    the ``INT8_ROWS`` accumulators of a query are summed by a transposing tree into one
    vector of ``INT8_ROWS`` sums. Not bounds-checked.
    """
    size = 4 * tile.lanes

    @intrinsic
    def dots(typingctx, shape, q, qoff, qplane, m, moff, mstride, steps, rest, out, ooff,
             ostride, bplane, nnz, noff):
        arrays = ((q, types.int8), (out, types.int32), (nnz, types.int32))
        if not all(isinstance(t, types.Array) and t.dtype == d for t, d in arrays) or not (
                isinstance(m, types.Array) and m.dtype in (types.int8, types.uint8)):
            return None
        ip = types.intp
        sig = types.int64(ip, q, ip, ip, m, ip, ip, ip, ip, out, ip, ip, ip, nnz, ip)

        def codegen(context, builder, sig, args):
            qbase = pointer(context, builder, sig.args[1], args[1], args[2], I8)
            mbase = pointer(context, builder, sig.args[4], args[4], args[5], I8)
            obase = pointer(context, builder, sig.args[9], args[9], args[10], I32)
            nbase = pointer(context, builder, sig.args[13], args[13], args[14], I32)
            result = cgutils.alloca_once_value(builder, ir.Constant(I64, 0))
            done = builder.append_basic_block("int8.done")
            switch = builder.switch(args[0], done)
            for i, (tq, stats, both, planes) in enumerate(shapes):
                block = builder.append_basic_block(f"int8.{i}")
                switch.add_case(ir.Constant(args[0].type, i), block)
                builder.position_at_end(block)
                top = _int8_code(builder, tile, size, tq, stats, both, planes, qbase, args[3],
                                 mbase, args[6], args[7], args[8], obase, args[11], args[12],
                                 nbase)
                builder.store(top, result)
                builder.branch(done)
            builder.position_at_end(done)
            return builder.load(result)

        return sig, codegen

    return dots


def _int8_code(builder, tile, size, tq, stats, both, planes, qbase, qplane, mbase, mstride, steps,
               rest, obase, ostride, bplane, nbase):
    """IR of one :func:`tile_int8` shape at the builder's position; returns the largest code."""
    vi, vb, word = vector(I32, tile.lanes), vector(I8, size), ir.IntType(size)
    multiply_add = _multiply_add(builder, tile)
    rows = INT8_ROWS

    def accumulators(n):
        return [cgutils.alloca_once_value(builder, ir.Constant(vi, None)) for _ in range(n)]

    dots, boths = accumulators(tq * rows), accumulators(both * tq * rows)
    nnz = accumulators(rows if stats == NONZEROS else 0)
    top = cgutils.alloca_once_value(builder, ir.Constant(vb, None))
    ones = builder.bitcast(splat(I8, size, 1), vi)
    # the lanes of the last, partial vector that hold bytes of the rows
    tail = builder.icmp_unsigned("<", ir.Constant(vb, list(range(size))),
                                 broadcast(builder, builder.trunc(rest, I8), size))

    def vec(base, offset, mask=None):
        ptr = builder.bitcast(builder.gep(base, [offset]), vb.as_pointer())
        return builder.load(ptr, align=1) if mask is None else masked_load(builder, ptr, mask)

    def add(acc, codes, values):
        builder.store(multiply_add(builder.load(acc), codes, values), acc)

    def step(v, mask=None):
        at = builder.mul(v, ir.Constant(I64, size))
        queries = []
        for j in range(tq):
            qat = builder.add(builder.mul(ir.Constant(I64, 2 * j), qplane), at)
            queries.append((builder.bitcast(vec(qbase, qat), vi),
                            builder.bitcast(vec(qbase, builder.add(qat, qplane)), vi)))
        for r in range(rows):
            base = builder.mul(ir.Constant(I64, r), mstride)
            if planes:  # V bits of each plane, minus minus plus
                bits = builder.add(base, builder.udiv(at, ir.Constant(I64, 8)))
                plus, minus = (builder.sext(builder.bitcast(load(builder, mbase, offset, word, 1),
                                                            vector(ir.IntType(1), size)), vb)
                               for offset in (bits, builder.add(bits, rest)))
                row = builder.sub(minus, plus)
            else:
                row = vec(mbase, builder.add(base, at), mask)
            code = builder.add(row, splat(I8, size, 1))  # masked lanes: 1, against query 0
            nonzero = builder.bitcast(builder.and_(row, splat(I8, size, 1)), vi)
            if stats:
                old = builder.load(top)
                builder.store(builder.select(builder.icmp_unsigned(">", code, old), code, old),
                              top)
            if stats == NONZEROS:
                add(nnz[r], nonzero, ones)
            codes = builder.bitcast(code, vi)
            for j, (trits, flags) in enumerate(queries):
                add(dots[j * rows + r], codes, trits)
                if both:
                    add(boths[j * rows + r], nonzero, flags)

    with cgutils.for_range(builder, steps) as loop:
        step(loop.index)
    if not planes:
        with builder.if_then(builder.icmp_unsigned("!=", rest, ir.Constant(rest.type, 0))):
            step(steps, tail)

    def store_rows(accs, base, offset):
        halves = [builder.load(acc) for acc in accs]
        while halves[0].type.count > rows:  # fold each to INT8_ROWS lanes
            n = halves[0].type.count // 2
            halves = [builder.add(
                builder.shuffle_vector(h, h, ir.Constant(vector(I32, n), list(range(n)))),
                builder.shuffle_vector(h, h, ir.Constant(vector(I32, n), list(range(n, 2 * n)))))
                for h in halves]
        total = _sum_lanes(builder, halves)
        builder.store(total, builder.bitcast(builder.gep(base, [offset]),
                                             total.type.as_pointer()), align=4)

    for j in range(tq):
        row0 = builder.mul(ir.Constant(I64, j), ostride)
        store_rows(dots[j * rows:(j + 1) * rows], obase, row0)
        if both:
            store_rows(boths[j * rows:(j + 1) * rows], obase, builder.add(bplane, row0))
    if stats == NONZEROS:
        store_rows(nnz, nbase, ir.Constant(I64, 0))
    if not stats:
        return ir.Constant(I64, 0)
    return builder.zext(_umax_lanes(builder, builder.load(top)), I64)


def _umax_lanes(builder, v):
    """The largest unsigned byte of ``v``."""
    n = v.type.count
    while n > 1:
        n //= 2
        lo = builder.shuffle_vector(v, v, ir.Constant(vector(I32, n), list(range(n))))
        hi = builder.shuffle_vector(v, v, ir.Constant(vector(I32, n), list(range(n, 2 * n))))
        v = builder.select(builder.icmp_unsigned(">", lo, hi), lo, hi)
    return builder.extract_element(v, ir.Constant(I32, 0))
