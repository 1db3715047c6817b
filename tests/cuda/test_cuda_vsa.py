"""The CUDA VSA kernels (``tritnum/_kernels/cuda/vsa*.py``) against the NumPy reference.

Tiny shapes: under the simulator every thread costs ~150 µs. Results must equal
``device="numpy"`` exactly, for dense and bitplane hypervectors.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import cuda

import tritnum as tn
from tritnum import vsa
from tritnum._kernels.cuda import vsa_search
from tritnum._kernels.cuda._launch import THREADS
from tritnum._kernels.cuda.vsa_bundle import CHUNK, MAX_SLICES, bundle_planes, bundle_slices
from tritnum._kernels.cuda.vsa_search import (  # k above KMAX: scores on the GPU, top-k on host
    KMAX,
    MAX_LANES,
    QTILE,
    SEARCH_BLOCKS,
    search_lanes,
    search_tiles,
)
from tritnum.testing import trit_arrays
from tritnum.vsa import encoders

# the simulator runs the hash on NumPy uint64 scalars, which warn when a product wraps
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")

KINDS = ["dense", "bitplane"]


def host(x):
    if isinstance(x, tn.PackedTrits):
        return tn.PackedTrits(host(x.data), x.shape, "bitplane").unpack()
    return x.copy_to_host() if hasattr(x, "copy_to_host") else np.asarray(x)


def kind(a, k):
    return tn.pack(a, "bitplane", device="numpy") if k == "bitplane" else a


def on_gpu(data):
    return getattr(data, "__cuda_ndarray__", False) or hasattr(data, "__cuda_array_interface__")


def same(x, y):
    np.testing.assert_array_equal(host(x), host(y))


@pytest.mark.parametrize("fmt", KINDS)
@pytest.mark.parametrize("d", [1, 70, 130])
def test_random(fmt, d):
    got = vsa.random(2, d, seed=5, density=0.5, format=fmt, device="cuda")
    assert on_gpu(got.data if fmt == "bitplane" else got)
    same(got, vsa.random(2, d, seed=5, density=0.5, format=fmt, device="numpy"))


@pytest.mark.parametrize("fmt", KINDS)
@settings(max_examples=4)
@given(a=trit_arrays((2, 70), dtype=np.int8), b=trit_arrays((1, 70), dtype=np.int8),
       rule=st.sampled_from(["mul", "mod3"]))
def test_bind_unbind_negate(fmt, a, b, rule):
    A, B = kind(a, fmt), kind(b, fmt)
    for fn in (vsa.bind, vsa.unbind):
        got = fn(A, B, rule=rule, device="cuda")
        assert type(got) is type(A)  # host in, host out
        same(got, fn(A, B, rule=rule, device="numpy"))
    same(vsa.negate(A, device="cuda"), -a)


def test_check_rejects_non_trits():
    bad = np.array([[0, 1, 3]], np.int16)
    with pytest.raises(tn.InvalidTritsError, match=r"\[0, 2\] = 3"):
        vsa.bind(bad, bad, device="cuda")


@pytest.mark.parametrize("fmt", KINDS)
@pytest.mark.parametrize("n", [0, 1, 5, 9])
def test_bundle(fmt, n):
    vs = vsa.random(n * 2, 70, seed=n).reshape(n, 2, 70)
    V = kind(vs, fmt)
    same(vsa.bundle(V, device="cuda"), vsa.bundle(V, device="numpy"))
    w = np.linspace(-1, 2, n)
    same(vsa.bundle(V, weights=w, device="cuda"), vsa.bundle(V, weights=w, device="numpy"))
    same(vsa.bundle(V, axis=1, device="cuda"), vsa.bundle(V, axis=1, device="numpy"))


@pytest.mark.parametrize(("n", "slices"), [(70, 4), (200, 8), (2000, MAX_SLICES)])
def test_bundle_split_over_slices(n, slices):
    """Vectors split over several threads per word column, their votes added in shared
    memory; even counts give ties (0). Two rows, 70 trits: two word columns each."""
    assert bundle_slices(n) == slices
    vs = vsa.random(n * 2, 70, seed=n, density=0.3).reshape(n, 2, 70)
    vs[:, 1, :5] = vs[0, 1, :5]  # unanimous columns: the largest counts
    V = kind(vs, "bitplane")
    same(vsa.bundle(V, device="cuda"), vsa.bundle(vs, device="numpy"))


def test_bundle_counters_flush_past_their_width():
    """One thread counting more than CHUNK vectors: the register counters flush and restart."""
    n = CHUNK + 45
    vs = np.ones((n, 1, 70), np.int8)
    vs[:CHUNK - 10, 0, :3] = -1  # -245 + 55: minus wins
    vs[:n // 2, 0, 3] = 0  # half zero, the rest +1
    vs[0, 0, 4] = 0  # n - 1 = 299 votes +1
    vs[:, 0, 5:8] = 0  # single votes around the flush: each decides its column
    vs[CHUNK - 1, 0, 5], vs[CHUNK, 0, 6], vs[n - 1, 0, 7] = 1, -1, 1
    planes = cuda.to_device(kind(vs, "bitplane").data.reshape(n, 1, 2, -1))
    out = cuda.device_array((1, 2, planes.shape[3]), np.uint64)
    bundle_planes[1, THREADS](planes, 1, out)
    got = tn.PackedTrits(out.copy_to_host(), (1, 70), "bitplane").unpack()
    np.testing.assert_array_equal(got, vsa.bundle(vs, device="numpy"))


@pytest.mark.parametrize("fmt", KINDS)
@pytest.mark.parametrize("shifts", [0, 1, -5, 64, [3, -70]])
def test_permute(fmt, shifts):
    v = kind(vsa.random(2, 130, seed=1), fmt)
    same(vsa.permute(v, shifts, device="cuda"), vsa.permute(v, shifts, device="numpy"))


@pytest.mark.parametrize("fmt", KINDS)
@pytest.mark.parametrize("metric", ["dot", "cosine", "hamming"])
def test_similarity(fmt, metric):
    a, b = vsa.random(3, 100, seed=1), vsa.random(1, 100, seed=2, density=0.3)
    got = vsa.similarity(kind(a, fmt), kind(b, fmt), metric, device="cuda")
    np.testing.assert_array_equal(got, vsa.similarity(a, b, metric, device="numpy"))


@pytest.mark.parametrize("fmt", KINDS)
@pytest.mark.parametrize(("k", "metric"), [(1, "cosine"), (3, "dot"), (KMAX + 1, "hamming")])
def test_search(fmt, k, metric):
    mem = vsa.random(150, 70, seed=3)
    mem[100:] = mem[:50]  # duplicates: ties go to the lower index
    queries = np.concatenate([mem[[5, 120]], vsa.random(1, 70, seed=4)])
    idx, scores = vsa.search(kind(queries, fmt), kind(mem, fmt), k, metric, device="cuda")
    want_idx, want_scores = vsa.search(queries, mem, k, metric, device="numpy")
    np.testing.assert_array_equal(idx, want_idx)
    np.testing.assert_array_equal(scores, want_scores)


@pytest.mark.parametrize("fmt", KINDS)
@pytest.mark.parametrize(("m", "k", "metric", "lanes"), [
    (100, KMAX, "dot", 1), (300, KMAX, "hamming", 1), (260, 1, "dot", 2), (150, 3, "cosine", 4)])
def test_search_tiles_and_ties(monkeypatch, fmt, m, k, metric, lanes):
    """Memory tiles (one at m = 100 with one lane, several merged on the GPU), two query
    tiles, rows shared by 1-4 lanes (every lane with words: d = 64 lanes + 6); runs of
    equal rows across tile edges and all-zero rows make ties that must go to the lower
    index, as the reference."""
    monkeypatch.setattr(vsa_search, "search_lanes", lambda q, m, width: lanes)
    d = 64 * lanes + 6
    mem = vsa.random(m, d, seed=m, density=0.3)
    mem[m // 2 - 20:m // 2 + 20] = mem[5]  # equal to row 5, across tile edges
    mem[m // 4:m // 4 + 10] = 0  # zeros: cosine 0, dot 0, equal Hamming scores
    queries = np.concatenate([mem[[5, m // 4, m - 1]], vsa.random(QTILE, d, seed=1, density=0.1)])
    queries[-1] = 0
    idx, scores = vsa.search(kind(queries, fmt), kind(mem, fmt), k, metric, device="cuda")
    want_idx, want_scores = vsa.search(queries, mem, k, metric, device="numpy")
    np.testing.assert_array_equal(idx, want_idx)
    np.testing.assert_array_equal(scores, want_scores)


def test_search_lanes():
    assert search_lanes(1, 10_000, 157) == 8  # one query: ~1024 blocks of 128 threads
    assert search_lanes(1, 100, 157) == MAX_LANES
    assert search_lanes(1, 100, 3) == 2  # no more lanes than words
    assert search_lanes(1000, 100_000, 157) == 1  # batches: a row per thread


@pytest.mark.parametrize(("q", "m", "lanes"), [(1, 1, 1), (1, 10_000, 8), (9, 300, 4),
                                               (100_000, 10_000, 1)])
def test_search_tiles_cover_the_memory_and_fill_the_gpu(q, m, lanes):
    qtiles, rows = search_tiles(q, m, lanes)
    assert qtiles == -(-q // QTILE) and rows % (THREADS // lanes) == 0
    mtiles = -(-m // rows)
    assert (mtiles - 1) * rows < m <= mtiles * rows  # every row in one tile, no empty tile
    assert mtiles * qtiles >= min(SEARCH_BLOCKS, -(-m // (THREADS // lanes)) * qtiles)


@pytest.mark.parametrize("fmt", KINDS)
def test_seeds_of_every_kind(fmt):
    """An int, a SeedSequence and a Generator in the same state give the same vectors on
    the GPU as on the host, from each generator's own stream (issue 15, item 9)."""
    seeds = [lambda: 2**64 + 3, lambda: np.random.SeedSequence(4),
             lambda: np.random.default_rng(5)]
    for make in (vsa.random, vsa.level, vsa.circular):
        for seed in seeds:
            got = make(3, 70, seed=seed(), density=0.5, format=fmt, device="cuda")
            same(got, make(3, 70, seed=seed(), density=0.5, format=fmt, device="numpy"))
    for seed in seeds:
        a = vsa.ItemMemory(70, seed=seed(), format=fmt, device="cuda")
        b = vsa.ItemMemory(70, seed=seed(), format=fmt, device="numpy")
        same(a.add("x"), b.add("x"))
    g = vsa.random(1, 70, format=fmt, device="cuda")  # fresh entropy: another vector
    assert not np.array_equal(host(g), host(vsa.random(1, 70, format=fmt, device="cuda")))


