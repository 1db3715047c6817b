"""Per-block GGUF codecs shared by the CPU and CUDA kernels (semantics: ``reference.gguf``).

Plain Python functions compiled by ``numba.njit`` in :mod:`.cpu.gguf` and by
``numba.cuda.jit(device=True)`` in :mod:`.cuda.gguf`; each calls no other function.
Codes are ``1 + (v >= 0.5) - (v <= -0.5)`` with ``v = x * (1 / d)``: ggml's
round-half-away for ``|v| <= 1``, which always holds since ``d = max|x|``.
Inner loops run over contiguous values so that the CPU build vectorizes.
"""

import numpy as np


def block_absmax_bits(bits, base, count):
    """Bits of max |x[base:base + count]| from x's float32 bits; above 0x7F800000 if a NaN.

    Without the sign bit, float32 bit patterns order like the values (NaN above
    infinity), so an integer max finds the absmax in one vectorizable pass.
    """
    m = np.uint32(0)
    for j in range(base, base + count):
        m = max(m, np.uint32(bits[j]) & np.uint32(0x7FFFFFFF))
    return m if m <= np.uint32(0x7F800000) else np.uint32(0x7FC00000)


def encode_tq2_block(x, base, inv, qs, b):
    """TQ2_0 ``qs`` of block b: byte 32h + k holds values 128h + k + 32n at bits 2n."""
    half = np.float32(0.5)
    for j in range(64):
        qs[b, j] = 0
    for h in range(2):
        for n in range(4):
            shift = np.int32(2 * n)
            for k in range(32):  # contiguous values: the CPU build vectorizes this loop
                v = np.float32(x[base + 128 * h + 32 * n + k]) * inv
                code = np.int32(1) + np.int32(v >= half) - np.int32(v <= -half)
                qs[b, 32 * h + k] |= code << shift


def encode_tq1_block(x, base, inv, qs, b):
    """TQ1_0 ``qs[48]`` and ``qh[4]`` of block b (base-3 bytes, ``qh``'s fifth digit 0).

    Each byte's digits accumulate in a register, ``q = 3 q + c`` (below 243),
    and the byte is ``(256 q + 242) // 243``: one pass over the block, the
    digit loop unrolled so that the byte loop vectorizes.
    """
    half = np.float32(0.5)
    one = np.int32(1)
    for part in range(3):
        first = 0 if part == 0 else (32 if part == 1 else 48)
        count = 32 if part == 0 else (16 if part == 1 else 4)
        start = 0 if part == 0 else (160 if part == 1 else 240)
        digits = 5 if part < 2 else 4
        for k in range(count):
            q = np.uint32(0)
            for n in range(5):
                c = np.int32(0)
                if n < digits:
                    v = np.float32(x[base + start + k + count * n]) * inv
                    c = one + np.int32(v >= half) - np.int32(v <= -half)
                q = q * np.uint32(3) + np.uint32(c)
            qs[b, first + k] = (q * np.uint32(256) + np.uint32(242)) // np.uint32(243)


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

    Digit n of a byte is ``((byte * 3^n) mod 256 * 3) >> 8``.
    """
    one = np.int32(1)
    for part in range(3):
        first = 0 if part == 0 else (32 if part == 1 else 48)
        count = 32 if part == 0 else (16 if part == 1 else 4)
        start = 0 if part == 0 else (160 if part == 1 else 240)
        digits = 5 if part < 2 else 4
        for k in range(count):
            byte = np.int32(qs[b, first + k])
            pow3 = np.int32(1)
            for n in range(5):  # unrolled: 3^n is a constant in each copy
                if n < digits:
                    code = (((byte * pow3) & np.int32(255)) * np.int32(3)) >> 8
                    out[row, start + k + count * n] = d * np.float32(code - one)
                pow3 *= np.int32(3)
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
