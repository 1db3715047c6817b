"""torchhd's structures on ternary hypervectors (issue 31, item 2) against NumPy oracles.

bind_sequence, graph, tree, automaton, cleanup, resonator and the sparse distributed
memory are compositions of the VSA ops; each is compared here, exactly, with an
independent NumPy transcription of its definition (np.roll, integer products and
sums, mod-3 arithmetic), on every host device and both kinds of hypervectors.
"""

import numpy as np
import pytest
from ternary_data import trits

import tritnum as tn
from tritnum import vsa
from tritnum.errors import InvalidTritsError, ShapeMismatchError

KINDS = ["dense", "bitplane"]


def kind(a, k):
    return tn.pack(a, "bitplane") if k == "bitplane" else a


def dense(x):
    return tn.unpack(x) if isinstance(x, tn.PackedTrits) else np.asarray(x)


def same(got, want, k):
    assert isinstance(got, tn.PackedTrits) == (k == "bitplane")
    np.testing.assert_array_equal(dense(got), want)


# --- the oracles: the definitions in NumPy integers ---------------------------------------

def ref_bind(a, b, rule="mul"):
    a, b = a.astype(np.int64), b.astype(np.int64)
    return (a * b if rule == "mul" else (a - b + 1) % 3 - 1).astype(np.int8)


def ref_bundle(vs, axis=-2):
    return np.sign(vs.astype(np.int64).sum(axis=axis)).astype(np.int8)


def ref_bind_sequence(vs, rule):
    n = vs.shape[-2]
    out = np.roll(vs[..., 0, :], n - 1, axis=-1)
    for i in range(1, n):
        out = ref_bind(out, np.roll(vs[..., i, :], n - 1 - i, axis=-1), rule)
    return out


def ref_key(path, branches):
    key = np.ones(branches.shape[-1], np.int64)
    for depth, c in enumerate(path):
        key = key * np.roll(branches["lr".index(c)], depth)
    return key


def ref_resonator(p, books, rule, max_iter):
    """torchhd's resonator step in NumPy integers, iterated to a fixed point."""
    est = [ref_bundle(b, 0) for b in books]
    for sweep in range(1, max_iter + 1):
        new, idx = [], []
        for i, book in enumerate(books):
            if rule == "mul":
                u = p.astype(np.int64)
                for j, e in enumerate(est):
                    u = u * e if j != i else u
            else:  # p = f0 - f1 - ... (mod 3): solve for f_i
                rest = sum(e.astype(np.int64) for j, e in enumerate(est) if j not in (0, i))
                u = p + rest if i == 0 else est[0] - p.astype(np.int64) - rest
                u = (u + 1) % 3 - 1
            w = book.astype(np.int64) @ u
            idx.append(int(np.argmax(w)))
            new.append(np.sign(w @ book).astype(np.int8))
        done = all(np.array_equal(a, b) for a, b in zip(new, est, strict=True))
        est = new
        if done:
            return idx, est, sweep, True
    return idx, est, max_iter, False


# --- bind_sequence --------------------------------------------------------------------------

@pytest.mark.parametrize("k", KINDS)
@pytest.mark.parametrize("rule", ["mul", "mod3"])
@pytest.mark.parametrize("shape", [(1, 5), (4, 67), (2, 3, 130)])
def test_bind_sequence(shape, rule, k, device):
    vs = trits(shape, 1)
    got = vsa.bind_sequence(kind(vs, k), rule=rule, device=device)
    same(got, ref_bind_sequence(vs, rule), k)


def test_bind_sequence_unbinds_one_member_exactly_with_mod3():
    a, b, c = vs = trits((3, 200), 2)
    s = vsa.bind_sequence(vs, rule="mod3")  # roll(a, 2) - roll(b, 1) - c
    back = vsa.unbind(vsa.unbind(s, c, rule="mod3"), vsa.permute(b, 1), rule="mod3")
    np.testing.assert_array_equal(back, np.roll(a, 2))


def test_bind_sequence_errors():
    with pytest.raises(ValueError, match="empty"):
        vsa.bind_sequence(np.zeros((0, 8), np.int8))
    with pytest.raises(ShapeMismatchError):
        vsa.bind_sequence(np.zeros(8, np.int8))
    with pytest.raises(ValueError, match="rule"):
        vsa.bind_sequence(trits((2, 8), 0), rule="xor")


