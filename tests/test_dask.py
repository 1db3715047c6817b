"""Dask arrays through the public ops: lazy in, lazy out, and every result equal to the
in-memory one (exactly: integers, and floats computed by the same kernels on the same rows)
on uneven chunkings; the sharded search against the in-memory search, ties included."""

import numpy as np
import pytest

import tritnum as tn

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

RNG = np.random.default_rng(19)
# uneven chunkings of 37 rows, the last axis split too (the layer makes it whole)
CHUNKS = [(37, -1), (10, -1), ((1, 20, 16), -1), (7, 30)]


def lazy(a, chunks):
    return da.from_array(a, chunks=chunks)


def concrete(p):
    """A lazy PackedTrits computed (its bytes)."""
    assert isinstance(p.data, da.Array)
    return tn.PackedTrits(p.data.compute(), p.shape, p.format)


@pytest.mark.parametrize("chunks", CHUNKS)
@pytest.mark.parametrize("fmt", tn.FORMATS)
def test_pack_unpack_convert(fmt, chunks):
    t = RNG.integers(-1, 2, (37, 70), dtype=np.int8)
    p = tn.pack(lazy(t, chunks), fmt)
    assert p.shape == t.shape and p.format == fmt and p.nbytes == tn.nbytes(t.shape, fmt)
    assert p.data.chunks[-1] == (p.data.shape[-1],)  # the packed axis whole per chunk
    assert concrete(p) == tn.pack(t, fmt)
    u = tn.unpack(p)
    assert isinstance(u, da.Array) and u.dtype == np.int8
    np.testing.assert_array_equal(u.compute(), t)
    for other in tn.FORMATS:
        assert concrete(p.to(other)) == tn.pack(t, other)
    assert concrete(p[3:9]) == tn.pack(t[3:9], fmt)
    assert concrete(p[[5, 0, 30]]) == tn.pack(t[[5, 0, 30]], fmt)


@pytest.mark.parametrize("shape", [(71,), (3, 5, 9), (0, 8)])
def test_pack_other_ranks(shape):
    t = RNG.integers(-1, 2, shape).astype(np.int16)
    p = tn.pack(lazy(t, 2), "base3")
    assert concrete(p) == tn.pack(t, "base3")
    np.testing.assert_array_equal(tn.unpack(p).compute(), t)


def test_errors_before_and_in_the_tasks():
    with pytest.raises(TypeError, match="integer array"):
        tn.pack(da.zeros((4, 4)))  # float: refused before any task runs
    bad = np.zeros((12, 9), np.int8)
    bad[7, 4] = 2
    p = tn.pack(lazy(bad, 5))  # lazy: nothing read yet
    with pytest.raises(tn.InvalidTritsError, match=r"trits\[2, 4\] = 2"):  # within its chunk
        p.data.compute()
    corrupt = tn.pack(np.zeros((12, 9), np.int8)).data.copy()
    corrupt[9, 0] = 0xFF
    wrapped = tn.PackedTrits(lazy(corrupt, 4), (12, 9), "2bit")
    with pytest.raises(tn.InvalidTritsError, match="corrupt '2bit'"):
        tn.unpack(wrapped).compute()
    with pytest.raises(tn.FormatError):
        tn.PackedTrits(lazy(corrupt, 4), (12, 13), "2bit")
    with pytest.raises(ValueError, match="unknown chunk sizes"):
        tn.pack(lazy(bad, 5)[lazy(bad, 5)[:, 0] == 0])


@pytest.mark.parametrize("kw", [{}, {"axis": -1}, {"group_size": 16}])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_quantize(kw, dtype):
    w = RNG.standard_normal((37, 64)).astype(dtype)
    for chunks in CHUNKS:
        t = tn.quantize(lazy(w, chunks), format="bitplane", **kw)
        ref = tn.quantize(w, format="bitplane", **kw)
        assert isinstance(t.scales, da.Array) and t.scales.shape == ref.scales.shape
        assert concrete(t.packed) == ref.packed
        np.testing.assert_array_equal(t.scales.compute(), ref.scales)
        np.testing.assert_array_equal(t.dequantize().compute(), ref.dequantize())