@pytest.mark.parametrize("fmt", KINDS)
@pytest.mark.parametrize(("n", "d"), [(0, 5), (1, 1), (5, 70)])
def test_level_circular_identity(fmt, n, d):
    for make in (vsa.level, vsa.circular):
        got = make(n, d, seed=3, density=0.5, format=fmt, device="cuda")
        data = got.data if fmt == "bitplane" else got
        assert on_gpu(data)  # made on the GPU, left there
        same(got, make(n, d, seed=3, density=0.5, format=fmt, device="numpy"))
    for rule in ("mul", "mod3"):
        got = vsa.identity(d, rule=rule, format=fmt, device="cuda")
        same(got, vsa.identity(d, rule=rule, format=fmt, device="numpy"))


def test_centroid_and_item_memory(tmp_path):
    X, y = vsa.random(6, 70, seed=1), np.arange(6) % 2
    got = vsa.Centroid(device="cuda").fit(kind(X, "bitplane"), y)
    np.testing.assert_array_equal(got.sums_, vsa.Centroid().fit(X, y).sums_)
    path = tmp_path / "m.npz"
    for fmt in KINDS:
        mem = vsa.ItemMemory(70, seed=2, format=fmt)
        mem.add("a")
        mem.save(path)
        same(vsa.ItemMemory.load(path, device="cuda").vectors, mem.vectors)
    mem = vsa.ItemMemory(70)
    mem.add("a", np.zeros(70, np.int8))
    mem._rows[0, 3] = 5  # a stored vector that is not trits: checked on the GPU
    mem.save(path)
    with pytest.raises(tn.FormatError, match=r"not trits.*rows\[0, 3\] = 5"):
        vsa.ItemMemory.load(path, device="cuda")


