"""The HDC structures (issue 31, item 2) with GPU inputs: results on the GPU, equal to NumPy's.

Each structure composes the VSA ops; given GPU arrays (or PackedTrits on the GPU) its
result must stay there and equal the ``device="numpy"`` result exactly (which
tests/test_vsa_hdc_structures.py checks against NumPy transcriptions). Tiny shapes: the
simulator costs ~150 µs a thread.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda
from ternary_data import trits

import tritnum as tn
from tritnum import vsa

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")

KINDS = ["dense", "bitplane"]


def gpu(a, k):
    d = cuda.to_device(a)
    return tn.pack(d, "bitplane") if k == "bitplane" else d


def host(a, k):
    return tn.pack(a, "bitplane") if k == "bitplane" else a


def on_gpu(x):
    data = x.data if isinstance(x, tn.PackedTrits) else x
    return getattr(data, "__cuda_ndarray__", False) or hasattr(data, "__cuda_array_interface__")


def dense(x):
    if isinstance(x, tn.PackedTrits):
        x = tn.unpack(x)
    return x.copy_to_host() if hasattr(x, "copy_to_host") else np.asarray(x)


def same_on_gpu(got, want):
    assert on_gpu(got), type(got)
    np.testing.assert_array_equal(dense(got), dense(want))


@pytest.mark.parametrize("k", KINDS)
@pytest.mark.parametrize("rule", ["mul", "mod3"])
def test_bind_sequence(k, rule):
    vs = trits((2, 3, 70), 1)
    same_on_gpu(vsa.bind_sequence(gpu(vs, k), rule=rule),
                vsa.bind_sequence(host(vs, k), rule=rule, device="numpy"))


@pytest.mark.parametrize("k", KINDS)
@pytest.mark.parametrize("directed", [False, True])
def test_graph(k, directed):
    src, dst, node = trits((4, 70), 2), trits((4, 70), 3), trits((70,), 4)
    g = vsa.graph(gpu(src, k), gpu(dst, k), directed=directed)
    want = vsa.graph(host(src, k), host(dst, k), directed=directed, device="numpy")
    same_on_gpu(g, want)
    for incoming in [False, True] if directed else [False]:
        same_on_gpu(vsa.graph_neighbors(g, gpu(node, k), directed=directed, incoming=incoming),
                    vsa.graph_neighbors(want, host(node, k), directed=directed,
                                        incoming=incoming, device="numpy"))


@pytest.mark.parametrize("k", KINDS)
def test_tree(k):
    leaves, branches = trits((3, 70), 5), trits((2, 70), 6)
    paths = ["l", "rl", "rr"]
    t = vsa.tree(gpu(leaves, k), paths, gpu(branches, k))
    want = vsa.tree(host(leaves, k), paths, host(branches, k), device="numpy")
    same_on_gpu(t, want)
    same_on_gpu(vsa.tree_leaf(t, "rl", gpu(branches, k)),
                vsa.tree_leaf(want, "rl", host(branches, k), device="numpy"))


@pytest.mark.parametrize("k", KINDS)
def test_automaton(k):
    tok, src, dst = trits((3, 70), 7), trits((3, 70), 8), trits((3, 70), 9)
    fsa = vsa.automaton(gpu(tok, k), gpu(src, k), gpu(dst, k))
    want = vsa.automaton(host(tok, k), host(src, k), host(dst, k), device="numpy")
    same_on_gpu(fsa, want)
    same_on_gpu(vsa.automaton_step(fsa, gpu(src, k), gpu(tok, k)),
                vsa.automaton_step(want, host(src, k), host(tok, k), device="numpy"))


@pytest.mark.parametrize("k", KINDS)
def test_cleanup(k):
    memory, queries = trits((5, 70), 10), trits((3, 70), 11)
    queries[1] = memory[2]
    idx, scores = vsa.cleanup(gpu(queries, k), gpu(memory, k), threshold=0.5)
    want_idx, want_scores = vsa.cleanup(host(queries, k), host(memory, k), threshold=0.5,
                                        device="numpy")
    same_on_gpu(idx, want_idx)
    assert on_gpu(scores)
    np.testing.assert_allclose(dense(scores), want_scores)
    assert dense(idx)[1] == 2 and (dense(idx) == -1).any()


@pytest.mark.parametrize("k", KINDS)
@pytest.mark.parametrize("rule", ["mul", "mod3"])
def test_resonator(k, rule):
    books = [trits((4, 70), 12, 1.0), trits((3, 70), 13, 1.0)]
    p = vsa.bind(books[0][1], books[1][2], rule=rule)
    got = vsa.resonator(gpu(p, k), [gpu(b, k) for b in books], rule=rule, max_iter=4)
    want = vsa.resonator(host(p, k), [host(b, k) for b in books], rule=rule, max_iter=4,
                         device="numpy")
    assert got.indices.tolist() == want.indices.tolist()
    assert (got.iterations, got.converged) == (want.iterations, want.converged)
    for e, w in zip(got.estimates, want.estimates, strict=True):
        same_on_gpu(e, w)


@pytest.mark.parametrize("k", KINDS)
def test_sdm(k):
    m, d, vd, radius = 12, 70, 9, 46
    keys, values, queries = trits((4, d), 14), trits((4, vd), 15), trits((2, d), 16)
    on_device = vsa.SparseDistributedMemory(m, d, radius, value_d=vd, kappa=3, seed=2,
                                            device="cuda")
    reference = vsa.SparseDistributedMemory(m, d, radius, value_d=vd, kappa=3, seed=2,
                                            device="numpy")
    assert on_gpu(on_device.addresses)
    np.testing.assert_array_equal(dense(on_device.addresses), dense(reference.addresses))
    for _ in range(2):
        on_device.write(gpu(keys, k), gpu(values, k))
        reference.write(host(keys, k), host(values, k))
    np.testing.assert_array_equal(on_device.counters, reference.counters)
    assert on_device.counters.any()
    same_on_gpu(on_device.read(gpu(queries, k)), reference.read(host(queries, k)))