def test_quantize_per_tensor_is_one_reduction_of_row_sums():
    w = RNG.standard_normal((1000, 33))
    t = tn.quantize(lazy(w, (64, 33)))
    layers = t.scales.__dask_graph__().layers
    assert sum(name.startswith("from-value") or "array" in name for name in layers) == 1
    assert len([name for name in layers if "row_sums" in name or "reduction" in name
                or "tensor_scale" in name]) >= 1
    assert t.scales.compute() == tn.quantize(w).scales  # the row sums added in row order


def test_quantize_errors_name_the_value_in_its_chunk():
    w = np.ones((9, 4))
    w[6, 1] = np.nan
    with pytest.raises(ValueError, match=r"w\[2, 1\] = nan is not finite"):
        tn.quantize(lazy(w, 4)).scales.compute()
    with pytest.raises(ValueError, match=r"w\[2, 1\] = nan"):
        tn.quantize(lazy(w, 4), axis=-1).scales.compute()
    with pytest.raises(TypeError):
        tn.quantize(da.zeros((3, 4), dtype=np.int8))


@pytest.mark.parametrize("axis", [-1, None])
def test_quantize_activations(axis):
    x = RNG.standard_normal((37, 50)).astype(np.float32) * np.linspace(0.1, 9, 37)[:, None]
    for chunks in CHUNKS:
        q, s = tn.quantize_activations(lazy(x, chunks), axis=axis)
        q0, s0 = tn.quantize_activations(x, axis=axis)
        np.testing.assert_array_equal(q.compute(), q0)
        np.testing.assert_array_equal(s.compute(), s0)
    x[30, 2] = np.inf
    with pytest.raises(ValueError, match=r"x\[.*\] = inf"):
        dask.compute(*tn.quantize_activations(lazy(x, 10), axis=axis))


def per_chunk(fn, x, rows):
    """``fn`` on the chunks of rows, in memory: what each task computes."""
    return np.concatenate([fn(x[r0:r0 + rows]) for r0 in range(0, len(x), rows)])


@pytest.mark.parametrize("activations", ["float", "int8"])
@pytest.mark.parametrize("group_size", [None, 32])
def test_linear_equals_linear_on_each_chunk(activations, group_size):
    w = tn.quantize(RNG.standard_normal((24, 64)), group_size=group_size)
    bias = RNG.standard_normal(24)
    x = RNG.standard_normal((45, 64)).astype(np.float32)
    y = tn.linear(lazy(x, (20, 40)), w, bias, activations=activations)
    assert isinstance(y, da.Array) and y.shape == (45, 24) and y.dtype == np.float32
    ref = per_chunk(lambda r: tn.linear(r, w, bias, activations=activations), x, 20)
    np.testing.assert_array_equal(y.compute(), ref)
    # one chunk: the whole in-memory call
    np.testing.assert_array_equal(tn.linear(lazy(x, -1), w, bias, activations=activations)
                                  .compute(), tn.linear(x, w, bias, activations=activations))


def test_linear_int8_x_with_scales_and_the_operators():
    w = tn.quantize(RNG.standard_normal((8, 32)), axis=-1)
    x = RNG.standard_normal((3, 11, 32)).astype(np.float32)
    q, s = tn.quantize_activations(x)
    ref = tn.linear(q, w, x_scale=s)
    for scale in (s, lazy(s, (1, 4))):  # rechunked as x's rows
        y = tn.linear(lazy(q, (3, 11, 32)), w, x_scale=scale)
        np.testing.assert_array_equal(y.compute(), ref)
    xd = lazy(x, (1, 11, 32))
    np.testing.assert_array_equal((xd @ w.T).compute(), per_chunk(lambda r: r @ w.T, x, 1))
    layer = tn.BitLinear(w)
    np.testing.assert_array_equal(layer(xd).compute(), per_chunk(layer, x, 1))
    with pytest.raises(tn.ShapeMismatchError):
        tn.linear(da.ones((2, 31)), w)
    with pytest.raises(TypeError, match="x_scale"):
        tn.linear(lazy(q, 2), w)


def test_linear_weights_are_one_key_of_the_graph():
    w = tn.quantize(RNG.standard_normal((64, 256)))
    x = lazy(RNG.standard_normal((200, 256)).astype(np.float32), 10)  # 20 tasks
    graph = dict(tn.linear(x, w).__dask_graph__())
    holding = [key for key, task in graph.items() if _holds(task, tn.TernaryTensor)]
    assert len(holding) == 1, holding


