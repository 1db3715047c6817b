"""The CPU bundle's bit-sliced counter (LLVM IR), at both block widths, against NumPy's bit counts.

``make_count_bits(words)`` is built for 32 columns (4 AVX-512 registers, the
avx512vnni level's block) and 8 (the other levels'); both are plain vector IR
that LLVM lowers for the running CPU, so both are tested here on any machine.
"""

import numpy as np
import pytest
from conftest import EVERY_LEVEL
from hypothesis import given
from hypothesis import strategies as st
from numba import njit
from test_dispatch import run_python

import tritnum as tn
from tritnum import _isa as isa
from tritnum import vsa
from tritnum._kernels.cpu import vsa as cpu_vsa
from tritnum._kernels.cpu._llvm.bundle import LANES, make_count_bits


def _runner(count):
    @njit
    def run(rows, off, stride, n, valid, cnt, top):
        count(rows, off, stride, n, valid, cnt, top)

    return run


RUNNERS = {words: _runner(make_count_bits(words)) for words in (LANES, 4 * LANES)}


def _count(words, rows, off, stride, n, valid, top):
    cnt = np.full(top * words, np.uint64(0xDEADBEEF))  # every counter word must be written
    RUNNERS[words](rows, off, stride, n, valid, cnt, top)
    return cnt.reshape(top, words)


def _expected(block, top):
    """Bit k of each lane's count of set bits over the rows of ``block`` ``(n, words)``."""
    bits = np.unpackbits(block.view(np.uint8).reshape(*block.shape, 8), axis=-1,
                         bitorder="little").reshape(block.shape[0], block.shape[1], 64)
    counts = bits.sum(axis=0, dtype=np.uint64)  # (words, 64)
    k = np.arange(top, dtype=np.uint64)[:, None, None]
    planes = (counts[None] >> k) & np.uint64(1)  # (top, words, 64)
    return (planes << np.arange(64, dtype=np.uint64)).sum(axis=-1, dtype=np.uint64)


@pytest.mark.parametrize("words", sorted(RUNNERS))
@given(n=st.sampled_from([0, 1, 2, 15, 16, 17, 31, 32, 33, 47, 100, 255, 256, 257]),
       valid=st.integers(1, 32), extra=st.integers(0, 9), lead=st.integers(0, 5),
       density=st.sampled_from([0.0, 0.5, 1.0]), seed=st.integers(0, 2**32 - 1))
def test_counts_match_numpy(words, n, valid, extra, lead, density, seed):
    valid = min(valid, words)
    rng = np.random.default_rng(seed)
    stride = valid + extra  # rows of a wider array; the block at the very end of each row
    bits = rng.random((n * stride + lead, 64)) < density
    flat = np.packbits(bits, axis=-1, bitorder="little").view(np.uint64).reshape(-1)
    off = lead + extra
    top = max(4, n.bit_length())
    got = _count(words, flat, off, stride, n, valid, top)
    block = flat[lead:].reshape(n, stride)[:, extra:] if n else np.zeros((0, valid), np.uint64)
    want = np.zeros((top, words), np.uint64)
    want[:, :valid] = _expected(np.ascontiguousarray(block), top)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", [1, 15, 16, 17, 1000,
                               pytest.param(70000, marks=pytest.mark.slow)])
def test_every_count_bit_through_bundle(n):
    """Many rows (17 count bits at 70,000): the carries ripple through every memory bit."""
    rng = np.random.default_rng(n)
    d = 64 * cpu_vsa.WORDS + 70  # a full block and a partial one
    vs = rng.choice(np.array([-1, 0, 1], np.int8), (n, d), p=[0.3, 0.35, 0.35])
    vs[:, :5] = 1  # unanimous columns: the count n itself
    vs[: n // 2 + 1, 5:9] = -1
    got = vsa.bundle(tn.pack(vs, "bitplane"), device="cpu")
    np.testing.assert_array_equal(tn.unpack(got), np.sign(vs.sum(axis=0, dtype=np.int64)))


@pytest.mark.parametrize("level", EVERY_LEVEL)
def test_every_level_bundles_exactly(level):
    """Each level's block width (8 columns below avx512vnni) through ``vsa.bundle``."""
    if level not in isa.available():
        pytest.skip(f"this CPU lacks {level}: {', '.join(sorted(isa.REQUIRES[level]))}")
    out = run_python("""
        import numpy as np, tritnum as tn
        from tritnum._kernels.cpu import vsa as cpu_vsa
        rng = np.random.default_rng(1)
        for n, d in [(1, 70), (17, 640), (300, 1000), (33, 64 * 41)]:
            vs = rng.integers(-1, 2, (n, 3, d), dtype=np.int8)
            got = tn.unpack(tn.vsa.bundle(tn.pack(vs, "bitplane"), device="cpu"))
            assert (got == np.sign(vs.sum(axis=0, dtype=np.int64))).all(), (n, d)
        print(cpu_vsa.WORDS)
    """, TRITNUM_ISA=level)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(4 * LANES if level == "avx512vnni" else LANES)
