"""GGUF block-format code shared by the backends and the public layer.

Semantics: ``reference.gguf``.

- Per-block codecs (``encode_*_block``, ``decode_*_block``, :func:`block_inverse`):
  plain Python functions compiled by ``numba.njit`` in :mod:`..cpu.gguf` and by
  ``numba.cuda.jit(device=True)`` in :mod:`..cuda.gguf`; each calls no other function.
  Codes are ``1 + (v >= 0.5) - (v <= -0.5)`` with ``v = x * (1 / d)``: ggml's
  round-half-away for ``|v| <= 1``, which always holds since ``d = max|x|``.
  Inner loops run over contiguous values so that the CPU build vectorizes, on a
  block's slices (``x[base:base + 256]``, ``qs[b]``) indexed from loop counters:
  the same encoders indexing ``x`` directly ran 1.1-2.5x slower. Arithmetic is in
  float32 where numba would widen int32 to int64 (which AVX2 cannot multiply or
  convert as vectors). The float32 bit tricks they go with are in :mod:`.floatbits`.
- Byte layouts in NumPy (``tq2_bytes``/``tq2_codes``, ``tq1_bytes``/``tq1_codes``,
  ``i2s_bytes``/``i2s_unpack``): codes t + 1 to the formats' bytes and back, for
  the reference backend and for encoding trits without a float round trip.
"""

import numpy as np

# the smallest block maximum whose float32 inverse ggml's encoders can use: 1 / d overflows
# at and below it
INVERSE_MIN = np.float32(2.0**-128)


def _least_float32_at_least(x: float) -> np.float32:
    """The smallest float32 whose value is >= the double ``x``."""
    f = np.float32(x)
    return f if float(f) >= x else np.nextafter(f, np.float32(np.inf))


# bitnet.cpp's converter codes w as 0 where fabs((double)w) < 1e-6, compared in double: for
# float32 w that is |w| < I2S_NONZERO (1.0000001e-06; float32(1e-6) itself is below 1e-6)
I2S_NONZERO = _least_float32_at_least(1e-6)


def block_inverse(d):
    """``1 / d`` as ggml's encoders multiply by it, in float32, or 0.

    0 for ``d = 0``, and also where ``1 / d`` overflows (``d <= 2**-128``): ggml
    rounds ``x * inf`` and ``0 * inf`` to NaN, which its int8 cast makes code 1,
    the code that ``x * 0`` gives here.
    """
    return np.float32(1) / d if d > INVERSE_MIN else np.float32(0)


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


def encode_i2s_block(x, base, qs, b):
    """I2_S bytes ``qs[b]`` of values ``x[base:base + 128]``: 32n + k at byte k, shift 6 - 2n.

    ``qs`` is ``(blocks, 32)``: 2-D indexing lets the CPU build vectorize (a flat
    ``qs[32 b + k]`` runs 6x slower).
    """
    tiny = I2S_NONZERO
    xb = x[base:base + 128]
    for k in range(32):
        qs[b, k] = 0
    for n in range(4):
        shift = np.int32(6 - 2 * n)
        for k in range(32):
            v = np.float32(xb[32 * n + k])
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


# ------------------------------------------------------------ byte layouts, in NumPy
_POW3 = np.array([81, 27, 9, 3, 1], dtype=np.uint16)


def tq2_bytes(codes: np.ndarray) -> np.ndarray:
    """TQ2_0 ``qs``: byte 32h + m holds elements 128h + m + 32n at bits 2n."""
    c = codes.reshape(-1, 2, 4, 32)
    return (c[:, :, 0] | c[:, :, 1] << 2 | c[:, :, 2] << 4 | c[:, :, 3] << 6).reshape(-1, 64)


def tq2_codes(qs: np.ndarray) -> np.ndarray:
    """Inverse of :func:`tq2_bytes` (code 3 stays 3)."""
    shifts = np.array([0, 2, 4, 6], np.uint8)[:, None]
    return ((qs.reshape(-1, 2, 1, 32) >> shifts) & 3).reshape(-1, 256)


def _base3(digits: np.ndarray) -> np.ndarray:
    q = (digits.astype(np.uint16) * _POW3[: digits.shape[1], None]).sum(axis=1, dtype=np.uint16)
    return ((q * 256 + 242) // 243).astype(np.uint8)


def tq1_bytes(codes: np.ndarray) -> np.ndarray:
    """TQ1_0 ``qs[48]`` and ``qh[4]`` (52 bytes per block of 256 codes)."""
    n = codes.shape[0]
    return np.concatenate([
        _base3(codes[:, :160].reshape(n * 1, 5, 32)).reshape(n, 32),
        _base3(codes[:, 160:240].reshape(n, 5, 16)).reshape(n, 16),
        _base3(codes[:, 240:].reshape(n, 4, 4)).reshape(n, 4),  # fifth digit 0
    ], axis=1)


def tq1_codes(qs: np.ndarray) -> np.ndarray:
    """Inverse of :func:`tq1_bytes`: digit n of a byte is ((byte * 3^n) mod 256 * 3) >> 8."""
    n = qs.shape[0]
    pow3 = np.array([1, 3, 9, 27, 81], np.uint16)[:, None]

    def digits(b: np.ndarray, k: int) -> np.ndarray:
        return ((((b[:, None, :].astype(np.uint16) * pow3[:k]) & 255) * 3) >> 8).reshape(
            n, k * b.shape[1])

    return np.concatenate(
        [digits(qs[:, :32], 5), digits(qs[:, 32:48], 5), digits(qs[:, 48:52], 4)], axis=1
    ).astype(np.uint8)


def i2s_bytes(codes: np.ndarray) -> np.ndarray:
    """128-element blocks of 32 bytes: element j at byte j % 32, shift 6 - 2 (j // 32)."""
    c = codes.reshape(-1, 4, 32)
    return (c[:, 0] << 6 | c[:, 1] << 4 | c[:, 2] << 2 | c[:, 3]).reshape(-1)


def i2s_unpack(qs: np.ndarray) -> np.ndarray:
    """Inverse of :func:`i2s_bytes`."""
    shifts = np.array([6, 4, 2, 0], np.uint8)[:, None]
    return ((qs.reshape(-1, 1, 32) >> shifts) & 3).reshape(-1)
