"""Batched ``tn.vsa.permute`` on the CPU: every path of its kernels against ``np.roll``, exactly.

The dense kernel copies each row in two runs of whole vectors (the last one overlapping
its neighbour, or a byte loop below a vector) and checks the values as it copies; the
bit-plane kernel rolls short rows a word at a time (rows of whole words on their own)
and long rows in vectorized loops. The widths and shifts below put a run, a word count
or a bit offset on each side of each of those bounds.
"""

import numpy as np
import pytest

import tritnum as tn
from tritnum._kernels.cpu.vsa import ROLL_WORDS
from tritnum.errors import InvalidTritsError
from tritnum.vsa import algebra

# dense rows: runs under, at and over a vector (16/32/64 bytes) and several of them;
# bit-plane rows: 1 word, whole words and not, up to ROLL_WORDS words and past it
DIMS = sorted({1, 2, 5, 31, 63, 64, 65, 100, 128, 200, 256, 64 * ROLL_WORDS - 1,
               64 * ROLL_WORDS, 64 * ROLL_WORDS + 1, 1000, 1024, 4133})


def _shifts(d, rows, rng):
    """Per-row shifts: 0, the edges of a word and of the row, then random ones (any sign)."""
    edges = [0, 1, 63, 64, 65, d - 64, d - 63, d - 1, d, d + 1, -1, -65, 3 * d + 7]
    return np.array(edges + list(rng.integers(-3 * d, 3 * d, rows - len(edges))), np.int64)


def _rolled(v, shifts):
    return np.stack([np.roll(row, s) for row, s in zip(v, shifts, strict=True)])


@pytest.mark.parametrize("packed", [False, True], ids=["dense", "bitplane"])
@pytest.mark.parametrize("d", DIMS)
def test_permute_rows_equal_np_roll(d, packed):
    rng = np.random.default_rng(d)
    v = rng.integers(-1, 2, (40, d), dtype=np.int8)
    x = tn.pack(v, "bitplane") if packed else v
    shifts = _shifts(d, len(v), rng)
    got = tn.vsa.permute(x, shifts)
    want = _rolled(v, shifts)
    if packed:
        assert got == tn.pack(want, "bitplane")  # padding bits 0: the same words
        got = tn.unpack(got)
    np.testing.assert_array_equal(got, want, strict=True)
    for s in (0, 1, 64, d - 1, -d - 5):  # one shift for every row
        one = tn.vsa.permute(x, s)
        np.testing.assert_array_equal(tn.unpack(one) if packed else one, np.roll(v, s, axis=-1))


@pytest.mark.parametrize("packed", [False, True], ids=["dense", "bitplane"])
def test_permute_many_rows_on_threads(packed):
    """Enough bytes for the thread pool (tasks split over rows), one shift and one a row."""
    rng = np.random.default_rng(5)
    v = rng.integers(-1, 2, (600, 4133), dtype=np.int8)
    x = tn.pack(v, "bitplane") if packed else v
    shifts = rng.integers(0, 4133, 600)
    for s, want in ((shifts, _rolled(v, shifts)), (77, np.roll(v, 77, axis=-1))):
        got = tn.vsa.permute(x, s)
        np.testing.assert_array_equal(tn.unpack(got) if packed else got, want)


def _general(monkeypatch):
    monkeypatch.setattr(algebra, "_host_pair", lambda *a: None)


@pytest.mark.parametrize("bad", [2, -2, 127, -128])
@pytest.mark.parametrize("d, at", [(3, 1), (70, 0), (70, 69), (200, 5), (200, 130),
                                   (1000, 999)])
def test_permute_dense_bad_value_raises_as_the_general_route(monkeypatch, d, at, bad):
    """A non-trit in either run of a row, in a whole vector, the overlapping last one or
    the byte loop: the fast route sends the rows to the general route, which names it."""
    v = np.random.default_rng(d).integers(-1, 2, (4, d), dtype=np.int8)
    v[2, at] = bad
    for shifts in (1, d // 2, [0, 1, d - 1, 5]):
        with pytest.raises(InvalidTritsError) as fast:
            tn.vsa.permute(v, shifts)
        with monkeypatch.context() as m:
            _general(m)
            with pytest.raises(InvalidTritsError) as slow:
                tn.vsa.permute(v, shifts)
        assert str(fast.value) == str(slow.value)


@pytest.mark.parametrize("shifts", [1.5, [1, 2, 3], "1"])
def test_permute_bad_values_and_bad_shifts_raise_as_the_general_route(monkeypatch, shifts):
    """Both wrong: the values' error first on both routes (the general route checks them
    before the shifts)."""
    v = np.array([[1, 0, 5, -1], [0, 1, 1, 0]], np.int8)
    with pytest.raises(Exception) as fast:
        tn.vsa.permute(v, shifts)
    _general(monkeypatch)
    with pytest.raises(Exception) as slow:
        tn.vsa.permute(v, shifts)
    assert type(fast.value) is type(slow.value) is InvalidTritsError
    assert str(fast.value) == str(slow.value)