# --- graph ----------------------------------------------------------------------------------

@pytest.mark.parametrize("k", KINDS)
@pytest.mark.parametrize("directed", [False, True])
def test_graph_and_neighbors(directed, k, device):
    src, dst = trits((2, 5, 70), 3), trits((2, 5, 70), 4)  # a batch of 2 graphs of 5 edges
    g = vsa.graph(kind(src, k), kind(dst, k), directed=directed, device=device)
    want = ref_bundle(ref_bind(src, np.roll(dst, 1, axis=-1) if directed else dst))
    same(g, want, k)
    node = trits((2, 70), 5)
    got = vsa.graph_neighbors(g, kind(node, k), directed=directed, device=device)
    if directed:
        same(got, np.roll(ref_bind(want, node), -1, axis=-1), k)
        into = vsa.graph_neighbors(g, kind(node, k), directed=True, incoming=True,
                                   device=device)
        same(into, ref_bind(want, np.roll(node, 1, axis=-1)), k)
    else:
        same(got, ref_bind(want, node), k)


def test_graph_neighbors_find_the_edges():
    nodes = vsa.random(5, 4000, seed=11)
    edges = np.array([[0, 1], [1, 2], [2, 3], [3, 4]])  # a directed path 0 -> 1 -> ... -> 4
    g = vsa.graph(nodes[edges[:, 0]], nodes[edges[:, 1]], directed=True)
    for i in range(1, 4):
        out = vsa.similarity(vsa.graph_neighbors(g, nodes[i], directed=True), nodes)
        into = vsa.similarity(vsa.graph_neighbors(g, nodes[i], directed=True, incoming=True),
                              nodes)
        assert np.argmax(out) == i + 1 and np.argmax(into) == i - 1
        assert np.sort(out)[-2] < 0.1 < out[i + 1]
    undirected = vsa.graph(nodes[edges[:, 0]], nodes[edges[:, 1]])
    near = vsa.similarity(vsa.graph_neighbors(undirected, nodes[2]), nodes)
    assert set(np.flatnonzero(near > 0.2)) == {1, 3}


def test_graph_errors():
    a = trits((3, 16), 0)
    with pytest.raises(ShapeMismatchError, match="dimension"):
        vsa.graph(a, trits((3, 17), 0))
    with pytest.raises(ShapeMismatchError, match="broadcast"):
        vsa.graph(a, trits((2, 16), 0))
    with pytest.raises(ShapeMismatchError, match="rank"):
        vsa.graph(a[0], a[1])
    with pytest.raises(TypeError, match="bitplane"):
        vsa.graph(a, tn.pack(a, "bitplane"))
    with pytest.raises(ValueError, match="directed"):
        vsa.graph_neighbors(a[0], a[1], incoming=True)
    with pytest.raises(InvalidTritsError):
        vsa.graph(a * 2, a)


# --- tree -----------------------------------------------------------------------------------

PATHS = ["l", "rl", "rrl", "rrr", "lr"]


@pytest.mark.parametrize("k", KINDS)
def test_tree_and_leaf(k, device):
    leaves, branches = trits((5, 66), 6), trits((2, 66), 7)
    t = vsa.tree(kind(leaves, k), PATHS, kind(branches, k), device=device)
    keys = np.stack([ref_key(p, branches) for p in PATHS])
    want = ref_bundle(keys * leaves)
    same(t, want, k)
    for path in ("rl", "rrr", ["r", "r"]):
        got = vsa.tree_leaf(t, path, kind(branches, k), device=device)
        same(got, ref_bind(want, ref_key(path, branches)), k)


def test_tree_leaves_come_back():
    branches = vsa.random(2, 4000, density=1.0, seed=12)
    leaves = vsa.random(5, 4000, seed=13)
    t = vsa.tree(leaves, PATHS, branches)
    for i, path in enumerate(PATHS):
        assert np.argmax(vsa.similarity(vsa.tree_leaf(t, path, branches), leaves)) == i


