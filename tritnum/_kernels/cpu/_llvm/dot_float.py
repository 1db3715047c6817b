"""The float dot of the 2bit GEMV: float32 trits of a block times float32 activations.

The target (:mod:`.gemv_target`) picks how a 2-bit code becomes a float trit: from
AVX2 on, ``vpermilps`` turns each code into its float trit in one instruction (8
lanes; 16 on AVX-512, B = 64); portably a mask, a subtraction and a conversion do
(the trit times a power of 4, scaled back once per code n). :func:`trit_vectors`
also serves the GEMM's decoder (:func:`.gemv.make_decode`). Nothing here is
bounds-checked.
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils

from . import F32, I8, I32, load, splat, vector


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


def trit_vectors(builder, w, count, target, exact, body, weight=None):
    """``body(t, scale, n, part, offset)`` for every ``lanes`` float trits of ``count`` blocks.

    With ``weight`` (a float32 vector, or a function of the block index and the part
    giving one for each part of each block) the trits come multiplied by it.

    Each ``lanes`` bytes (part ``part`` of the block) are zero-extended once into
    int32 lanes and code n of every lane becomes a float trit (times ``1 / scale``:
    a power of 4 on the portable path unless ``exact``); ``offset`` is its place
    in the block layout, ``4Bk + Bn + lanes * part``.
    """
    size, lanes = target.block, target.lanes
    vi = vector(I32, lanes)
    with cgutils.for_range(builder, count) as loop:
        k = loop.index
        for part in range(size // lanes):
            wk = weight(k, part) if callable(weight) else weight
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


def float_accumulators(builder, target):
    """The float dot's accumulators: :func:`_float_chains` per code n (they hide the latency)."""
    vf = vector(F32, target.lanes)
    return [cgutils.alloca_once_value(builder, ir.Constant(vf, None))
            for _ in range(4 * _float_chains(target))]


def accumulate_float(builder, w, x, count, target, accs, weight=None):
    """Add ``trit * x`` (times ``weight``) into ``accs``; returns the scale of each code n."""
    vf = vector(F32, target.lanes)
    scales = [1.0] * 4

    def body(t, scale, n, part, offset):
        scales[n] = scale
        chains = _float_chains(target)
        acc = accs[chains * n + part % chains]
        prod = builder.fmul(t, load(builder, x, offset, vf, 1), flags=("contract",))
        builder.store(builder.fadd(builder.load(acc), prod, flags=("contract",)), acc)

    trit_vectors(builder, w, count, target, False, body, weight)
    return scales


def float_total(builder, accs, scales, target):
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


def sum_float(builder, w, x, count, target):
    """Lanes whose sum is that of ``trit * x``."""
    accs = float_accumulators(builder, target)
    return float_total(builder, accs, accumulate_float(builder, w, x, count, target, accs),
                        target)
