"""int8 trits to "2bit" and "base3" bytes and back as LLVM vector IR, a block at a time.

``pack_2bit(src, soff, dst, doff, nblocks)`` packs ``nblocks`` blocks of
``L = TARGET.lanes`` int8 trits from byte ``soff`` of the 1-D row ``src`` into
``L / 4`` bytes each at ``doff`` of ``dst``; ``unpack_2bit`` is its inverse;
``pack_base3`` packs ``nblocks`` blocks of ``L`` 5-trit units (``BASE3_UNITS``);
``unpack_base3`` and ``unpack_planes`` (bit planes) are the inverses of the last
two; ``copy_trits`` copies a run of int8 trits (the dense ``permute``'s rows). Each
returns a flag of bad input: the largest code ``t + 1`` seen (packers and the
copy; valid rows give at most 2) or, from the unpackers, non-zero where a code
was invalid (3 in "2bit", a non-canonical base3 byte, a bit in both planes).
Nothing here is bounds-checked: the caller keeps every block in its row.

The level of :mod:`tritnum._isa` sets the vector width and the instructions:

- "2bit" pack: on x86, ``vpmaddubsw`` and ``vpmaddwd`` sum each 4 codes into an
  int32 lane (``c0 + 4 c1 + 16 c2 + 64 c3``), truncated to bytes (``vpmovdb`` on
  AVX-512, 64 trits a block); portably, shifts and ors of the 32-bit words.
- "2bit" unpack: each byte widened to an int32 lane, shifted copies or'ed and
  masked into 4 codes, minus 1 (plain IR on every level; 64 trits a block on
  AVX-512, 32 else).
- "base3" pack: the 5 vectors of a block's trits shuffled into 5 vectors of one
  digit each (two-source shuffles, ``vpermt2b`` with AVX-512 VBMI), the digit sum
  in bytes and ``(256 q + 242) // 243`` as a 16-bit multiply-high (plain IR on
  every level). It replaced 128-bit lanes of 2 units each (``vpshufb`` and
  ``vpmaddubsw``), which took 2x as long: 155-160 against 70 us for 4 M trits.
- "base3" unpack: a block of L bytes gives 5 vectors of trits, each one constant
  shuffle of the bytes (``vpermb`` where there is AVX-512 VBMI) and the digit
  formula of the format in 16-bit lanes (plain IR on every level).
- bit planes, unpack: a word of each plane as a ``<64 x i1>`` mask sign-extended
  to bytes (``vpmovm2b`` on AVX-512 BW), minus minus plus.

Plain numba loops over machine words (the fallback the callers keep for the
units between the blocks and the row's end) ran 2.5-3x (2bit) and 8x (base3)
slower than ``np.packbits`` on the same trits on an AVX-512 host.
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ...._isa import ISA, TABLE, Level
from . import I8, I16, I32, I64, load, pointer, splat, store, vector


@dataclass(frozen=True)
class Target:
    """What the intrinsics emit for one level of :mod:`tritnum._isa`."""

    lanes: int  # int8 trits per vector: a 2bit block; base3 takes lanes / 8 units per block
    x86: bool  # vpmaddubsw + vpmaddwd (AVX2; their 512-bit forms with 64 lanes)


    @classmethod
    def of(cls, level: Level) -> Target:
        """A 2bit block is one vector of int8 trits."""
        return cls(level.vector_bytes, level.x86)


TARGETS = {name: Target.of(level) for name, level in TABLE.items()}
TARGET = TARGETS[ISA]


def _call(builder, name, ret, operands):
    fn = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ret, [v.type for v in operands]), name)
    return builder.call(fn, operands)


def _suffix(v) -> str:
    return f"v{v.type.count}i{v.type.element.width}"


def _umax(builder, a, b):
    return _call(builder, f"llvm.umax.{_suffix(a)}", a.type, [a, b])


def _multiply_adds(builder, codes, pairs, quads):
    """``vpmaddubsw(codes, pairs)`` then ``vpmaddwd(., quads)``: int32 lanes of 4-byte dots."""
    n = codes.type.count
    v16, v32 = vector(I16, n // 2), vector(I32, n // 4)
    maddubs, maddwd = (("llvm.x86.avx512.pmaddubs.w.512", "llvm.x86.avx512.pmaddw.d.512")
                       if n == 64 else ("llvm.x86.avx2.pmadd.ub.sw", "llvm.x86.avx2.pmadd.wd"))
    words = _call(builder, maddubs, v16, [codes, ir.Constant(codes.type, [
        ir.Constant(I8, pairs[i % len(pairs)]) for i in range(n)])])
    quads = ir.Constant(v16, [ir.Constant(I16, quads[i % len(quads)]) for i in range(n // 2)])
    return _call(builder, maddwd, v32, [words, quads])


def _or_shifted(builder, words, shift):
    """``w | w s 6 | w s 12 | w s 18`` for the shift ``s`` (the 4 codes of a byte or a word)."""
    n = words.type.count
    out = words
    for bits in (6, 12, 18):
        out = builder.or_(out, shift(words, splat(I32, n, bits)))
    return out


def _sig_ok(src, dst, src_dtype, dst_dtype) -> bool:
    return (isinstance(src, types.Array) and src.dtype == src_dtype
            and isinstance(dst, types.Array) and dst.dtype == dst_dtype)


def _block_loop(context, builder, sig, args, body):
    """``body(src, dst, k)`` for each block k; the pointers are at ``soff`` and ``doff``."""
    src = pointer(context, builder, sig.args[0], args[0], args[1], I8)
    dst = pointer(context, builder, sig.args[2], args[2], args[3], I8)
    with cgutils.for_range(builder, args[4]) as loop:
        body(src, dst, loop.index)


def _reduce(builder, kind, acc):
    value = builder.load(acc)
    return _call(builder, f"llvm.vector.reduce.{kind}.{_suffix(value)}", I8, [value])


def make_pack_2bit(target: Target):
    """The "2bit" pack intrinsic of ``target``: blocks of ``target.lanes`` trits."""
    lanes = target.lanes

    @intrinsic
    def pack_2bit(typingctx, src, soff, dst, doff, nblocks):
        if not _sig_ok(src, dst, types.int8, types.uint8):
            return None
        sig = types.uint8(src, types.intp, dst, types.intp, types.intp)

        def codegen(context, builder, sig, args):
            vb = vector(I8, lanes)
            top = cgutils.alloca_once_value(builder, ir.Constant(vb, None))

            def body(src, dst, k):
                trits = load(builder, src, builder.mul(k, ir.Constant(k.type, lanes)), vb, 1)
                codes = builder.add(trits, splat(I8, lanes, 1))
                builder.store(_umax(builder, builder.load(top), codes), top)
                if target.x86:
                    words = _multiply_adds(builder, codes, (1, 4), (1, 16))
                else:
                    words = builder.bitcast(codes, vector(I32, lanes // 4))
                    words = _or_shifted(builder, words, builder.lshr)
                store(builder, builder.trunc(words, vector(I8, lanes // 4)), dst,
                       builder.mul(k, ir.Constant(k.type, lanes // 4)), 1)

            _block_loop(context, builder, sig, args, body)
            return _reduce(builder, "umax", top)

        return sig, codegen

    return pack_2bit


def make_unpack_2bit(target: Target):
    """The "2bit" unpack intrinsic of ``target``: blocks of ``target.lanes // 4`` bytes."""
    lanes = target.lanes

    @intrinsic
    def unpack_2bit(typingctx, src, soff, dst, doff, nblocks):
        if not _sig_ok(src, dst, types.uint8, types.int8):
            return None
        sig = types.uint8(src, types.intp, dst, types.intp, types.intp)

        def codegen(context, builder, sig, args):
            vb, vw = vector(I8, lanes), vector(I32, lanes // 4)
            threes = cgutils.alloca_once_value(builder, ir.Constant(vb, None))

            def body(src, dst, k):
                packed = load(builder, src, builder.mul(k, ir.Constant(k.type, lanes // 4)),
                              vector(I8, lanes // 4), 1)
                spread = _or_shifted(builder, builder.zext(packed, vw), builder.shl)
                codes = builder.bitcast(builder.and_(spread, splat(I32, lanes // 4, 0x03030303)),
                                        vb)
                three = builder.and_(codes, builder.lshr(codes, splat(I8, lanes, 1)))
                builder.store(builder.or_(builder.load(threes), three), threes)
                store(builder, builder.sub(codes, splat(I8, lanes, 1)), dst,
                       builder.mul(k, ir.Constant(k.type, lanes)), 1)

            _block_loop(context, builder, sig, args, body)
            return _reduce(builder, "or", threes)

        return sig, codegen

    return unpack_2bit


def _digits(builder, parts, n):
    """Lane ``j`` of the result: element ``5 j + n`` of the vectors ``parts`` laid end to end.

    A tree of two-source shuffles (``vpermt2b`` with AVX-512 VBMI): the lanes each pair
    of vectors holds, then the pairs merged, taking a lane from where it is defined.
    """
    lanes = parts[0].type.count
    where = [(5 * j + n) // lanes for j in range(lanes)]  # the vector of each lane
    index = [(5 * j + n) % lanes for j in range(lanes)]
    level = []
    for first in range(0, len(parts), 2):
        group = (first, first + 1)
        b = parts[first + 1] if first + 1 < len(parts) else ir.Constant(parts[0].type, None)
        mask = [index[j] + lanes * (where[j] - first) if where[j] in group else -1
                for j in range(lanes)]
        level.append((group, builder.shuffle_vector(parts[first], b, _mask(mask))))
    while len(level) > 1:
        (ga, a), (gb, b) = level[0], level[1]
        mask = [j if where[j] in ga else lanes + j if where[j] in gb else -1
                for j in range(lanes)]
        level = [(ga + gb, builder.shuffle_vector(a, b, _mask(mask))), *level[2:]]
    return level[0][1]


def _mask(lanes):
    """A shuffle mask; lanes of -1 (not read) take element 0 (llvmlite has no undef there)."""
    return ir.Constant(vector(I32, len(lanes)), [max(i, 0) for i in lanes])


def make_pack_base3(target: Target):
    """The "base3" pack intrinsic of ``target``: blocks of ``target.lanes`` units."""
    lanes = target.lanes

    @intrinsic
    def pack_base3(typingctx, src, soff, dst, doff, nblocks):
        """``nblocks`` blocks of ``5 L`` int8 trits from ``soff`` to ``L`` base3 bytes at ``doff``.

        :func:`make_unpack_base3`'s inverse: the 5 vectors of a block give each lane's
        codes ``c_n`` by :func:`_digits`; ``q = 81 c0 + 27 c1 + 9 c2 + 3 c3 + c4`` is
        summed in bytes (``q <= 242``), and ``(256 q + 242) // 243`` is
        ``q + (13 q + 242) * 270 >> 16`` (exact for ``q <= 242``; ``vpmulhuw``).
        Returns the largest code seen.
        """
        if not _sig_ok(src, dst, types.int8, types.uint8):
            return None
        sig = types.uint8(src, types.intp, dst, types.intp, types.intp)

        def codegen(context, builder, sig, args):
            vb, v16 = vector(I8, lanes), vector(I16, lanes)
            top = cgutils.alloca_once_value(builder, ir.Constant(vb, None))

            def body(src, dst, k):
                base = builder.mul(k, ir.Constant(k.type, 5 * lanes))
                codes = []
                for m in range(5):
                    trits = load(builder, src, builder.add(base, ir.Constant(k.type, lanes * m)),
                                 vb, 1)
                    codes.append(builder.add(trits, splat(I8, lanes, 1)))
                    builder.store(_umax(builder, builder.load(top), codes[-1]), top)
                q = _digits(builder, codes, 0)
                for n in range(1, 5):  # q = 3 q + c_n, in bytes: q <= 242 all along
                    q = builder.add(builder.add(builder.add(q, q), q), _digits(builder, codes, n))
                # (256 q + 242) // 243 == q + (13 q + 242) * 270 >> 16 for q <= 242
                x = builder.add(builder.mul(builder.zext(q, v16), splat(I16, lanes, 13)),
                                splat(I16, lanes, 242))
                hi = builder.lshr(builder.mul(builder.zext(x, vector(I32, lanes)),
                                              splat(I32, lanes, 270)), splat(I32, lanes, 16))
                store(builder, builder.add(q, builder.trunc(hi, vb)), dst,
                      builder.mul(k, ir.Constant(k.type, lanes)), 1)

            _block_loop(context, builder, sig, args, body)
            return _reduce(builder, "umax", top)

        return sig, codegen

    return pack_base3


@intrinsic
def pack_planes(typingctx, src, soff, dst, plus, minus, nwords):
    """Bit-plane words of ``nwords`` runs of 64 trits from byte ``soff`` of ``src``.

    Word k of the plus plane goes to byte ``plus + 8 k`` of ``dst``, of the minus
    plane to ``minus + 8 k``: a ``<64 x i8>`` compare each (``vpcmpeqb`` into a mask
    register on AVX-512 BW, two ``vpmovmskb`` on AVX2), the same IR at every level.
    Returns the largest code as the packers above do.
    """
    if not _sig_ok(src, dst, types.int8, types.uint8):
        return None
    sig = types.uint8(src, types.intp, dst, types.intp, types.intp, types.intp)

    def codegen(context, builder, sig, args):
        vb = vector(I8, 64)
        top = cgutils.alloca_once_value(builder, ir.Constant(vb, None))
        src = pointer(context, builder, sig.args[0], args[0], args[1], I8)
        dst = pointer(context, builder, sig.args[2], args[2], ir.Constant(I64, 0), I8)
        with cgutils.for_range(builder, args[5]) as loop:
            k = loop.index
            codes = builder.add(load(builder, src, builder.mul(k, ir.Constant(k.type, 64)), vb,
                                     1), splat(I8, 64, 1))
            builder.store(_umax(builder, builder.load(top), codes), top)
            at = builder.mul(k, ir.Constant(k.type, 8))
            for plane, code in ((args[3], 2), (args[4], 0)):
                word = builder.bitcast(builder.icmp_unsigned("==", codes, splat(I8, 64, code)),
                                       I64)
                store(builder, word, dst, builder.add(plane, at), 1)
        return _reduce(builder, "umax", top)

    return sig, codegen


def make_unpack_base3(target: Target):
    """The "base3" unpack intrinsic of ``target``: blocks of ``target.lanes`` bytes."""
    lanes = target.lanes
    pows = [3 ** n for n in range(5)]

    @intrinsic
    def unpack_base3(typingctx, src, soff, dst, doff, nblocks):
        """``nblocks`` blocks of ``L`` base3 bytes from ``soff`` to ``5 L`` int8 trits at ``doff``.

        Each of a block's 5 output vectors takes the byte of each lane's unit with a
        constant shuffle (``vpermb`` with AVX-512 VBMI) and decodes its digit as the
        format does, without division: ``v = byte 3^n mod 256``, ``c = 3 v >> 8``,
        in 16-bit lanes. Returns non-zero where a byte is not a canonical encoding
        (one of the 13 that no digits encode to).
        """
        if not _sig_ok(src, dst, types.uint8, types.int8):
            return None
        sig = types.uint8(src, types.intp, dst, types.intp, types.intp)

        def codegen(context, builder, sig, args):
            v16 = vector(I16, lanes)
            odd = cgutils.alloca_once_value(builder, ir.Constant(vector(I8, lanes), None))

            def digit(wide, power):  # c_n of each lane's byte for its power 3^n
                v = builder.and_(builder.mul(wide, power), splat(I16, lanes, 255))
                return builder.lshr(builder.mul(v, splat(I16, lanes, 3)), splat(I16, lanes, 8))

            def body(src, dst, k):
                packed = load(builder, src, builder.mul(k, ir.Constant(k.type, lanes)),
                              vector(I8, lanes), 1)
                for m in range(5):  # trits m L .. m L + L - 1 of the block
                    at = [lanes * m + i for i in range(lanes)]
                    spread = builder.shuffle_vector(packed, ir.Constant(packed.type, None),
                                                    ir.Constant(vector(I32, lanes),
                                                                [j // 5 for j in at]))
                    codes = digit(builder.zext(spread, v16),
                                  ir.Constant(v16, [pows[j % 5] for j in at]))
                    store(builder, builder.sub(builder.trunc(codes, vector(I8, lanes)),
                                               splat(I8, lanes, 1)),
                          dst, builder.add(builder.mul(k, ir.Constant(k.type, 5 * lanes)),
                                           ir.Constant(k.type, lanes * m)), 1)
                # the 13 bytes no digits encode to are those with 13 b + 255 mod 256 < 13
                x = builder.and_(builder.add(builder.mul(builder.zext(packed, v16),
                                                         splat(I16, lanes, 13)),
                                             splat(I16, lanes, 255)), splat(I16, lanes, 255))
                builder.store(builder.or_(builder.load(odd), builder.zext(
                    builder.icmp_unsigned("<", x, splat(I16, lanes, 13)), vector(I8, lanes))),
                    odd)

            _block_loop(context, builder, sig, args, body)
            return _reduce(builder, "or", odd)

        return sig, codegen

    return unpack_base3


@intrinsic
def unpack_planes(typingctx, src, plus, minus, dst, doff, nwords):
    """:func:`pack_planes`' inverse: ``nwords`` word pairs to runs of 64 int8 trits at ``doff``.

    Word k of the plus plane is read at byte ``plus + 8 k`` of ``src``, of the minus
    plane at ``minus + 8 k``; each becomes 64 lanes of 0 or -1 (a ``<64 x i1>`` mask
    sign-extended: ``vpmovm2b`` on AVX-512 BW), and ``minus - plus`` is the trits.
    Returns the or of ``plus & minus`` over the words: non-zero where a bit is set
    in both planes (a corrupt code).
    """
    if not _sig_ok(src, dst, types.uint8, types.int8):
        return None
    sig = types.uint64(src, types.intp, types.intp, dst, types.intp, types.intp)

    def codegen(context, builder, sig, args):
        vb, mask = vector(I8, 64), vector(ir.IntType(1), 64)
        both = cgutils.alloca_once_value(builder, ir.Constant(I64, 0))
        src = pointer(context, builder, sig.args[0], args[0], ir.Constant(I64, 0), I8)
        dst = pointer(context, builder, sig.args[3], args[3], args[4], I8)
        with cgutils.for_range(builder, args[5]) as loop:
            k = loop.index
            at = builder.mul(k, ir.Constant(k.type, 8))
            plus, minus = (load(builder, src, builder.add(plane, at), I64, 1)
                           for plane in (args[1], args[2]))
            builder.store(builder.or_(builder.load(both), builder.and_(plus, minus)), both)
            lanes = [builder.sext(builder.bitcast(word, mask), vb) for word in (plus, minus)]
            store(builder, builder.sub(lanes[1], lanes[0]), dst,
                  builder.mul(k, ir.Constant(k.type, 64)), 1)
        return builder.load(both)

    return sig, codegen


def make_copy_trits(target: Target):
    """The checked copy of ``target``: int8 trits a vector of ``target.lanes`` at a time."""
    lanes = target.lanes

    @intrinsic
    def copy_trits(typingctx, src, soff, dst, doff, n):
        """``dst[doff:doff + n] = src[soff:soff + n]``; the largest code ``t + 1`` copied.

        Whole vectors, then the last vector of the run again (overlapping the one
        before it) where the run is at least one vector long, else a byte loop:
        the dense ``permute``'s rows, whose runs start at any byte. Valid trits give
        at most 2 (0 for an empty run); ``src`` and ``dst`` must not overlap.
        """
        if not _sig_ok(src, dst, types.int8, types.int8):
            return None
        sig = types.uint8(src, types.intp, dst, types.intp, types.intp)

        def codegen(context, builder, sig, args):
            vb = vector(I8, lanes)
            src = pointer(context, builder, sig.args[0], args[0], args[1], I8)
            dst = pointer(context, builder, sig.args[2], args[2], args[3], I8)
            n = args[4]
            width = ir.Constant(n.type, lanes)
            top = cgutils.alloca_once_value(builder, ir.Constant(vb, None))

            def copy(at, ty, one):  # the codes t + 1 of what it copied
                value = load(builder, src, at, ty, 1)
                store(builder, value, dst, at, 1)
                return builder.add(value, one)

            def keep(codes):
                builder.store(_umax(builder, builder.load(top), codes), top)

            with builder.if_else(builder.icmp_signed(">=", n, width)) as (whole, short):
                with whole:
                    with cgutils.for_range(builder, builder.udiv(n, width)) as loop:
                        keep(copy(builder.mul(loop.index, width), vb, splat(I8, lanes, 1)))
                    keep(copy(builder.sub(n, width), vb, splat(I8, lanes, 1)))
                with short:
                    with cgutils.for_range(builder, n) as loop:
                        code = copy(loop.index, I8, ir.Constant(I8, 1))
                        keep(builder.insert_element(ir.Constant(vb, None), code,
                                                    ir.Constant(I32, 0)))
            return _reduce(builder, "umax", top)

        return sig, codegen

    return copy_trits


pack_2bit = make_pack_2bit(TARGET)
unpack_2bit = make_unpack_2bit(TARGET)
pack_base3 = make_pack_base3(TARGET)
unpack_base3 = make_unpack_base3(TARGET)
copy_trits = make_copy_trits(TARGET)
BLOCK_TRITS = TARGET.lanes  # trits per 2bit block
BASE3_UNITS = TARGET.lanes  # base3 bytes (5-trit units) per block, both ways
