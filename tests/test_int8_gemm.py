"""The CPU integer GEMM (int8 activations) against exact int64 sums, on every SIMD level.

The micro-kernel of each level the CPU has is made here and checked against its
documented panel layout; the whole GEMM runs at this process's level in place and
at every other level the CPU has in a subprocess (``TRITNUM_ISA``).
"""

import ctypes
import mmap
import sys

import numpy as np
import pytest
from conftest import EVERY_LEVEL
from hypothesis import given
from hypothesis import strategies as st
from numba import njit
from test_dispatch import run_python

import tritnum as tn
from tritnum import _isa as isa
from tritnum._kernels.cpu import int8_gemm
from tritnum._kernels.cpu._llvm import gemm
from tritnum._kernels.cpu._llvm.gemv import SLOTS
from tritnum._kernels.cpu._llvm.unaligned import load_u32_head


def _runner(kernel):
    @njit
    def run(ap, bp, sp, xp, c, words, segments):
        kernel(ap, 5, bp, 3, words, segments, sp, 2, xp, 1, c)

    return run


# each level's micro-kernel, called with its panels at offsets 5, 3, 2 and 1 (made once)
TILES = {level: (tile, _runner(gemm.make_tile(tile))) for level, tile in gemm.TILES.items()}
SIDES = st.sampled_from([1, 3, 4, 5, 15, 16, 17, 31, 33, 63, 64, 65, 127, 129, 255, 257, 300])

needs_tile = pytest.mark.skipif(
    gemm.TILE is None, reason=f"the {isa.ISA} level has no integer GEMM (it stays on BLAS)")


def needs(level):
    if level not in isa.available():
        pytest.skip(f"this CPU lacks {level}: {', '.join(sorted(isa.REQUIRES[level]))}")


def codes_of(packed):
    """The four 2-bit codes of each byte, ``(..., bytes, 4)``."""
    return (packed[..., None] >> (2 * np.arange(4, dtype=np.uint8))) & 3


@pytest.mark.parametrize("level", sorted(gemm.TILES))
@given(words=st.integers(0, 5), segments=st.integers(0, 4), seed=st.integers(0, 2**32 - 1))
def test_micro_kernel_matches_its_layout(level, words, segments, seed):
    """c[r, j] = sum_s scales[s, j] * (sum of code * q over segment s - xsum[s, r])."""
    needs(level)
    tile, run = TILES[level]
    rows, cols, steps = tile.rows, tile.cols, words * segments
    rng = np.random.default_rng(seed)
    b = rng.integers(0, 256, (steps, cols, 4), dtype=np.uint8)
    a = rng.integers(-128, 128, (steps, rows, 16), dtype=np.int8)
    a[rng.random(a.shape) < 0.1] = -128
    xsum = rng.integers(-2**20, 2**20, (segments, rows), dtype=np.int32)
    scales = rng.integers(-8, 9, (segments, cols)) / 4.0  # exact float64 products and sums
    bp = np.concatenate([np.zeros(3, np.uint8), b.reshape(-1)])
    ap = np.concatenate([np.zeros(5, np.int8), a.reshape(-1)])
    sp = np.concatenate([np.full(2, np.nan), scales.reshape(-1)])
    xp = np.concatenate([np.full(1, 2**30, np.int32), xsum.reshape(-1)])
    c = np.full(SLOTS * rows * cols + 3, 7.0)
    run(ap, bp, sp, xp, c, words, segments)
    codes = codes_of(b).astype(np.int64)  # (t, j, byte, n): element 4 * byte + n of step t
    q = a.reshape(steps, rows, 4, 4).astype(np.int64)  # (t, r, n, byte)
    sums = np.einsum("tjbn,trnb->trj", codes, q).reshape(segments, words, rows, cols).sum(1)
    expected = np.einsum("srj,sj->rj", sums - xsum[:, :, None], scales)
    np.testing.assert_array_equal(c[:rows * cols].reshape(rows, cols), expected)
    assert (c[-3:] == 7.0).all()  # nothing written past the result and its slots


@njit
def lay_out(q, a, steps, stride):
    return gemm.lay_out(q, 3, a, 2, steps, stride)