def _holds(task, kind):
    """Whether a task (of any spec) holds an object of ``kind`` among its arguments."""
    import pickle

    found = []

    class Spy(pickle.Pickler):
        def reducer_override(self, obj):
            if isinstance(obj, kind):
                found.append(obj)
                return (int, ())
            return NotImplemented

    import io

    try:
        Spy(io.BytesIO()).dump(task)
    except Exception:  # a task part that does not pickle holds no weights
        pass
    return bool(found)


def test_lazy_weights():
    w = RNG.standard_normal((24, 64))
    tw = tn.quantize(lazy(w, (5, 64)), axis=-1)
    x = RNG.standard_normal((6, 64)).astype(np.float32)
    np.testing.assert_array_equal(tn.linear(x, tw).compute(),
                                  tn.linear(x, tn.quantize(w, axis=-1)))


@pytest.mark.parametrize("fmt", ["dense", "bitplane"])
def test_random_any_chunking_equals_in_memory(fmt):
    ref = tn.vsa.random(53, 130, seed=11, format=fmt, density=0.4)
    for chunks in (1, 7, (50, 3), "auto", 53):
        r = tn.vsa.random(53, 130, seed=11, format=fmt, density=0.4, chunks=chunks)
        if fmt == "bitplane":
            assert concrete(r) == ref
        else:
            assert isinstance(r, da.Array)
            np.testing.assert_array_equal(r.compute(), ref)
    r = tn.vsa.random(53, 130, seed=11, chunks=7)
    np.testing.assert_array_equal(r[20:30].compute(), tn.vsa.random(30, 130, seed=11)[20:])


# every form dask.array takes for the rows of a (1000, 777) array, the trit axis whole, and
# the rows' chunks it gives (None: Dask's choice)
THREES = (300, 300, 300, 100)
DASK_ROW_CHUNKS = [(300, THREES), (-1, (1000,)), ("auto", None), ("64KiB", None),
                   ((300,), THREES), ((300, 777), THREES), ((300, -1), THREES),
                   ((300, None), THREES), ((300, "auto"), THREES),
                   (((300, 300, 400),), (300, 300, 400)),
                   (((300, 300, 400), (777,)), (300, 300, 400)),
                   (((0, 300, 0, 700, 0),), (0, 300, 0, 700, 0)), ({0: 300}, THREES),
                   ({0: (500, 500), 1: -1}, (500, 500)), ({-1: 777}, (1000,)),
                   ([300, 777], THREES), ((1000, 777), (1000,)),
                   ((50, 950), (50,) * 20)]


@pytest.mark.parametrize("fmt", ["dense", "bitplane"])
@pytest.mark.parametrize(("chunks", "rows"), DASK_ROW_CHUNKS, ids=repr)
def test_random_takes_dasks_chunk_forms(fmt, chunks, rows):
    ref = tn.vsa.random(1000, 777, seed=12, format=fmt)
    r = tn.vsa.random(1000, 777, seed=12, format=fmt, chunks=chunks)
    data = r.data if fmt == "bitplane" else r
    assert all(len(c) == 1 for c in data.chunks[1:])  # the trit axis (its words) whole
    assert rows is None or data.chunks[0] == rows
    if fmt == "bitplane":
        assert concrete(r) == ref
    else:
        np.testing.assert_array_equal(r.compute(), ref)


@pytest.mark.parametrize("chunks", [(300, 300), (300, (400, 377)), {1: 100}, 0, -2,
                                    ((300, 300),), ((300, -300, 1000),), (300, 300, 300)])
def test_random_refuses_chunks_that_split_the_trits_or_miss_rows(chunks):
    with pytest.raises(ValueError, match=r"trit axis|at least|add up"):
        tn.vsa.random(1000, 777, seed=12, chunks=chunks)


@pytest.mark.parametrize("fmt", ["dense", "bitplane"])
@pytest.mark.parametrize("chunks", [(6,), (6, -1), {0: 6}, "auto", (6, 400)])
def test_sharded_item_memory_takes_dasks_chunk_forms(fmt, chunks):
    mem = tn.vsa.ItemMemory(400, seed=7, format=fmt)
    sharded = tn.vsa.ItemMemory(400, seed=7, format=fmt, chunks=chunks)
    for name in range(20):
        for m in (mem, sharded):
            m.add(f"s{name}")
    vectors = sharded.vectors
    if fmt == "bitplane":
        assert concrete(vectors) == mem.vectors
    else:
        np.testing.assert_array_equal(vectors.compute(), mem.vectors)
    assert sharded.cleanup(mem.vectors[:3]) == mem.cleanup(mem.vectors[:3])


