"""Per-block GGUF codecs shared by the CPU and CUDA kernels (semantics: ``reference.gguf``).

Plain Python functions compiled by ``numba.njit`` in :mod:`.cpu.gguf` and by
``numba.cuda.jit(device=True)`` in :mod:`.cuda.gguf`; each calls no other function.
Codes are ``1 + (v >= 0.5) - (v <= -0.5)`` with ``v = x * (1 / d)``: ggml's
round-half-away for ``|v| <= 1``, which always holds since ``d = max|x|``.
Inner loops run over contiguous values so that the CPU build vectorizes, on a
block's slices (``x[base:base + 256]``, ``qs[b]``) indexed from loop counters:
the same encoders indexing ``x`` directly ran 1.1-2.5x slower. Arithmetic is in
float32 where numba would widen int32 to int64 (which AVX2 cannot multiply or
convert as vectors).
"""

import numpy as np


def block_absmax_bits(bits, base, count):
    """Bits of max |x[base:base + count]| from x's float32 bits; above 0x7F800000 if a NaN.

    Without the sign bit, float32 bit patterns order like the values (NaN above
    infinity), so an integer max finds the absmax in one vectorizable pass. The
    max is taken on int32 values by hand: ``max()`` on uint32 compares them as
    int64, which the CPU build runs 3x slower.
    """
    m = np.int32(0)
    for j in range(base, base + count):
        v = np.int32(bits[j] & np.uint32(0x7FFFFFFF))
        m = v if v > m else m
    return np.uint32(m) if m <= np.int32(0x7F800000) else np.uint32(0x7FC00000)


# the smallest block maximum whose float32 inverse ggml's encoders can use: 1 / d overflows
# at and below it
INVERSE_MIN = np.float32(2.0**-128)


def block_inverse(d):
    """``1 / d`` as ggml's encoders multiply by it, in float32, or 0.

    0 for ``d = 0``, and also where ``1 / d`` overflows (``d <= 2**-128``): ggml
    rounds ``x * inf`` and ``0 * inf`` to NaN, which its int8 cast makes code 1,
    the code that ``x * 0`` gives here.
    """
    return np.float32(1) / d if d > INVERSE_MIN else np.float32(0)


def float16_bits(bits):
    """IEEE half bits of the float32 with bits ``bits``, rounded to nearest even (as NumPy).

    Overflow gives infinity, a NaN the quiet NaN 0x7E00. Integer-only, as neither
    numba target converts to float16 on its own.
    """
    sign = (bits >> np.uint32(16)) & np.uint32(0x8000)
    a = bits & np.uint32(0x7FFFFFFF)
    if a > np.uint32(0x7F800000):
        return np.uint16(sign | np.uint32(0x7E00))
    if a >= np.uint32(0x477FF000):  # 65520 and up round to infinity
        return np.uint16(sign | np.uint32(0x7C00))
    if a >= np.uint32(0x38800000):  # a normal half: round the significand to 10 bits
        odd = (a >> np.uint32(13)) & np.uint32(1)
        h = ((a + np.uint32(0xFFF) + odd) >> np.uint32(13)) - np.uint32(0x1C000)
        return np.uint16(sign | h)
    exponent = a >> np.uint32(23)
    if exponent < np.uint32(102):  # below 2^-25: rounds to zero
        return np.uint16(sign)
    # a subnormal half: the 24-bit significand in units of 2^-24, rounded to even
    significand = (a & np.uint32(0x7FFFFF)) | np.uint32(0x800000)
    shift = np.uint32(126) - exponent
    h = significand >> shift
    rest = significand - (h << shift)
    halfway = np.uint32(1) << (shift - np.uint32(1))
    if rest > halfway or (rest == halfway and (h & np.uint32(1)) != 0):
        h += np.uint32(1)
    return np.uint16(sign | h)


def encode_tq2_block(x, base, inv, qs, b):
    """TQ2_0 ``qs`` of block b: byte 32h + k holds values 128h + k + 32n at bits 2n.

    A byte is summed as the float32 ``sum(4^n code_n)`` (exact), then converted.
    """
    half = np.float32(0.5)
    zero = np.float32(0)
    one = np.float32(1)
    xb = x[base:base + 256]
    qb = qs[b]
    for h in range(2):
        for k in range(32):  # contiguous values: the CPU build vectorizes this loop
            q = zero
            for n in range(4):
                v = xb[128 * h + 32 * n + k] * inv
                code = one + (one if v >= half else zero) - (one if v <= -half else zero)
                q += np.float32(1 << (2 * n)) * code
            qb[32 * h + k] = np.int32(q)