def test_tree_errors():
    leaves, branches = trits((2, 16), 0), trits((2, 16), 1)
    with pytest.raises(ShapeMismatchError, match="one path per leaf"):
        vsa.tree(leaves, ["l"], branches)
    with pytest.raises(ShapeMismatchError, match=r"\(2, d\)"):
        vsa.tree(leaves, ["l", "r"], trits((3, 16), 1))
    with pytest.raises(ShapeMismatchError, match="dimension"):
        vsa.tree(leaves, ["l", "r"], trits((2, 15), 1))
    with pytest.raises(ValueError, match=r"'l' \(left\) and 'r'"):
        vsa.tree(leaves, ["l", "x"], branches)
    with pytest.raises(ValueError, match="non-empty"):
        vsa.tree_leaf(leaves[0], "", branches)
    with pytest.raises(TypeError, match="path"):
        vsa.tree_leaf(leaves[0], 3, branches)
    with pytest.raises(ShapeMismatchError, match=r"\(n, d\)"):
        vsa.tree(leaves[None], ["l", "r"], branches)


# --- finite-state automaton -----------------------------------------------------------------

@pytest.mark.parametrize("k", KINDS)
def test_automaton_and_step(k, device):
    tok, src, dst = trits((4, 65), 8), trits((4, 65), 9), trits((4, 65), 10)
    fsa = vsa.automaton(kind(tok, k), kind(src, k), kind(dst, k), device=device)
    want = ref_bundle(tok.astype(np.int64) * src * np.roll(dst, 1, axis=-1))
    same(fsa, want, k)
    state, token = trits((3, 65), 11), trits((65,), 12)  # three states, one token: broadcast
    got = vsa.automaton_step(fsa, kind(state, k), kind(token, k), device=device)
    same(got, np.roll(ref_bind(ref_bind(want, state), token), -1, axis=-1), k)


def test_automaton_follows_its_transitions():
    states, tokens = vsa.random(3, 4000, seed=14), vsa.random(2, 4000, seed=15)
    table = [(0, 0, 1), (1, 0, 2), (2, 0, 0), (0, 1, 0), (1, 1, 0), (2, 1, 2)]  # s, t -> s'
    s, t, n = (np.array(c) for c in zip(*table, strict=True))
    fsa = vsa.automaton(tokens[t], states[s], states[n])
    idx, _ = vsa.cleanup(vsa.automaton_step(fsa, states[s], tokens[t]), states)
    np.testing.assert_array_equal(idx, n)


def test_automaton_errors():
    a = trits((2, 16), 0)
    with pytest.raises(ShapeMismatchError):
        vsa.automaton(a, a, trits((2, 8), 0))
    with pytest.raises(ShapeMismatchError):
        vsa.automaton_step(a[0], a[0], trits((3, 8), 0))


# --- cleanup --------------------------------------------------------------------------------

@pytest.mark.parametrize("k", KINDS)
def test_cleanup(k, device):
    memory, queries = trits((7, 70), 16), trits((2, 3, 70), 17)
    queries[0, 0] = memory[4]
    dots = queries.astype(np.int64) @ memory.T.astype(np.int64)
    best = dots.max(axis=-1)
    threshold = int(np.median(best))
    idx, scores = vsa.cleanup(kind(queries, k), kind(memory, k), threshold=threshold,
                              metric="dot", device=device)
    np.testing.assert_array_equal(scores, best)
    np.testing.assert_array_equal(idx, np.where(best >= threshold, dots.argmax(-1), -1))
    assert idx[0, 0] == 4 and (idx == -1).any()
    # cosine, one query: scalars
    i, s = vsa.cleanup(kind(queries[0, 1], k), kind(memory, k), threshold=1.01,
                       device=device)
    norm = np.sqrt((queries[0, 1] != 0).sum() * (memory != 0).sum(axis=1))
    assert i == -1 and np.isclose(s, (dots[0, 1] / norm).max())


def test_cleanup_errors():
    memory = trits((3, 16), 0)
    for bad, err in ((np.nan, ValueError), (np.inf, ValueError), ("0.5", TypeError),
                     (True, TypeError), (None, TypeError)):
        with pytest.raises(err, match="threshold"):
            vsa.cleanup(memory[0], memory, threshold=bad)
    with pytest.raises(ShapeMismatchError):
        vsa.cleanup(memory[0], memory[0])


# --- resonator ------------------------------------------------------------------------------

def _product(books, truth, rule):
    p = books[0][truth[0]]
    for book, t in zip(books[1:], truth[1:], strict=True):
        p = ref_bind(p, book[t], rule)
    return p