@pytest.mark.parametrize("metric", ["dot", "cosine", "hamming"])
@pytest.mark.parametrize("rows", [(0, 40, 60), (40, 0, 60), (40, 60, 0), (0, 0, 100, 0),
                                  (1, 0, 0, 99)])
def test_search_over_a_memory_with_empty_chunks(rows, metric):
    memory = tn.vsa.random(100, 200, seed=14)
    queries = tn.vsa.random(5, 200, seed=15)
    want = tn.vsa.search(queries, memory, k=4, metric=metric)
    lazy_memory = lazy(memory, (rows, (200,)))
    for q, m in ((queries, lazy_memory),
                 (tn.pack(queries, "bitplane"), tn.pack(lazy_memory, "bitplane"))):
        idx, scores = tn.vsa.search(q, m, k=4, metric=metric)
        np.testing.assert_array_equal(idx.compute(), want[0])
        np.testing.assert_allclose(scores.compute(), want[1])
    generated = tn.vsa.random(100, 200, seed=14, format="bitplane", chunks=(rows,))
    idx, scores = tn.vsa.search(tn.pack(queries, "bitplane"), generated, k=4, metric=metric)
    np.testing.assert_array_equal(idx.compute(), want[0])


def dense_and_packed(a, chunks):
    return lazy(a, chunks), tn.pack(lazy(a, chunks), "bitplane")


def same(lazy_result, ref):
    if isinstance(ref, tn.PackedTrits):
        assert concrete(lazy_result) == ref
    else:
        np.testing.assert_array_equal(np.asarray(lazy_result.compute()), ref)


def test_elementwise_permute_similarity():
    a, b = tn.vsa.random(37, 100, seed=1), tn.vsa.random(37, 100, seed=2)
    for packed in (False, True):
        ad, bd = (dense_and_packed(v, c)[packed] for v, c in ((a, 10), (b, (16, 100))))
        ap, bp = (tn.pack(v, "bitplane") if packed else v for v in (a, b))
        same(tn.vsa.bind(ad, bd), tn.vsa.bind(ap, bp))
        same(tn.vsa.bind(ad, bd, rule="mod3"), tn.vsa.bind(ap, bp, rule="mod3"))
        same(tn.vsa.unbind(ad, bp[4:5]), tn.vsa.unbind(ap, bp[4:5]))  # broadcast, in memory
        same(tn.vsa.negate(ad), tn.vsa.negate(ap))
        shifts = np.arange(37) * 7 - 50
        same(tn.vsa.permute(ad, shifts), tn.vsa.permute(ap, shifts))
        for metric in ("dot", "cosine", "hamming"):
            same(tn.vsa.similarity(ad, bd, metric), tn.vsa.similarity(ap, bp, metric))
            same(tn.vsa.similarity(ad, bd[:5], metric, pairwise=True),
                 tn.vsa.similarity(ap, bp[:5], metric, pairwise=True))
    with pytest.raises(TypeError, match="must be dense int8 arrays or both"):
        tn.vsa.bind(lazy(a, 5), tn.pack(b, "bitplane"))
    with pytest.raises(tn.ShapeMismatchError):
        tn.vsa.bind(lazy(a, 5), b[:3])


@pytest.mark.parametrize("weights", [None, "int", "float"])
def test_bundle(weights):
    vs = tn.vsa.random(6 * 40, 90, seed=3).reshape(6, 40, 90)
    w = {None: None, "int": RNG.integers(-3, 4, 40), "float": RNG.random(40)}[weights]
    for packed in (False, True):
        vd = dense_and_packed(vs, (2, 7, 90))[packed]
        vp = tn.pack(vs, "bitplane") if packed else vs
        same(tn.vsa.bundle(vd, axis=1, weights=w), tn.vsa.bundle(vp, axis=1, weights=w))
        same(tn.vsa.bundle(vd), tn.vsa.bundle(vp))  # axis 0: three chunks of vectors
    seq = lazy(vs[0, :12], 5)
    same(tn.vsa.bundle_sequence(seq), tn.vsa.bundle_sequence(vs[0, :12]))
    same(tn.vsa.ngrams(seq, 3), tn.vsa.ngrams(vs[0, :12], 3))


