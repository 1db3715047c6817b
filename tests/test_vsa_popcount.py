"""The CPU search's popcount tiles and trit packing, on every tile shape and SIMD path.

The wide (AVX-512 VPOPCNTDQ) path runs only where the CPU has it and skips visibly
elsewhere; the portable path runs everywhere. Both must give the NumPy reference's
indices and scores exactly (ties to the lower row).
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numba import njit

import tritnum as tn
from tritnum import vsa
from tritnum._kernels.cpu import vsa_search
from tritnum._kernels.cpu._llvm.planes import trit_planes
from tritnum._kernels.cpu._llvm.popcount import NARROW_WORDS, WIDE_WORDS, tile_counts, tile_dots

PATHS = [
    pytest.param(False, id="portable"),
    pytest.param(True, id="avx512-vpopcntdq", marks=pytest.mark.skipif(
        not vsa_search.HAS_VPOPCNTDQ, reason="this CPU lacks AVX-512 VPOPCNTDQ: the wide tile "
        "is not used here")),
]
SHAPES = ((3, 2, True, False), (1, 1, True, True), (2, 3, False, False), (1, 4, False, True))
_counts = tile_counts(SHAPES)
METRICS = {"dot": 0, "cosine": 1, "hamming": 2}


@njit
def _tile(shape, queries, q0, memory, r0, out):
    nwp = queries.shape[2]
    nw = memory.shape[2]
    _counts(shape, queries.reshape(-1), 2 * nwp * q0, 2 * nwp, nwp, memory.reshape(-1),
            2 * nw * r0, 2 * nw, nw, nw, out)


def _rows(rng, n, d, density):
    p = [density / 2, 1 - density, density / 2]
    return rng.choice(np.array([-1, 0, 1], np.int8), size=(n, d), p=p)


def _tile_rows(tq, tm, wide, d, seed, density):
    """Trits and planes of ``tq + 1`` queries and ``tm + 2`` memory rows (the first of each unused).

    The queries' padding holds any bits, and an all-ones row follows the memory's
    last one: the tile must mask its over-read past the row ends.
    """
    rng = np.random.default_rng(seed)
    q, m = _rows(rng, tq + 1, d, density), _rows(rng, tm + 2, d, density)
    words = WIDE_WORDS if wide else NARROW_WORDS
    nw = -(-d // 64)
    planes = tn.pack(q, "bitplane").data
    qa = np.full((len(q), 2, -(-nw // words) * words), ~np.uint64(0))  # padding: any bits
    qa[:, 0, :nw] = planes[:, 0] | planes[:, 1]
    qa[:, 1, :nw] = planes[:, 1]
    memory = np.concatenate([tn.pack(m, "bitplane").data, np.full((1, 2, nw), ~np.uint64(0))])
    dots = q[1:1 + tq].astype(np.int64) @ m[1:1 + tm].T.astype(np.int64)
    return q, m, qa, memory, dots


# one word, whole vectors, 31-vector byte-counter chunks of the portable tile (7936 trits)
TILE_SIZES = dict(d=st.sampled_from([1, 64, 255, 256, 511, 513, 4000, 7936, 7937, 8192, 20_000]),
                  seed=st.integers(0, 2**32 - 1), density=st.floats(0.05, 1.0))


@pytest.mark.parametrize("shape", range(len(SHAPES)),
                         ids=[f"{q}x{m}-{'wide' if w else 'narrow'}{'-nnz' * z}"
                              for q, m, w, z in SHAPES])
@given(**TILE_SIZES)
def test_tile_counts_are_the_pairs_dot_and_nonzero_overlap(shape, d, seed, density):
    """Counts of whole vectors and of the last, partial one whose memory lanes are masked."""
    tq, tm, wide, nonzeros = SHAPES[shape]
    q, m, qa, memory, dots = _tile_rows(tq, tm, wide, d, seed, density)
    out = np.full(-(-(2 * tq * tm + tm) // 8) * 8, -1, np.int64)  # whole groups of 8
    _tile(shape, qa, 1, memory, 1, out)
    for j in range(tq):
        for r in range(tm):
            both, differ = out[2 * (j * tm + r)], out[2 * (j * tm + r) + 1]
            assert both == np.count_nonzero(q[1 + j].astype(np.int64) * m[1 + r])
            assert both - 2 * differ == dots[j, r]
    if nonzeros:
        np.testing.assert_array_equal(out[2 * tq * tm:2 * tq * tm + tm],
                                      np.count_nonzero(m[1:1 + tm], axis=1))


DOT_SHAPES = ((3, 2, True), (1, 4, True), (2, 3, False), (1, 4, False))
_dots = tile_dots(DOT_SHAPES)


@njit
def _dot_tile(shape, queries, q0, memory, r0, limits, out):
    nwp = queries.shape[2]
    nw = memory.shape[2]
    return _dots(shape, queries.reshape(-1), 2 * nwp * q0, 2 * nwp, nwp, memory.reshape(-1),
                 2 * nw * r0, 2 * nw, nw, nw, limits, out)


@pytest.mark.parametrize("shape", range(len(DOT_SHAPES)),
                         ids=[f"{q}x{m}-{'wide' if w else 'narrow'}" for q, m, w in DOT_SHAPES])
@given(**TILE_SIZES, shift=st.lists(st.integers(-2, 2), min_size=8, max_size=8))
def test_tile_dots_and_the_mask_of_pairs_above_their_limits(shape, d, seed, density, shift):
    """The dots, and bit t of the mask where pair t's dot exceeds its limit (not on a tie)."""
    tq, tm, _ = DOT_SHAPES[shape]
    _, _, qa, memory, dots = _tile_rows(tq, tm, DOT_SHAPES[shape][2], d, seed, density)
    limits = np.full(16, -d - 1, np.int64)  # past the pairs: below any dot, never in the mask
    limits[:tq * tm] = dots.reshape(-1) + np.array(shift[:tq * tm])  # below, tied and above
    out = np.full(16, -1, np.int64)
    mask = _dot_tile(shape, qa, 1, memory, 1, limits, out)
    np.testing.assert_array_equal(out[:tq * tm], dots.reshape(-1))
    assert mask == sum(1 << t for t in range(tq * tm) if dots.flat[t] > limits[t])


