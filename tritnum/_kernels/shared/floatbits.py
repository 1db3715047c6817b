"""float32 bit tricks shared by the numba kernels of several families (GGUF, quantize).

Plain Python functions on integer bit patterns, compiled by ``numba.njit`` in
:mod:`..cpu` and by ``numba.cuda.jit(device=True)`` in :mod:`..cuda`; each calls
no other function.
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
    for j in range(count):  # range(base, base + count) ran 6x slower in 256-value blocks
        v = np.int32(bits[base + j] & np.uint32(0x7FFFFFFF))
        m = v if v > m else m
    return np.uint32(m) if m <= np.int32(0x7F800000) else np.uint32(0x7FC00000)


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


# float16 -> float32 in three steps on a float32 buffer and its uint32 view (numba has no
# float16 on the CPU): the half's exponent and significand moved into float32's place
# (half_shifted_bits), the value scaled by 2^112 to rebias the exponent, which also makes
# subnormal halves normal floats exactly (HALF_REBIAS), then infinity and NaN given
# float32's exponent and the sign set (half_finish_bits)
HALF_REBIAS = np.float32(2.0**112)


def half_shifted_bits(h):
    """The exponent and significand of half bits ``h`` moved into float32's bit places."""
    return (np.uint32(h) & np.uint32(0x7FFF)) << np.uint32(13)


def half_finish_bits(bits, h):
    """float32 bits of half ``h`` from its rebiased magnitude's bits ``bits``.

    After the 2^112 scaling a half infinity or NaN (exponent 31) has become
    2^16 or more: it gets float32's all-ones exponent, keeping its significand.
    """
    if bits >= np.uint32(0x47800000):  # 2^16
        bits |= np.uint32(0x7F800000)
    return bits | ((np.uint32(h) & np.uint32(0x8000)) << np.uint32(16))