@given(steps=st.integers(0, 9), stride=st.integers(16, 40), seed=st.integers(0, 2**32 - 1))
def test_lay_out_shuffles_each_step_and_sums_it(steps, stride, seed):
    rng = np.random.default_rng(seed)
    q = rng.integers(-128, 128, 16 * steps + 3, dtype=np.int8)
    a = np.full(stride * steps + 16 + 2, 99, np.int8)
    total = lay_out(q, a, steps, stride)
    assert total == q[3:].astype(np.int64).sum()
    runs = q[3:].reshape(steps, 4, 4)  # (t, b, n): element 4b + n
    for t in range(steps):
        np.testing.assert_array_equal(a[2 + stride * t:2 + stride * t + 16],
                                      runs[t].T.reshape(-1))  # 4n + b
    assert (a[:2] == 99).all()


def _transposer(transpose):
    @njit
    def run(src, sstride, dst, dstride):
        transpose(src, 3, sstride, dst, 5, dstride)

    return run


@pytest.mark.parametrize("lanes", sorted({tile.lanes for tile in gemm.TILES.values()}))
@given(pad=st.integers(0, 9), seed=st.integers(0, 2**32 - 1))
def test_transpose_words_swaps_rows_and_words(lanes, pad, seed):
    """Row i's word k, from byte 3 + i * sstride, lands at byte 5 + k * dstride + 4i."""
    rng = np.random.default_rng(seed)
    sstride, dstride = 4 * lanes + pad, 4 * lanes + 2 * pad
    src = rng.integers(0, 256, 3 + lanes * sstride, dtype=np.uint8)
    dst = np.full(5 + lanes * dstride, 77, np.uint8)
    _transposer(gemm.make_transpose(lanes))(src, sstride, dst, dstride)
    words = np.stack([src[3 + i * sstride:3 + i * sstride + 4 * lanes] for i in range(lanes)])
    expected = words.reshape(lanes, lanes, 4).swapaxes(0, 1)  # (k, i, byte)
    for k in range(lanes):
        np.testing.assert_array_equal(dst[5 + k * dstride:5 + k * dstride + 4 * lanes],
                                      expected[k].reshape(-1))
        assert (dst[5 + k * dstride + 4 * lanes:5 + (k + 1) * dstride] == 77).all()
    assert (dst[:5] == 77).all()


@needs_tile
@given(out=st.integers(1, 3 * gemm.TILE.cols + 1), units=st.integers(1, 300),
       groups=st.sampled_from([1, 2, 3, 5]), seed=st.integers(0, 2**32 - 1))