def test_device_arrays_stay_on_device():
    a = cuda.to_device(vsa.random(2, 70, seed=1))
    b = cuda.to_device(vsa.random(2, 70, seed=2))
    out = vsa.bind(a, b)  # "auto" follows the data
    assert hasattr(out, "copy_to_host")
    np.testing.assert_array_equal(out.copy_to_host(), host(a) * host(b))
    s = vsa.similarity(a, b, "dot")
    assert hasattr(s, "copy_to_host")
    np.testing.assert_array_equal(s.copy_to_host(), (host(a).astype(int) * host(b)).sum(1))
    p = tn.pack(host(a), "bitplane")
    gp = tn.PackedTrits(cuda.to_device(p.data), p.shape, "bitplane")
    out = vsa.bundle(gp)
    assert out.device == "cuda"
    np.testing.assert_array_equal(host(out), vsa.bundle(host(a)))


@pytest.fixture
def host_copies(monkeypatch):
    """The sizes of the device arrays copied to the host while a test runs."""
    sizes = []
    cls = type(cuda.to_device(np.zeros(1)))
    real = cls.copy_to_host

    def spy(self, *args, **kwargs):
        sizes.append(self.size)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(cls, "copy_to_host", spy)
    return sizes


def stays(x, want, host_copies):
    """``x`` is a device array equal to ``want``, made with no copy to the host but flags."""
    assert on_gpu(x), type(x)
    assert all(size <= 1 for size in host_copies), host_copies
    got = x.copy_to_host()
    host_copies.clear()
    assert got.dtype == np.asarray(want).dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("chunk_bytes", [encoders.CHUNK_BYTES, 1])  # 1: a chunk per row