def encode_tq1_block(x, base, inv, qs, b):
    """TQ1_0 ``qs[48]`` and ``qh[4]`` of block b (base-3 bytes, ``qh``'s fifth digit 0).

    Each byte's digits accumulate as a float32, ``q = 3 q + c`` (exact, below
    243), and the byte ``(256 q + 242) // 243`` is ``int(q * 256/243 + 242.5/243)``:
    the fraction it truncates lies in [0.002, 0.998], far from float32 rounding
    (checked for every q in the tests). One pass over the block; the digit loop
    unrolls so that the byte loop vectorizes.
    """
    half = np.float32(0.5)
    zero = np.float32(0)
    one = np.float32(1)
    three = np.float32(3)
    scale = np.float32(256 / 243)
    offset = np.float32(242.5 / 243)
    xb = x[base:base + 256]
    qb = qs[b]
    for part in range(3):
        first = 0 if part == 0 else (32 if part == 1 else 48)
        count = 32 if part == 0 else (16 if part == 1 else 4)
        start = 0 if part == 0 else (160 if part == 1 else 240)
        digits = 5 if part < 2 else 4
        for k in range(count):
            q = zero
            for n in range(5):
                q *= three
                if n < digits:
                    v = xb[start + k + count * n] * inv
                    q += one + (one if v >= half else zero) - (one if v <= -half else zero)
            qb[first + k] = np.int32(q * scale + offset)


def encode_i2s_block(x, b, qs):
    """I2_S bytes ``qs[b]`` of values 128b...: value 128b + 32n + k at byte k, shift 6 - 2n.

    ``qs`` is ``(blocks, 32)``: 2-D indexing lets the CPU build vectorize (a flat
    ``qs[32 b + k]`` runs 6x slower).
    """
    tiny = np.float32(1e-6)
    for k in range(32):
        qs[b, k] = 0
    for n in range(4):
        shift = np.int32(6 - 2 * n)
        for k in range(32):
            v = np.float32(x[128 * b + 32 * n + k])
            code = np.int32(1) + np.int32(v >= tiny) - np.int32(v <= -tiny)
            qs[b, k] |= code << shift


def decode_tq2_block(qs, b, d, out, row):
    """Values ``d * (code - 1)`` of TQ2_0 block b into ``out[row]``; whether a code was 3."""
    bad = False
    one = np.int32(1)
    three = np.int32(3)
    for h in range(2):
        for n in range(4):
            shift = np.int32(2 * n)
            for k in range(32):
                code = (np.int32(qs[b, 32 * h + k]) >> shift) & three
                bad |= code == three
                out[row, 128 * h + 32 * n + k] = d * np.float32(code - one)
    return bad


def decode_tq1_block(qs, b, d, out, row):
    """Values of TQ1_0 block b into ``out[row]``.

    Digit n of a byte is ``((byte * 3^n) mod 256 * 3) >> 8``, computed in float32
    (exact: ``byte * 3^n / 256`` has at most 15 integer and 8 fraction bits) as
    ``int(3 frac(y))`` with ``y = byte * 3^n / 256``.
    """
    three = np.float32(3)
    one = np.float32(1)
    qb = qs[b]
    ob = out[row]
    for part in range(3):
        first = 0 if part == 0 else (32 if part == 1 else 48)
        count = 32 if part == 0 else (16 if part == 1 else 4)
        start = 0 if part == 0 else (160 if part == 1 else 240)
        digits = 5 if part < 2 else 4
        for k in range(count):
            y = np.float32(qb[first + k]) * np.float32(1 / 256)
            for n in range(5):  # unrolled
                if n < digits:
                    fraction = y - np.float32(np.int32(y))
                    code = np.float32(np.int32(fraction * three))
                    ob[start + k + count * n] = d * (code - one)
                y *= three
    return False


def decode_i2s_block(qs, b, scale, out):
    """Values 128b... of I2_S block b (``qs`` and ``out`` 2-D); returns whether a code was 3."""
    bad = False
    one = np.int32(1)
    three = np.int32(3)
    for n in range(4):
        shift = np.int32(6 - 2 * n)
        for k in range(32):
            code = (np.int32(qs[b, k]) >> shift) & three
            bad |= code == three
            out[b, 32 * n + k] = scale * np.float32(code - one)
    return bad