def test_weight_panel_matches_its_layout(out, units, groups, seed):
    """Whole-word segments that fill the rows take the transposes, others word by word;
    zeros past a segment's end, a row's end and the last row."""
    rng = np.random.default_rng(seed)
    w = rng.integers(0, 256, (out, units), dtype=np.uint8)
    seg = -(-units // groups)
    nseg, words, cols = -(-units // seg), -(-seg // 4), gemm.TILE.cols
    steps, blocks = nseg * words, -(-out // cols)
    b0 = int(rng.integers(0, blocks))
    panel = np.full((blocks - b0) * steps * cols * 4, 99, np.uint8)
    int8_gemm._weight_panel(w, seg, words, nseg, cols, b0, blocks, panel)
    padded = np.zeros((blocks * cols, nseg, 4 * words), np.uint8)
    for s in range(nseg):
        part = w[:, s * seg:min(units, (s + 1) * seg)]
        padded[:out, s, :part.shape[1]] = part
    expected = padded.reshape(blocks, cols, steps, 4).swapaxes(1, 2)[b0:]
    np.testing.assert_array_equal(panel, expected.reshape(-1))


@njit
def load_head(row, offset, count):
    return load_u32_head(row, offset, count)


def guarded_page():
    """A page of uint8 whose next page is unreadable (a read past its end would crash)."""
    libc = ctypes.CDLL(None, use_errno=True)
    size = mmap.PAGESIZE
    pages = mmap.mmap(-1, 2 * size)
    base = ctypes.addressof(ctypes.c_char.from_buffer(pages))
    assert libc.mprotect(ctypes.c_void_p(base + size), size, 0) == 0  # PROT_NONE
    return np.frombuffer(pages, np.uint8, size)  # the mapping lives as long as the array


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mprotect through ctypes")
def test_word_heads_read_no_byte_past_their_count():
    """The panel's partial words: ``count`` bytes of a word, little-endian, the rest 0,
    at the last bytes before an unreadable page."""
    row = guarded_page()
    row[:] = np.random.default_rng(5).integers(0, 256, row.size, dtype=np.uint8)
    for offset in range(row.size - 4, row.size + 1):
        for count in range(-2, row.size - offset + 1):
            head = row[offset:offset + max(0, min(count, 4))]
            expected = int.from_bytes(head.tobytes(), "little")
            assert load_head(row, offset, count) == expected, (offset, count)
    assert load_head(row, 0, 9) == int.from_bytes(row[:4].tobytes(), "little")


def exact_gemm(q, trits):
    return q.astype(np.int64) @ trits.T.astype(np.int64)


def gemm_int8(q, w, xscale=None):
    """The kernel on a TernaryTensor (the dispatcher sends few rows to the GEMV)."""
    out, n = w.shape
    scales = (np.full((out, 1), w.scales, np.float32) if w.group_size is None
              else w.scales.reshape(out, -1))
    xscale = np.ones(q.shape[0], np.float32) if xscale is None else xscale
    return int8_gemm.gemm_int8(q, xscale, w.packed.data, w.packed._format, n, scales)


@needs_tile
@given(rows=st.integers(1, 300), out=st.integers(1, 70), n=SIDES,
       fmt=st.sampled_from(tn.FORMATS), seed=st.integers(0, 2**32 - 1))
def test_integer_sums_are_exact(rows, out, n, fmt, seed):
    """Unit scales: tails of activation rows, weight rows and inputs, every format."""
    rng = np.random.default_rng(seed)
    trits = rng.integers(-1, 2, (out, n), dtype=np.int8)
    q = rng.integers(-128, 128, (rows, n), dtype=np.int8)
    w = tn.TernaryTensor(tn.pack(trits, fmt), np.float32(1.0))
    np.testing.assert_array_equal(gemm_int8(q, w), exact_gemm(q, trits))


@needs_tile
@pytest.mark.parametrize("group", [4, 8, 12, 16, 32, 64, 111, 256])
@pytest.mark.parametrize("fmt", ["2bit", "base3"])
def test_group_scales_are_applied_exactly(group, fmt):
    """Dyadic scales: every group sum times its scale is exact in float64, so is y."""
    rng = np.random.default_rng(group)
    out, n, rows = 37, 3 * group * (1 + 256 // group), 21
    trits = rng.integers(-1, 2, (out, n), dtype=np.int8)
    scales = rng.integers(1, 64, (out, n // group)).astype(np.float32) / 16
    w = tn.TernaryTensor(tn.pack(trits, fmt), scales, group_size=group)
    q = rng.integers(-128, 128, (rows, n), dtype=np.int8)
    xscale = rng.integers(1, 8, rows).astype(np.float32) / 4
    sums = np.einsum("rgj,ogj->rog", q.astype(np.int64).reshape(rows, -1, group),
                     trits.astype(np.int64).reshape(out, -1, group))
    expected = (sums * scales).sum(-1) * xscale[:, None]
    np.testing.assert_array_equal(gemm_int8(q, w, xscale), expected.astype(np.float32))


@needs_tile
@pytest.mark.parametrize("group", [4, 12, 20])
def test_groups_ending_inside_a_step_of_whole_rows(group):
    """Groups of a size not a multiple of 16 in rows that are (n % 16 == 0): each group's
    last, partial step is laid out by a kernel of its own, which these rows need too."""
    rng = np.random.default_rng(group)
    out, n, rows = 19, 16 * group, 9
    trits = rng.integers(-1, 2, (out, n), dtype=np.int8)
    scales = rng.integers(1, 64, (out, n // group)).astype(np.float32) / 16
    w = tn.TernaryTensor(tn.pack(trits), scales, group_size=group)
    q = rng.integers(-128, 128, (rows, n), dtype=np.int8)
    sums = np.einsum("rgj,ogj->rog", q.astype(np.int64).reshape(rows, -1, group),
                     trits.astype(np.int64).reshape(out, -1, group))
    np.testing.assert_array_equal(gemm_int8(q, w), (sums * scales).sum(-1).astype(np.float32))


@needs_tile
@pytest.mark.parametrize("limit", [16, 64, 1024])
def test_long_rows_are_cut_into_exact_pieces(monkeypatch, limit):
    """Rows longer than INT32_EXACT inputs (here lowered) take several int32 segments."""
    monkeypatch.setattr(int8_gemm, "INT32_EXACT", limit)
    rng = np.random.default_rng(limit)
    n = 5 * limit + 7
    trits = rng.integers(-1, 2, (40, n), dtype=np.int8)
    q = rng.integers(-128, 128, (19, n), dtype=np.int8)
    w = tn.TernaryTensor(tn.pack(trits), np.float32(1.0))
    np.testing.assert_array_equal(gemm_int8(q, w), exact_gemm(q, trits))


@needs_tile
def test_extreme_sums_are_exact():
    """Every product at its largest and all of one sign: the int32 sums still fit."""
    n = 1 << 17
    trits = np.ones((3, n), np.int8)
    trits[1] = -1
    trits[2, ::2] = 0
    q = np.full((9, n), -128, np.int8)
    q[1::2] = 127
    w = tn.TernaryTensor(tn.pack(trits), np.float32(1.0))
    np.testing.assert_array_equal(gemm_int8(q, w), exact_gemm(q, trits))


@needs_tile
def test_sums_past_int32_exact_inputs():
    """A row one input longer than INT32_EXACT, every product near its largest: two segments,
    each exact in int32 (the accumulators start at minus the sum of q and may wrap)."""
    n = int8_gemm.INT32_EXACT + 1
    trits = np.ones((2, n), np.int8)
    trits[1, ::7] = -1
    q = np.full((2, n), -128, np.int8)
    q[1, 3::5] = 127
    w = tn.TernaryTensor(tn.pack(trits), np.float32(1.0))
    np.testing.assert_array_equal(gemm_int8(q, w), exact_gemm(q, trits).astype(np.float32))


@needs_tile
def test_threads_and_strided_activations_through_linear():
    """Weights large enough for the thread pool; int8 x read through a strided view."""
    rng = np.random.default_rng(5)
    trits = rng.integers(-1, 2, (1030, 4100), dtype=np.int8)
    w = tn.TernaryTensor(tn.pack(trits), np.float32(0.5))
    x = rng.integers(-128, 128, (40, 8200), dtype=np.int8)[:, ::2]
    xscale = np.full(40, 2.0, np.float32)
    y = tn.linear(x, w, x_scale=xscale, device="cpu")
    np.testing.assert_array_equal(y, exact_gemm(x, trits).astype(np.float32))


@pytest.mark.parametrize("level", EVERY_LEVEL)
def test_every_level_end_to_end(level):
    """The whole int8 path in a process forced to each level (BLAS on the portable one)."""
    needs(level)
    out = run_python("""
        import numpy as np, tritnum as tn
        from tritnum._kernels.cpu._llvm import gemm
        rng = np.random.default_rng(0)
        for rows, out, n, group in [(17, 33, 300, None), (300, 5, 77, None), (20, 40, 512, 32),
                                    (18, 9, 222, 111)]:
            trits = rng.integers(-1, 2, (out, n), dtype=np.int8)
            q = rng.integers(-128, 128, (rows, n), dtype=np.int8)
            g = group or n
            scales = rng.integers(1, 64, (out, n // g)).astype(np.float32) / 16
            if group is None:
                scales[:] = scales[0, 0]
            w = tn.TernaryTensor(tn.pack(trits), scales if group else scales[0, 0], group)
            y = tn.linear(q, w, x_scale=np.ones(rows, np.float32))
            sums = np.einsum("rgj,ogj->rog", q.astype(np.int64).reshape(rows, -1, g),
                             trits.astype(np.int64).reshape(out, -1, g))
            expected = (sums * scales).sum(-1).astype(np.float32)
            assert (y == expected).all(), (rows, out, n, group)
        print(gemm.TILE)
    """, TRITNUM_ISA=level)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(gemm.TILES.get(level))