def tied_memory():
    """A memory whose rows repeat across chunks: every query has equal scores to break."""
    base = tn.vsa.random(8, 150, seed=4, density=0.3)
    rows = base[RNG.integers(0, 8, 61)]
    rows[[0, 17, 33, 60]] = base[2]  # the same vector in four chunks
    return rows, base


@pytest.mark.parametrize("metric", ["dot", "cosine", "hamming"])
@pytest.mark.parametrize("packed", [False, True])
def test_sharded_search_equals_in_memory_with_ties(metric, packed):
    memory, base = tied_memory()
    queries = np.concatenate([base, tn.vsa.random(5, 150, seed=5)])
    for mem_chunks, k in (((9, 20, 1, 31), 10), (5, 61), (61, 3), (2, 1)):
        md = lazy(memory, (mem_chunks, -1))
        q = queries
        if packed:
            md, q = tn.pack(md, "bitplane"), tn.pack(queries, "bitplane")
        idx, scores = tn.vsa.search(q, md, k, metric)
        assert isinstance(idx, da.Array) and idx.shape == (13, k)
        ref = tn.vsa.search(queries, memory, k, metric)
        np.testing.assert_array_equal(idx.compute(), ref[0])
        np.testing.assert_array_equal(scores.compute(), ref[1])
        assert scores.dtype == ref[1].dtype
    copies = np.flatnonzero((memory == base[2]).all(axis=1))
    assert len(copies) >= 5 and {0, 17, 33, 60} <= set(copies)
    ties = tn.vsa.search(base[2], lazy(memory, 7), len(copies), metric)[0].compute()
    np.testing.assert_array_equal(ties, copies)  # equal scores: lower index first


def test_sharded_search_with_lazy_queries_and_shapes():
    memory = tn.vsa.random(200, 99, seed=8, format="bitplane", chunks=30)
    mem = concrete(memory)
    queries = tn.vsa.random(36, 99, seed=9).reshape(3, 12, 99)
    idx, s = tn.vsa.search(lazy(queries, (1, 5, 99)), tn.unpack(memory), 7, "cosine")
    assert idx.shape == (3, 12, 7)
    ref = tn.vsa.search(queries, tn.unpack(mem), 7, "cosine")
    np.testing.assert_array_equal(idx.compute(), ref[0])
    np.testing.assert_array_equal(s.compute(), ref[1])
    one = tn.vsa.search(tn.pack(queries[0, 0], "bitplane"), memory, 2)
    assert one[0].shape == (2,)
    np.testing.assert_array_equal(one[0].compute(), tn.vsa.search(
        tn.pack(queries[0, 0], "bitplane"), mem, 2)[0])
    with pytest.raises(ValueError, match="larger than the memory"):
        tn.vsa.search(tn.pack(queries[0], "bitplane"), memory, 201)
    with pytest.raises(TypeError, match="must be dense int8 arrays or both"):
        tn.vsa.search(queries[0], memory, 1)


def test_packed_is_a_dask_collection_that_keeps_its_codes_known(monkeypatch):
    from dask.base import is_dask_collection

    import tritnum.packing as packing

    memory = tn.vsa.random(90, 130, seed=6, format="bitplane", chunks=25)
    ref = tn.vsa.random(90, 130, seed=6, format="bitplane")
    assert is_dask_collection(memory) and not is_dask_collection(ref)
    assert dask.base.tokenize(ref) == dask.base.tokenize(ref[:])  # in memory: by its bytes
    assert dask.base.tokenize(ref) != dask.base.tokenize(ref[1:])
    assert dask.base.tokenize(memory) != dask.base.tokenize(memory[1:])
    (computed,) = dask.compute(memory)
    assert isinstance(computed.data, np.ndarray) and computed == ref and computed._valid
    (persisted,) = dask.persist(memory)
    assert isinstance(persisted.data, da.Array) and persisted._valid
    assert concrete(persisted) == ref and persisted.shape == ref.shape

    checked = []

    def first_bad_block(packed, device):
        checked.append(len(packed.data))
        return None

    monkeypatch.setattr(packing, "_first_bad_block", first_bad_block)
    queries = ref[[3, 80]]
    for mem in (memory, persisted):
        idx = tn.vsa.search(queries, mem, 2, "dot")[0].compute()
        np.testing.assert_array_equal(idx, tn.vsa.search(queries, ref, 2, "dot")[0])
    assert checked == []  # written by tritnum's encoder: no task checks the codes again
    wrapped = tn.PackedTrits(persisted.data, ref.shape, "bitplane")  # any bytes: checked
    (wrapped_persisted,) = dask.persist(wrapped)
    assert not wrapped_persisted._valid
    tn.vsa.search(queries, wrapped_persisted, 2, "dot")[0].compute()
    assert sorted(checked) == [15, 25, 25, 25]  # each chunk once
    monkeypatch.undo()
    bad = ref.data.copy()
    bad[40, :, 1] = 1  # row 40: trit 0 with its plus and minus bits set
    lazy_bad = dask.persist(tn.PackedTrits(lazy(bad, (25, 2, 3)), ref.shape, "bitplane"))[0]
    with pytest.raises(tn.InvalidTritsError):
        tn.vsa.search(queries, lazy_bad, 2, "dot")[0].compute()