@pytest.mark.parametrize("k", KINDS)
@pytest.mark.parametrize("rule", ["mul", "mod3"])
@pytest.mark.parametrize(("sizes", "density"), [((6, 5), 1.0), ((4, 5, 3), 1.0),
                                                ((5, 4, 6), 2 / 3)])
def test_resonator_matches_the_reference(sizes, density, rule, k, device):
    books = [trits((m, 97), 20 + i, density) for i, m in enumerate(sizes)]
    p = _product(books, [1] * len(sizes), rule)
    want_idx, want_est, want_sweeps, want_done = ref_resonator(p, books, rule, 6)
    got = vsa.resonator(kind(p, k), [kind(b, k) for b in books], rule=rule, max_iter=6,
                        device=device)
    assert got.indices.tolist() == want_idx
    assert (got.iterations, got.converged) == (want_sweeps, want_done)
    for e, w in zip(got.estimates, want_est, strict=True):
        same(e, w, k)


@pytest.mark.parametrize("rule", ["mul", "mod3"])
def test_resonator_factorizes(rule):
    books = [vsa.random(10, 2000, density=1.0, seed=s) for s in (1, 2, 3)]
    for truth in ([0, 0, 0], [9, 4, 7], [3, 8, 1]):
        p = _product(books, truth, rule)
        found = vsa.resonator(p, books, rule=rule)
        assert found.converged and found.indices.tolist() == truth
        for e, book, t in zip(found.estimates, books, truth, strict=True):
            np.testing.assert_array_equal(e, book[t])
    stopped = vsa.resonator(p, books, rule=rule, max_iter=1)
    assert (stopped.iterations, stopped.converged) == (1, False)


def test_resonator_errors():
    books = [trits((3, 16), 0), trits((4, 16), 1)]
    p = books[0][0]
    with pytest.raises(ValueError, match="at least 2"):
        vsa.resonator(p, books[:1])
    with pytest.raises(TypeError, match="sequence"):
        vsa.resonator(p, np.stack([books[0], books[0]]))
    with pytest.raises(ShapeMismatchError, match=r"\(d,\)"):
        vsa.resonator(books[0], books)
    with pytest.raises(ShapeMismatchError, match="codebook 1"):
        vsa.resonator(p, [books[0], trits((4, 15), 1)])
    with pytest.raises(ShapeMismatchError, match="codebook 1"):
        vsa.resonator(p, [books[0], np.zeros((0, 16), np.int8)])
    with pytest.raises(TypeError, match="bitplane"):
        vsa.resonator(p, [books[0], tn.pack(books[1], "bitplane")])
    with pytest.raises(ValueError, match="max_iter"):
        vsa.resonator(p, books, max_iter=0)
    with pytest.raises(TypeError, match="max_iter"):
        vsa.resonator(p, books, max_iter=2.5)
    with pytest.raises(ValueError, match="rule"):
        vsa.resonator(p, books, rule="add")


# --- sparse distributed memory --------------------------------------------------------------

def ref_active(keys, addresses, radius):
    return (keys[..., None, :] != addresses).sum(axis=-1) <= radius


@pytest.mark.parametrize("k", KINDS)
@pytest.mark.parametrize("kappa", [None, 2])
def test_sdm_matches_the_reference(kappa, k, device):
    m, d, vd, radius = 40, 67, 33, 44
    sdm = vsa.SparseDistributedMemory(m, d, radius, value_d=vd, kappa=kappa, seed=3,
                                      device=device)
    addresses = dense(vsa.random(m, d, seed=3))
    np.testing.assert_array_equal(dense(sdm.addresses), addresses)
    counters = np.zeros((m, vd), np.int64)
    for step in range(3):
        keys, values = trits((6, d), 30 + step), trits((6, vd), 40 + step)
        act = ref_active(keys, addresses, radius)
        np.testing.assert_array_equal(sdm.active(kind(keys, k)), act)
        sdm.write(kind(keys, k), kind(values, k))
        counters += act.T.astype(np.int64) @ values
        if kappa is not None:
            counters = np.clip(counters, -kappa, kappa)
        np.testing.assert_array_equal(sdm.counters, counters)
    assert 0 < act.sum() < act.size  # some locations active, not all
    queries = trits((2, 3, d), 50)
    want = np.sign(ref_active(queries, addresses, radius).astype(np.int64) @ counters)
    same(sdm.read(kind(queries, k)), want, k)


