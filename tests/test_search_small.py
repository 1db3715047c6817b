"""``tn.vsa.search`` at small ``d`` (the CPU's int8 dots) and its host fast route, exactly.

Every result equals the NumPy reference backend's (indices and scores, bit for bit:
ties to the lower row, every metric, ``k > 1``) and an independent formula; bad inputs
raise the typed errors of the general route, through the fast route too.
"""

import numpy as np
import pytest

import tritnum as tn
from tritnum._kernels.cpu import vsa_search
from tritnum._kernels.shared import vsa as hv
from tritnum.errors import InvalidTritsError, ShapeMismatchError

METRICS = ("cosine", "dot", "hamming")
INT8 = vsa_search.int8_route(64, 1, 2, False)  # False on the portable level (bit planes only)


def trits(rng, shape, zeros=0.4):
    t = rng.integers(-1, 2, shape).astype(np.int8)
    t[rng.random(shape) < zeros] = 0
    return t


def memory_with_ties(rng, m, d):
    """``m`` rows with a repeated row, an all-zero row and a row of the first query's sign."""
    mem = trits(rng, (m, d))
    if m > 2:
        mem[m - 1] = mem[1]  # equal scores: the lower row wins
        mem[m // 2] = 0  # cosine 0 against every query
    return mem


def formula(q, mem, metric):
    """Scores of every query x row from int64 arithmetic and NumPy's float64 (an oracle)."""
    q64, m64 = q.astype(np.int64), mem.astype(np.int64)
    dot = q64 @ m64.T
    if metric == "dot":
        return dot.astype(np.float64)
    if metric == "hamming":
        return (q[:, None, :] == mem[None]).sum(-1) / np.float64(q.shape[1])
    na, nb = np.abs(q64).sum(1)[:, None], np.abs(m64).sum(1)[None]
    product = na.astype(np.float64) * nb.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(product > 0, dot / np.sqrt(product), 0.0)


def best(scores, k):
    """The ``k`` best of each row, ties to the lower index (a stable sort)."""
    idx = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return idx, np.take_along_axis(scores, idx, 1)


def kind(a, packed):
    return tn.pack(a, "bitplane") if packed else a


def search_both(q, mem, k, metric, packed):
    got = tn.vsa.search(kind(q, packed), kind(mem, packed), k=k, metric=metric, device="cpu")
    ref = tn.vsa.search(q, mem, k=k, metric=metric, device="numpy")
    for g, r in zip(got, ref, strict=True):
        assert g.dtype == r.dtype and g.shape == r.shape
        np.testing.assert_array_equal(g, r)
    return got


@pytest.mark.parametrize("packed", [False, True], ids=["dense", "bitplane"])
@pytest.mark.parametrize("d", [1, 63, 64, 65, 256, 300])
def test_equals_reference_and_formula(d, packed):
    rng = np.random.default_rng(d)
    for nq, m in ((1, 1), (1, 19), (4, 9), (7, 137)):  # 137: past a chunk of 128 rows
        q = trits(rng, (nq, d))
        mem = memory_with_ties(rng, m, d)
        for metric in METRICS:
            scores = formula(q, mem, metric)
            for k in sorted({1, min(3, m), m}):
                idx, s = search_both(q, mem, k, metric, packed)
                want_i, want_s = best(scores, k)
                np.testing.assert_array_equal(idx, want_i)
                np.testing.assert_array_equal(s, want_s.astype(s.dtype))


def test_ties_keep_the_lower_row():
    rng = np.random.default_rng(1)
    row = trits(rng, 100)
    mem = np.stack([-row, row, row, np.zeros(100, np.int8), row])
    for metric in METRICS:
        for packed in (False, True):
            idx, _ = search_both(row, mem, 3, metric, packed)
            assert idx.tolist() == [1, 2, 4]


def test_leading_shape_and_one_vector():
    rng = np.random.default_rng(2)
    q, mem = trits(rng, (2, 3, 65)), trits(rng, (20, 65))
    idx, s = search_both(q, mem, 2, "cosine", False)
    assert idx.shape == s.shape == (2, 3, 2)
    idx, s = search_both(q[0, 0], mem, 1, "dot", True)
    assert idx.shape == (1,) and s.dtype == np.int64


def test_threads_and_parts():
    """Searches large enough to share among threads: blocks of queries; memory parts merged."""
    rng = np.random.default_rng(3)
    q, mem = trits(rng, (41, 256)), memory_with_ties(rng, 300, 256)
    for metric in METRICS:
        search_both(q, mem, 4, metric, False)
    search_both(q, mem, 1, "cosine", True)
    q, mem = trits(rng, (2, 256)), memory_with_ties(rng, 2100, 256)  # one tile, 4+ parts
    mem[2000] = mem[7]  # a tie across parts
    for metric in METRICS:
        search_both(q, mem, 3, metric, False)
    search_both(q, mem, 2, "dot", True)


@pytest.mark.parametrize("metric", METRICS)
def test_both_sides_of_the_crossovers(metric):
    """Each metric's limits of the int8 route, for batches and one query, and one past them."""
    code = hv.METRICS[metric]
    rng = np.random.default_rng(code)
    for limit, nq in zip(vsa_search.INT8_MAX_D[code], (3, 1), strict=True):
        for d in (limit, limit + 1):
            q, mem = trits(rng, (nq, d)), memory_with_ties(rng, 12, d)
            search_both(q, mem, 2, metric, True)
            assert vsa_search.int8_route(d, code, nq, True) == (INT8 and d == limit)
    d = vsa_search.INT8_MAX_D_DENSE
    q, mem = trits(rng, (1, d + 1)), memory_with_ties(rng, 12, d + 1)
    search_both(q, mem, 1, metric, False)
    search_both(q[:, :d], mem[:, :d], 1, metric, False)
    assert not vsa_search.int8_route(0, code, 1, False)


def test_large_k_takes_the_bit_planes():
    rng = np.random.default_rng(4)
    q, mem = trits(rng, (2, 70)), trits(rng, (vsa_search.KSTREAM + 5, 70))
    search_both(q, mem, vsa_search.KSTREAM + 1, "dot", False)


@pytest.mark.parametrize("d", [70, 1100])  # the int8 dots, and the bit planes
@pytest.mark.parametrize("contiguous", [True, False], ids=["fast", "general"])
def test_bad_values_raise_as_before(d, contiguous):
    rng = np.random.default_rng(5)
    q, mem = trits(rng, (2, d)), trits(rng, (9, d))

    def run(a, b):
        if not contiguous:
            a, b = np.asfortranarray(a), np.asfortranarray(b)
        tn.vsa.search(a, b)

    bad = mem.copy()
    bad[4, 3] = 2
    with pytest.raises(InvalidTritsError, match=r"memory\[4, 3\] = 2"):
        run(q, bad)
    bad = q.copy()
    bad[1, 0] = -5
    with pytest.raises(InvalidTritsError, match=r"queries\[1, 0\] = -5"):
        run(bad, mem)


def test_bad_arguments_raise_as_before():
    rng = np.random.default_rng(6)
    q, mem = trits(rng, (2, 40)), trits(rng, (5, 40))
    for packed in (False, True):
        qs, ms = kind(q, packed), kind(mem, packed)
        with pytest.raises(ValueError, match="k=6 is larger"):
            tn.vsa.search(qs, ms, k=6)
        with pytest.raises(ValueError, match="k must be >= 1"):
            tn.vsa.search(qs, ms, k=0)
        with pytest.raises(ShapeMismatchError, match="memory must be"):
            tn.vsa.search(qs, kind(mem[0], packed))
        with pytest.raises(ShapeMismatchError):
            tn.vsa.search(kind(q[:, :39], packed), ms)
        with pytest.raises(TypeError, match="k must be an integer"):
            tn.vsa.search(qs, ms, k=True)
        with pytest.raises(ValueError, match="metric"):
            tn.vsa.search(qs, ms, metric="l2")
    with pytest.raises(TypeError):
        tn.vsa.search(q, tn.pack(mem, "bitplane"))