@pytest.mark.parametrize("fmt", ["dense", "bitplane"])
def test_sharded_item_memory(fmt):
    mem = tn.vsa.ItemMemory(400, seed=7, format=fmt)
    sharded = tn.vsa.ItemMemory(400, seed=7, format=fmt, chunks=6)
    given = tn.vsa.random(1, 400, seed=1)[0]
    for name in range(20):
        for m in (mem, sharded):
            m.add(f"s{name}", given if name == 13 else None)
    lazy_vectors = sharded.vectors
    if fmt == "bitplane":
        assert concrete(lazy_vectors) == mem.vectors
        noisy = tn.unpack(mem["s13"])
    else:
        np.testing.assert_array_equal(lazy_vectors.compute(), mem.vectors)
        noisy = mem["s13"].copy()
    noisy[:150] = 0
    assert sharded.cleanup(noisy, k=3) == mem.cleanup(noisy, k=3)
    assert sharded.cleanup(noisy) == "s13"
    assert sharded["s4"] == mem["s4"] if fmt == "bitplane" else (sharded["s4"] == mem["s4"]).all()


CLUSTER_SCRIPT = """
import numpy as np, dask.array as da, tritnum as tn
from distributed import Client, LocalCluster

if __name__ == "__main__":
    with LocalCluster(processes=True, n_workers=2, threads_per_worker=1,
                      dashboard_address=None, env={"NUMBA_NUM_THREADS": "1"}) as cluster, \\
            Client(cluster) as client:
        memory = client.persist(tn.vsa.random(3000, 500, seed=1, format="bitplane", chunks=400))
        assert isinstance(memory, tn.PackedTrits) and memory._valid  # codes known: not rechecked
        queries = tn.vsa.random(20, 500, seed=2, format="bitplane")
        idx, scores = tn.vsa.search(queries, memory, 5, "dot")
        idx, scores = client.compute([idx, scores], sync=True)
        ref = tn.vsa.search(queries, tn.vsa.random(3000, 500, seed=1, format="bitplane"), 5, "dot")
        assert (idx == ref[0]).all() and (scores == ref[1]).all()
        w = tn.quantize(np.random.default_rng(0).standard_normal((32, 128)), axis=-1)
        x = np.random.default_rng(1).standard_normal((90, 128)).astype(np.float32)
        lazy_y = tn.linear(da.from_array(x, chunks=30), w, activations="int8")  # holds its Future
        y = lazy_y.compute()
        ref = np.concatenate([tn.linear(x[i:i + 30], w, activations="int8")
                              for i in range(0, 90, 30)])
        assert (y == ref).all()
        held = client.has_what()  # the weights went out once, as one scattered key
        # (broadcast to both workers; the scheduler may drop a replica later, so not asserted)
        weights = {k for keys in held.values() for k in keys
                   if str(k).startswith("TernaryTensor")}  # beside the memory's chunks
        assert len(weights) == 1, held
        print("OK", len(held))
"""


def test_local_cluster_of_processes(tmp_path):
    pytest.importorskip("distributed")
    import subprocess
    import sys

    script = tmp_path / "cluster.py"
    script.write_text(CLUSTER_SCRIPT)
    try:
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                             timeout=240, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("the LocalCluster run took more than 240 s")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["OK", "2"]


