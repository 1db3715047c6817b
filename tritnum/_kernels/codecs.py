"""Per-unit codecs shared by the CPU and CUDA kernels.

Plain Python functions, compiled by ``numba.njit`` in :mod:`.cpu` and by
``numba.cuda.jit(device=True)`` in :mod:`.cuda`, so both backends encode and
decode with the same code. They work on one packed row seen as ``uint8``:
"2bit" and "base3" rows are their bytes; a "bitplane" row of ``2 * nw``
uint64 words is seen as ``16 * nw`` bytes, the plus plane first, the minus
plane from byte ``half = 8 * nw`` on (little-endian, as the words are). A
bitplane "unit" here is one byte of each plane: 8 trits.

The functions call no other function, so each compiles on its own.
"""

UNIT_TRITS = (4, 5, 8)  # trits per uint8 unit for codes 0 (2bit), 1 (base3), 2 (bitplane)


def encode_unit(fmt, src, start, count):
    """Encode trits ``src[start:start + count]`` into one unit; -1 if one is not a trit.

    Padding (``count`` below the unit size) encodes as trit 0. A bitplane unit
    comes back as ``plus | minus << 8``.
    """
    if fmt == 2:
        plus = 0
        minus = 0
        for k in range(count):
            t = int(src[start + k])
            if t == 1:
                plus |= 1 << k
            elif t == -1:
                minus |= 1 << k
            elif t != 0:
                return -1
        return plus | (minus << 8)
    value = 0
    for k in range(4 if fmt == 0 else 5):
        c = 1
        if k < count:
            c = int(src[start + k]) + 1
            if c < 0 or c > 2:
                return -1
        if fmt == 0:
            value |= c << (2 * k)
        else:
            value = value * 3 + c
    if fmt == 1:
        value = (value * 256 + 242) // 243
    return value


def store_unit(fmt, row, u, half, value):
    """Write an :func:`encode_unit` result as unit ``u`` of a packed uint8 row."""
    if fmt == 2:
        row[u] = value & 255
        row[half + u] = value >> 8
    else:
        row[u] = value


def read_code(fmt, row, j, half):
    """Code (trit + 1) of trit ``j`` of a packed uint8 row; 3 marks a corrupt 2bit code."""
    if fmt == 0:
        return (int(row[j >> 2]) >> ((j & 3) << 1)) & 3
    if fmt == 1:
        v = int(row[j // 5])
        for _ in range(j % 5):
            v = (v * 3) & 255
        return (v * 3) >> 8
    b = j >> 3
    s = j & 7
    return 1 + ((int(row[b]) >> s) & 1) - ((int(row[half + b]) >> s) & 1)


def unit_ok(fmt, row, u, n, half):
    """Whether unit ``u`` of a packed row of ``n`` trits is what an encoder writes.

    Rejects 2bit code 3, base3 bytes that are not a canonical encoding, bitplane
    bits set in both planes, and padding that is not trit 0.
    """
    if fmt == 2:
        plus = int(row[u])
        minus = int(row[half + u])
        valid = n - 8 * u
        pad = 0
        if valid < 8:
            pad = 255 ^ ((1 << max(valid, 0)) - 1)
        return (plus & minus) == 0 and ((plus | minus) & pad) == 0
    b = int(row[u])
    if fmt == 0:
        for k in range(4):
            c = (b >> (2 * k)) & 3
            if c == 3 or (4 * u + k >= n and c != 1):
                return False
        return True
    v = b
    q = 0
    for k in range(5):
        c = (v * 3) >> 8
        v = (v * 3) & 255
        if 5 * u + k >= n and c != 1:
            return False
        q = q * 3 + c
    return (q * 256 + 242) // 243 == b
