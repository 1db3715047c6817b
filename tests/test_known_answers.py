"""Known-answer vectors worked out by hand from DESIGN §2, not by the code under test."""

import numpy as np
import pytest

import tritnum as tn

# 2bit: code t + 1, element j at bits 2*(j % 4) of byte j // 4; padding code 1.
TWO_BIT = [
    ([-1, 0, 1, 1], [0b10_10_01_00]),  # 164
    ([1], [0b01_01_01_10]),  # 86: three padding codes 1
    ([0, 0, 0, 0], [0x55]),
    ([-1, -1, -1, -1, -1], [0x00, 0x54]),
    ([1, 1, 1, 1, 0, -1], [0xAA, 0b01_01_00_01]),  # 170, 81
]
# base3: q = sum c_n 3^(4-n), byte = (256 q + 242) // 243; padding trit 0.
BASE3 = [
    ([0, 0, 0, 0, 0], [128]),  # q = 121: (30976 + 242) // 243
    ([-1, -1, -1, -1, -1], [0]),  # q = 0
    ([1, 1, 1, 1, 1], [255]),  # q = 242: 62194 // 243
    ([1, 0, -1, 1, 1], [208]),  # q = 162 + 27 + 0 + 6 + 2 = 197
    ([1], [213]),  # codes 2,1,1,1,1: q = 202
    ([-1, 0, 1, 1, 0, -1, 0], [55, 43]),  # q = 52 and q = 40
]
# bitplane: +1 sets bit j % 64 of plus word j // 64, -1 the minus word.
BITPLANE = [
    ([1, -1, 0], [[1], [2]]),
    ([0] * 64 + [-1], [[0, 0], [0, 1]]),
    ([1] * 64, [[2**64 - 1], [0]]),
    ([0] * 63 + [-1], [[0], [2**63]]),
]


@pytest.mark.parametrize(
    ("fmt", "trits", "data"),
    [("2bit", *c) for c in TWO_BIT] + [("base3", *c) for c in BASE3]
    + [("bitplane", *c) for c in BITPLANE],
)
def test_known_answer(fmt, trits, data, device):
    expected = np.array(data, dtype=np.uint64 if fmt == "bitplane" else np.uint8)
    packed = tn.pack(np.array(trits, dtype=np.int8), fmt, device=device)
    np.testing.assert_array_equal(packed.data, expected)
    assert packed.data.dtype == expected.dtype
    wrapped = tn.PackedTrits(expected, (len(trits),), fmt)
    np.testing.assert_array_equal(tn.unpack(wrapped, device=device), trits)


def test_base3_digit_formula_matches_division(device):
    """DESIGN's division-free digit decode agrees with plain base-3 digits of q."""
    for q in range(243):
        byte = (q * 256 + 242) // 243
        digits = [(q // 3 ** (4 - n)) % 3 for n in range(5)]
        trits = [d - 1 for d in digits]
        packed = tn.PackedTrits(np.array([byte], np.uint8), (5,), "base3")
        assert tn.unpack(packed, device=device).tolist() == trits
        assert tn.pack(np.array(trits), "base3").data.tolist() == [byte]


def noncanonical_base3_bytes():
    canonical = {(q * 256 + 242) // 243 for q in range(243)}
    return sorted(set(range(256)) - canonical)


def test_thirteen_bytes_are_not_base3_codes():
    assert len(noncanonical_base3_bytes()) == 13


def test_multirow_padding_is_per_row(device):
    trits = np.array([[1, 1, 1, 1, 1], [-1, -1, -1, -1, -1]], np.int8)
    packed = tn.pack(trits, "2bit", device=device)
    assert packed.data.tolist() == [[0xAA, 0x56], [0x00, 0x54]]
    assert packed.data.shape == (2, 2)