def test_level_indices_and_encode_features_stay_on_device(chunk_bytes, host_copies,
                                                           monkeypatch):
    monkeypatch.setattr(encoders, "CHUNK_BYTES", chunk_bytes)
    values = np.random.default_rng(1).uniform(-0.3, 1.3, (3, 2)).astype(np.float32)
    indices = np.random.default_rng(2).integers(0, 4, (3, 2))
    levels, keys = vsa.level(4, 70, seed=1), vsa.random(2, 70, seed=2)
    stays(vsa.level_indices(cuda.to_device(values), 4, 0, [1, 2]),
          vsa.level_indices(values, 4, 0, [1, 2]), host_copies)
    stays(vsa.encode_features(cuda.to_device(indices), levels, cuda.to_device(keys)),
          vsa.encode_features(indices, levels, keys, device="numpy"), host_copies)
    stays(vsa.encode_features(cuda.to_device(values), cuda.to_device(levels), keys, low=0,
                              high=1),
          vsa.encode_features(values, levels, keys, low=0, high=1, device="numpy"), host_copies)
    with pytest.raises(ValueError, match="NaN"):
        vsa.level_indices(cuda.to_device(np.array([0.5, np.nan])), 4, 0, 1)
    with pytest.raises(ValueError, match=r"level indices in \[0, 4\)"):
        vsa.encode_features(cuda.to_device(indices + 1), levels, keys)


@pytest.mark.parametrize("epochs", [0, 1])
def test_centroid_scores_on_device(epochs, host_copies):
    X = vsa.random(5, 70, seed=3)
    y = np.array([0, 1, 2, 0, 1])
    ref = vsa.Centroid(epochs=epochs, device="numpy").fit(X, y)
    clf = vsa.Centroid(epochs=epochs).fit(cuda.to_device(X), y)  # "auto" follows the data
    np.testing.assert_array_equal(clf.sums_, ref.sums_)
    host_copies.clear()
    stays(clf.decision_function(cuda.to_device(X)), ref.decision_function(X), host_copies)
    pred = clf.predict(cuda.to_device(X))  # the best classes come to the host for the labels
    assert on_gpu(pred)
    np.testing.assert_array_equal(pred.copy_to_host(), ref.predict(X))


@pytest.mark.parametrize("fmt", KINDS)
def test_bundle_axis_and_similarity_stay_on_device(fmt, host_copies):
    sets, other = vsa.random(6, 70, seed=4).reshape(2, 3, 70), vsa.random(2, 70, seed=5)

    def gpu(a):
        return tn.PackedTrits(cuda.to_device(kind(a, fmt).data), a.shape, "bitplane") \
            if fmt == "bitplane" else cuda.to_device(a)

    got = vsa.bundle(gpu(sets), axis=1)
    want = vsa.bundle(sets, axis=1, device="numpy")
    if fmt == "bitplane":
        assert got.device == "cuda"
        got = got.unpack()
    stays(got, want, host_copies)
    for metric in ("dot", "cosine", "hamming"):
        stays(vsa.similarity(gpu(sets[0]), gpu(other), metric, pairwise=True),
              vsa.similarity(sets[0], other, metric, pairwise=True, device="numpy"), host_copies)