def test_sdm_recalls_noisy_keys():
    sdm = vsa.SparseDistributedMemory(2000, 1000, radius=640, seed=0)
    keys = vsa.random(30, 1000, seed=1)
    values = vsa.random(30, 1000, seed=2)
    sdm.write(keys, values)
    noisy = keys.copy()
    noisy[:, ::8] = 0
    idx, _ = vsa.cleanup(sdm.read(noisy), values)
    np.testing.assert_array_equal(idx, np.arange(30))
    far = vsa.SparseDistributedMemory(10, 1000, radius=0, seed=0)
    np.testing.assert_array_equal(far.read(keys[0]), np.zeros(1000, np.int8))  # none active


def test_sdm_errors():
    with pytest.raises(ValueError, match="locations"):
        vsa.SparseDistributedMemory(0, 8, 2)
    with pytest.raises(ValueError, match="radius"):
        vsa.SparseDistributedMemory(4, 8, -1)
    with pytest.raises(ValueError, match="kappa"):
        vsa.SparseDistributedMemory(4, 8, 2, kappa=0)
    with pytest.raises(TypeError, match="radius"):
        vsa.SparseDistributedMemory(4, 8, 2.5)
    with pytest.raises(ValueError, match="density"):
        vsa.SparseDistributedMemory(4, 8, 2, density=0)
    sdm = vsa.SparseDistributedMemory(4, 8, 8, value_d=5)
    with pytest.raises(ShapeMismatchError, match="keys"):
        sdm.write(trits((2, 7), 0), trits((2, 5), 0))
    with pytest.raises(ShapeMismatchError, match="one value"):
        sdm.write(trits((2, 8), 0), trits((3, 5), 0))
    with pytest.raises(ShapeMismatchError, match="queries"):
        sdm.read(trits((2, 9), 0))
    with pytest.raises(InvalidTritsError):
        sdm.write(trits((2, 8), 0), trits((2, 5), 0) * 3)
    assert not sdm.counters.any()  # nothing written by the refused calls


# --- interop --------------------------------------------------------------------------------

def test_torch_tensors_in_give_tensors_out():
    torch = pytest.importorskip("torch")
    a, b, c = trits((3, 70), 60), trits((3, 70), 61), trits((3, 70), 62)
    t = torch.from_numpy
    pairs = [
        (vsa.bind_sequence(t(a)), vsa.bind_sequence(a)),
        (vsa.graph(t(a), t(b), directed=True), vsa.graph(a, b, directed=True)),
        (vsa.tree(t(a), ["l", "r", "rl"], t(b[:2])), vsa.tree(a, ["l", "r", "rl"], b[:2])),
        (vsa.automaton_step(t(a[0]), t(b[0]), t(c[0])), vsa.automaton_step(a[0], b[0], c[0])),
        (vsa.cleanup(t(a), t(b), threshold=0.1)[0], vsa.cleanup(a, b, threshold=0.1)[0]),
        (vsa.resonator(t(a[0]), [t(b), t(c)]).estimates[1],
         vsa.resonator(a[0], [b, c]).estimates[1]),
    ]
    sdm = vsa.SparseDistributedMemory(10, 70, 46, seed=1)
    sdm.write(t(a), t(b))
    pairs.append((sdm.read(t(c)), sdm.read(c)))
    for got, want in pairs:
        assert isinstance(got, torch.Tensor)
        np.testing.assert_array_equal(got.numpy(), want)


# --- refused before any kernel runs -----------------------------------------------------------

