"""llama.cpp's Q8_K activations, shared by the backends: the block quantizer and the lanes.

Semantics: :mod:`..reference.q8k`.

:func:`quantize_q8k_block` is ggml's ``quantize_row_q8_K_ref`` for one block of
``QK_K`` values, a plain Python function compiled by ``numba.njit`` in
:mod:`..cpu.q8k` and by ``numba.cuda.jit(device=True)`` in :mod:`..cuda.q8k`.
The CPU quantizes whole rows in vectorized passes that give the same values
(``_quantize_row``, tested against this function) and runs this one only on the
blocks those passes hand over: all-zero, non-finite or with an overflowing scale.

The dot product reproduces ggml's AVX2 ``ggml_vec_dot_tq2_0_q8_K`` (x86 builds;
its ``tq1_0`` twin has the same lanes): each block's integer sum is split over
``LANES`` int32 lanes, lane ``L`` holding the products of the values ``e`` with
``(e % 32) // 4 == L`` minus the block's values ``32 L .. 32 L + 31`` (the two
``bsums`` that the codes ``t + 1`` over-count), and the lanes are rescaled and
accumulated in float32 one block after another, then added as ``hsum_float_8``
does: ``((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))``.

ggml writes the lane update ``sumf = _mm256_add_ps(_mm256_mul_ps(lanes, d), sumf)``;
GCC (the default build, ``-march=native``) contracts it into one FMA, rounding once
per block: that is the default here (``fused``). Without contraction (``-ffp-contract=off``
or a compiler that keeps them apart) the product and the sum round each:
``activations="q8_k_unfused"``. :func:`fma32` is the single rounding in NumPy.
"""

import numpy as np

QK_K = 256  # values per Q8_K block
BSUM = 16  # values per bsums entry
LANES = 8  # float32 lanes of ggml's AVX2 accumulator


def quantize_q8k_block(x, base, q, bsums, bbase):
    """Quantize ``x[base:base + QK_K]`` (float32) into ``q`` and ``bsums[bbase:bbase + 16]``.

    As ggml: ``max`` is the first value of largest ``|x|``, ``iscale = -127 / max``,
    ``q = min(127, round_half_even(iscale * x))`` (ggml's ``nearest_int``, the
    product rounded to float32 first) and ``d = 1 / iscale``, all in float32; an
    all-zero block has ``d = 0`` and zero quants, and a block whose ``iscale``
    overflows (``|max| < 127 / FLT_MAX``) zero quants and ``d = 1 / iscale = -0 *
    sign(max)``: ggml's ``nearest_int`` of infinity or NaN casts to the int8 0. Returns
    ``d``, or NaN when the block holds NaN or infinity (its quants are then not
    written).
    """
    xb = x[base:base + QK_K]
    qb = q[base:base + QK_K]
    zero = np.float32(0)
    # four interleaved chains: one serial chain of compares and adds took ~3 cycles a value
    m0 = m1 = m2 = m3 = zero  # the largest |x| of the values j % 4 = 0, 1, 2, 3 (NaN never)
    bad0 = bad1 = bad2 = bad3 = zero  # x * 0 is NaN exactly for NaN and infinities
    for j in range(0, QK_K, 4):
        v0, v1, v2, v3 = xb[j], xb[j + 1], xb[j + 2], xb[j + 3]
        m0 = abs(v0) if abs(v0) > m0 else m0
        m1 = abs(v1) if abs(v1) > m1 else m1
        m2 = abs(v2) if abs(v2) > m2 else m2
        m3 = abs(v3) if abs(v3) > m3 else m3
        bad0 += v0 * zero
        bad1 += v1 * zero
        bad2 += v2 * zero
        bad3 += v3 * zero
    bad = (bad0 + bad1) + (bad2 + bad3)
    if bad != zero:
        return bad
    amax = max(max(m0, m1), max(m2, m3))
    top = zero
    if amax != zero:
        for j in range(QK_K):  # the first value of largest |x|
            if abs(xb[j]) == amax:
                top = xb[j]
                break
    inf = np.float32(np.inf)
    iscale = np.float32(-127) / top if amax != zero else inf
    if abs(iscale) == inf:  # all zeros, or |max| so small that -127 / max overflows
        for j in range(QK_K):
            qb[j] = 0
        for k in range(QK_K // BSUM):
            bsums[bbase + k] = 0
        return np.float32(1) / iscale
    for j in range(QK_K):
        qb[j] = min(127, round(iscale * xb[j]))
    for k in range(QK_K // BSUM):
        s = 0
        for j in range(BSUM * k, BSUM * k + BSUM):
            s += int(qb[j])
        bsums[bbase + k] = s
    return np.float32(1) / iscale


def fma32(a, b, c):
    """float32 ``a * b + c`` rounded once, as ``fma``, for float32 arrays or scalars (NumPy).

    The product of two float32 is exact in float64 (24 + 24 significant bits <= 53).
    The sum with ``c`` is rounded to float64 (``s``) with its exact error ``e``
    (Knuth's TwoSum, exact without overflow, which float32 operands cannot reach),
    then rounded to odd: an inexact ``s`` whose last bit is even moves one float64
    ulp toward ``e``. Rounding to odd with at least two bits more than the target
    (53 >= 24 + 2), then to nearest float32, rounds the exact value once (Boldo and
    Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using
    rounding to odd", IEEE Trans. Computers 57(4), 2008, Theorem 3); plain float64
    rounding then float32 rounds twice and errs where ``s`` falls on a float32 tie
    (``a = b = 1 + 2**-12, c = 2**-80``). NaN and infinities follow IEEE (they skip
    the correction).
    """
    c64 = np.asarray(c, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        p = np.asarray(a, np.float64) * np.asarray(b, np.float64)
        s = p + c64
        back = s - p
        e = (p - (s - back)) + (c64 - back)
        even = (s.view(np.int64) & 1) == 0
        nudge = (e != 0) & even & np.isfinite(s)
        s = np.where(nudge, np.nextafter(s, np.copysign(np.inf, e)), s)
        return s.astype(np.float32)  # past the float32 range: infinity, as fma


def hsum8(a0, a1, a2, a3, a4, a5, a6, a7):
    """The ``hsum_float_8`` of ggml: eight float32 lanes (any operands that add as float32)."""
    return ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))