def test_memory_beyond_one_worker_small():
    """The bench's scale check (issue 19: 4 M vectors, 6 GB workers), at a small size."""
    pytest.importorskip("distributed")
    import subprocess
    import sys

    code = ("from tritnum._bench.dask import beyond_one_worker\n"
            "if __name__ == '__main__':\n"
            "    assert beyond_one_worker(n=60_000, d=200, rows=7_000, limit='1GB')\n")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=240, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("the LocalCluster run took more than 240 s")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "equal to the reference (indices and scores): True; the planted rows first: True; " \
           "every worker under its limit: True" in out.stdout


def test_vsa_ops_without_a_dask_layer_read_dask_inputs():
    """encode_features and Centroid have no lazy version: Dask levels, keys and samples are
    read into memory (a numba typing error reached the user before)."""
    levels, keys = tn.vsa.level(5, 70, seed=1), tn.vsa.random(3, 70, seed=2)
    idx = RNG.integers(0, 5, (6, 3))
    want = tn.vsa.encode_features(idx, levels, keys)
    got = tn.vsa.encode_features(idx, lazy(levels, (2, -1)), lazy(keys, (2, 35)))
    np.testing.assert_array_equal(got, want)
    x = RNG.integers(-1, 2, (9, 70), dtype=np.int8)
    y = np.arange(9) % 3
    fitted = tn.vsa.Centroid().fit(lazy(x, (4, -1)), y)
    np.testing.assert_array_equal(fitted.sums_, tn.vsa.Centroid().fit(x, y).sums_)
    np.testing.assert_array_equal(fitted.predict(lazy(x, (5, 7))), fitted.predict(x))


@pytest.mark.parametrize("qtype", ["TQ2_0", "TQ1_0", "I2_S"])
def test_gguf_of_lazy_tensors_is_read_into_memory(qtype, tmp_path):
    """A lazy TernaryTensor (or lazy floats) through the GGUF encoders and the file writer:
    the bytes of the in-memory tensor (a numba typing error reached the user before)."""
    w = RNG.standard_normal((6, 512)).astype(np.float32)
    t, tl = tn.quantize(w), tn.quantize(lazy(w, (4, -1)))
    assert tl.packed.__dask_graph__() is not None
    want = tn.io.to_gguf_blocks(t, qtype)
    np.testing.assert_array_equal(tn.io.to_gguf_blocks(tl, qtype), want)
    np.testing.assert_array_equal(tn.io.to_gguf_blocks(lazy(w, (4, -1)), qtype),
                                  tn.io.to_gguf_blocks(w, qtype))
    tn.io.write_gguf(tmp_path / "lazy.gguf", {"w": tl}, qtype=qtype)
    tn.io.write_gguf(tmp_path / "eager.gguf", {"w": t}, qtype=qtype)
    assert (tmp_path / "lazy.gguf").read_bytes() == (tmp_path / "eager.gguf").read_bytes()


def test_save_npz_of_lazy_ternary_tensor_is_read_into_memory(tmp_path):
    """``tn.save`` of a lazy TernaryTensor (alone or in a dict): the file of the in-memory
    tensor (NumPy's savez met the lazy scales and dask raised io.UnsupportedOperation)."""
    w = RNG.standard_normal((6, 512)).astype(np.float32)
    t, tl = tn.quantize(w, group_size=128), tn.quantize(lazy(w, (4, -1)), group_size=128)
    tn.save(tmp_path / "lazy.npz", {"w": tl, "v": w})
    back = tn.load(tmp_path / "lazy.npz")
    np.testing.assert_array_equal(back["w"].packed.unpack(), t.packed.unpack())
    np.testing.assert_array_equal(back["w"].scales, t.scales)
    assert back["w"].group_size == 128
    tn.save(tmp_path / "single.npz", tl)
    np.testing.assert_array_equal(tn.load(tmp_path / "single.npz").dequantize(), t.dequantize())


def test_tensor_with_only_lazy_scales_is_read_into_memory(tmp_path):
    """Trits in memory, scales lazy: the writers compute the scales too."""
    w = RNG.standard_normal((6, 512)).astype(np.float32)
    t = tn.quantize(w, group_size=256)
    mixed = tn.TernaryTensor(t.packed, lazy(t.scales, (2, -1)), 256)
    tn.save(tmp_path / "mixed.npz", mixed)
    np.testing.assert_array_equal(tn.load(tmp_path / "mixed.npz").scales, t.scales)
    np.testing.assert_array_equal(tn.io.to_gguf_blocks(mixed, "TQ2_0"),
                                  tn.io.to_gguf_blocks(t, "TQ2_0"))