_A, _B = trits((3, 16), 70), trits((2, 16), 71)
_PACKED = tn.pack(_A, "bitplane")
_SDM = vsa.SparseDistributedMemory(4, 16, 8, value_d=5, seed=0)
BAD = {
    "bind_sequence empty": (lambda: vsa.bind_sequence(_A[:0]), ValueError),
    "bind_sequence rule": (lambda: vsa.bind_sequence(_A, rule="xor"), ValueError),
    "graph d": (lambda: vsa.graph(_A, _A[:, :15], directed=True), ShapeMismatchError),
    "graph broadcast": (lambda: vsa.graph(_A, _B), ShapeMismatchError),
    "graph kind": (lambda: vsa.graph(_A, _PACKED), TypeError),
    "neighbors incoming": (lambda: vsa.graph_neighbors(_A[0], _A[1], incoming=True), ValueError),
    "tree paths": (lambda: vsa.tree(_B, ["l"], _B), ShapeMismatchError),
    "tree path": (lambda: vsa.tree(_B, ["l", "lx"], _B), ValueError),
    "tree branches": (lambda: vsa.tree(_B, ["l", "r"], _A), ShapeMismatchError),
    "tree_leaf d": (lambda: vsa.tree_leaf(_A[0, :15], "l", _B), ShapeMismatchError),
    "automaton d": (lambda: vsa.automaton(_A, _A, _A[:, :8]), ShapeMismatchError),
    "automaton_step": (lambda: vsa.automaton_step(_A, _B, _A[0]), ShapeMismatchError),
    "cleanup threshold": (lambda: vsa.cleanup(_A, _A, threshold=np.nan), ValueError),
    "resonator books": (lambda: vsa.resonator(_A[0], [_A]), ValueError),
    "resonator d": (lambda: vsa.resonator(_A[0], [_A, _B[:, :8]]), ShapeMismatchError),
    "resonator max_iter": (lambda: vsa.resonator(_A[0], [_A, _B], max_iter=0), ValueError),
    "sdm radius": (lambda: vsa.SparseDistributedMemory(4, 16, -1), ValueError),
    "sdm write": (lambda: _SDM.write(_A, _B[:, :5]), ShapeMismatchError),
    "sdm read": (lambda: _SDM.read(_A[:, :15]), ShapeMismatchError),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_arguments_are_refused_before_any_kernel_runs(case, monkeypatch):
    import sys

    from tritnum import _registry

    def refuse(op, device):
        raise AssertionError(f"kernel {op!r} ran before the arguments were checked")

    original = _registry.kernel
    for name, module in list(sys.modules.items()):
        if name.startswith("tritnum") and getattr(module, "kernel", None) is original:
            monkeypatch.setattr(module, "kernel", refuse)
    with pytest.raises(AssertionError, match="ran before"):  # the patch does stop kernels
        vsa.bind(_A, _A)
    call, error = BAD[case]
    with pytest.raises(error):
        call()


# --- torchhd, the semantic guide: the same results on bipolar vectors -----------------------

def test_torchhd_agrees_on_bipolar_vectors():
    torch = pytest.importorskip("torch")
    torchhd = pytest.importorskip("torchhd")
    d = 96
    a, b, c = (trits((5, d), 80 + i, density=1.0) for i in range(3))

    def t(x):
        return torchhd.MAPTensor(torch.from_numpy(x.astype(np.float32)))

    def signed(x):
        return np.sign(x.numpy()).astype(np.int8)

    np.testing.assert_array_equal(vsa.bind_sequence(a), signed(torchhd.bind_sequence(t(a))))
    for directed in (False, True):
        np.testing.assert_array_equal(vsa.graph(a, b, directed=directed),
                                      signed(torchhd.graph(t(np.stack([a, b])),
                                                           directed=directed)))
    tree = torchhd.structures.Tree(d)
    tree.l_r = t(b[:2])
    fsa = torchhd.structures.FiniteStateAutomata(d)
    for i, path in enumerate(PATHS):
        tree.add_leaf(t(a[i]), list(path))
        fsa.add_transition(t(a[i]), t(b[i]), t(c[i]))
    np.testing.assert_array_equal(vsa.tree(a, PATHS, b[:2]), signed(tree.value))
    np.testing.assert_array_equal(vsa.automaton(a, b, c), signed(fsa.value))
    # SDM: bipolar addresses, Hamming radius r <=> torchhd's dot threshold d - 2 r
    sdm = vsa.SparseDistributedMemory(64, d, 40, density=1.0, seed=4)
    ref = torchhd.memory.SparseDistributed(64, d, d)
    ref.keys.data = torch.from_numpy(dense(sdm.addresses).astype(np.float32))
    ref.threshold = d - 2 * 40
    sdm.write(a, c)
    ref.write(torch.from_numpy(a.astype(np.float32)), torch.from_numpy(c.astype(np.float32)))
    np.testing.assert_array_equal(sdm.counters, ref.values.detach().numpy())
    assert sdm.counters.any()
    np.testing.assert_array_equal(sdm.read(b), signed(ref.read(torch.from_numpy(
        b.astype(np.float32)))))