@njit
def _words(row, n):
    return [trit_planes(row, 64 * w) for w in range(n // 64)]


@given(d=st.integers(0, 300), seed=st.integers(0, 2**32 - 1))
def test_trit_planes_match_the_bitplane_format(d, seed):
    rows = _rows(np.random.default_rng(seed), 2, d + 64, 0.7)
    want = tn.pack(rows, "bitplane").data
    for r in range(2):
        for w, (plus, minus) in enumerate(_words(rows[r], d + 64)):
            assert (plus, minus) == (want[r, 0, w], want[r, 1, w])


def _reference(q, mem, k, metric):
    return vsa.search(q, mem, k, metric, device="numpy")


@pytest.mark.parametrize("wide", PATHS)
@pytest.mark.parametrize("metric", list(METRICS))
@given(data=st.data())
def test_search_tiles_match_the_reference(wide, metric, data):
    """Query counts around the batch tile, memory tails, ties, both k regimes, both kinds."""
    d = data.draw(st.sampled_from([1, 63, 64, 65, 200, 700, 1000]))
    nq = data.draw(st.integers(1, 14))
    m = data.draw(st.integers(1, 300))
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    mem = _rows(rng, m, d, data.draw(st.sampled_from([0.05, 0.7, 1.0])))
    if m > 3 and data.draw(st.booleans()):  # duplicates: ties go to the lower row
        mem[m // 2:] = mem[: m - m // 2]
    q = np.concatenate([mem[rng.integers(0, m, nq // 2)], _rows(rng, nq - nq // 2, d, 0.7)])
    k = data.draw(st.sampled_from([1, min(m, 3), min(m, vsa_search.KSTREAM + 1), m]))
    want_idx, want_s = _reference(q, mem, k, metric)
    packed = data.draw(st.booleans())
    rows = (tn.pack(q, "bitplane").data, tn.pack(mem, "bitplane").data) if packed else (q, mem)
    idx, s = vsa_search.search_tiles(*rows, k, METRICS[metric], d, wide)
    np.testing.assert_array_equal(idx, want_idx)
    np.testing.assert_array_equal(s, want_s.astype(np.float64))


@pytest.mark.parametrize("wide", PATHS)
@pytest.mark.parametrize("metric", ["dot", "cosine"])
def test_search_on_long_rows_and_many_parts_matches_reference(wide, metric):
    """Several chunks per memory part and several parts (with the threads' tasks)."""
    mem = vsa.random(700, 9000, seed=1, format="bitplane")
    q = vsa.random(13, 9000, seed=2, format="bitplane")
    want = _reference(q, mem, 5, metric)
    idx, s = vsa_search.search_tiles(q.data, mem.data, 5, METRICS[metric], 9000, wide)
    np.testing.assert_array_equal(idx, want[0])
    np.testing.assert_array_equal(s, want[1].astype(np.float64))


def test_public_search_uses_the_tiles():
    mem = vsa.random(50, 300, seed=4)
    idx, s = vsa.search(mem[[7, 3]], mem, 2, "dot", device="cpu")
    assert idx[:, 0].tolist() == [7, 3] and s.dtype == np.int64
    np.testing.assert_array_equal(s[:, 0], (mem[[7, 3]].astype(np.int64) ** 2).sum(1))


def test_scores_kept_whole_go_block_by_block(device, monkeypatch):
    """k beyond the streamed lists: score blocks of a few queries, selected on the host."""
    from tritnum._kernels.shared import select

    monkeypatch.setattr(select, "SEARCH_BLOCK_SCORES", 7 * 80)  # 7 queries of 80 rows a block
    mem = vsa.random(80, 130, seed=5)
    mem[40:] = mem[:40]
    q = np.concatenate([mem[:9], vsa.random(8, 130, seed=6)])
    k = vsa_search.KSTREAM + 1
    idx, s = vsa.search(q, mem, k, "cosine", device=device)
    full = (q.astype(np.int64) @ mem.T.astype(np.int64)) / np.sqrt(
        np.outer(np.count_nonzero(q, 1), np.count_nonzero(mem, 1)).astype(np.float64))
    order = np.argsort(-full, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(idx, order)
    np.testing.assert_array_equal(s, np.take_along_axis(full, order, 1))


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize(("lead", "m", "d", "k"), [((0,), 5, 100, 1), ((2, 0), 5, 100, 5),
                                                    ((3,), 4, 0, 2), ((0,), 70, 9, 66)])
def test_search_of_no_queries_or_no_trits(lead, m, d, k, packed, device):
    q = np.zeros((*lead, d), np.int8)
    mem = vsa.random(m, d, seed=1)
    pq, pm = (tn.pack(q, "bitplane"), tn.pack(mem, "bitplane")) if packed else (q, mem)
    for metric in METRICS:
        idx, s = vsa.search(pq, pm, k, metric, device=device)
        assert idx.shape == s.shape == (*lead, k)
        if d == 0 and idx.size:  # every row ties (hamming 1, dot and cosine 0): rows in order
            assert (idx == np.arange(k)).all()
            assert (s == (1.0 if metric == "hamming" else 0)).all()
