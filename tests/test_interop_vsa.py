"""PyTorch tensors through tn.vsa: torch in, torch out, equal to the NumPy results.

``tests/test_interop.py`` runs the hypervector algebra through tensors; here are the
encoders, the classifier and the item memory, and bfloat16 wherever tn.vsa takes
float16. (The generators take no arrays.)
"""

import numpy as np
import pytest
from test_interop import same, trits

import tritnum as tn

torch = pytest.importorskip("torch")


def tensor(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def bf16(a):
    """``a`` as a bfloat16 tensor, and the float32 values it holds (what tritnum reads)."""
    t = tensor(np.asarray(a, np.float32)).to(torch.bfloat16)
    return t, t.float().numpy()


def _cases():
    levels, keys = tn.vsa.level(5, 130, seed=4), tn.vsa.random(3, 130, seed=5)
    indices = np.random.default_rng(6).integers(0, 5, (7, 3))
    values = np.random.default_rng(7).uniform(-0.2, 1.2, (7, 3))
    return {
        "level_indices": lambda m: tn.vsa.level_indices(m(values), 5, 0, 1),
        "level_indices bounds per feature": lambda m: tn.vsa.level_indices(
            m(values), 4, m(np.array([0.0, -1, 0.5])), m(np.array([1.0, 2, 0.6]))),
        "level_indices of integers": lambda m: tn.vsa.level_indices(m(indices), 3, 0, 4),
        "encode_features": lambda m: tn.vsa.encode_features(m(indices), m(levels), m(keys)),
        "encode_features real values": lambda m: tn.vsa.encode_features(
            m(values), m(levels), m(keys), low=0, high=1),
        "encode_features bitplane keys": lambda m: tn.vsa.encode_features(
            m(indices), m(levels), tn.pack(m(keys), "bitplane")),
    }


@pytest.mark.parametrize("name", list(_cases()))
def test_vsa(name):
    case = _cases()[name]
    got, want = case(tensor), case(lambda v: v)
    for g, w in zip(got, want, strict=True) if isinstance(want, tuple) else [(got, want)]:
        same(g, w)


def test_requires_grad_values_are_read_detached():
    v = np.random.default_rng(1).standard_normal((4, 3))
    t = tensor(v).requires_grad_()
    same(tn.vsa.level_indices(t, 7, -1, 1), tn.vsa.level_indices(v, 7, -1, 1))


# ------------------------------------------------------------------ bfloat16
def test_bfloat16_values_for_level_indices_and_encode_features():
    t, v = bf16(np.random.default_rng(2).uniform(-1, 2, (6, 3)))
    same(tn.vsa.level_indices(t, 9, 0, 1), tn.vsa.level_indices(v, 9, 0, 1))
    low, low32 = bf16([0.0, -0.5, 0.25])
    same(tn.vsa.level_indices(t, 9, low, 1), tn.vsa.level_indices(v, 9, low32, 1))
    levels, keys = tn.vsa.level(9, 70, seed=1), tn.vsa.random(3, 70, seed=2)
    same(tn.vsa.encode_features(t, levels, tensor(keys), low=0, high=1),
         tn.vsa.encode_features(v, levels, keys, low=0, high=1))


def test_bfloat16_bundle_weights():
    vs = trits((5, 70), 4)
    w, w32 = bf16([0.3, -1.7, 2.1, 0.01, 1.5])
    same(tn.vsa.bundle(tensor(vs), weights=w), tn.vsa.bundle(vs, weights=w32))
    np.testing.assert_array_equal(tn.vsa.bundle(vs, weights=w), tn.vsa.bundle(vs, weights=w32))


# ------------------------------------------------------------------ Centroid
def _data():
    protos = tn.vsa.random(3, 300, seed=1)
    y = np.repeat(np.arange(3), 6)
    noise = tn.vsa.random(18, 300, seed=2)
    X = tn.vsa.bundle(np.stack([protos[y], noise, tn.vsa.random(18, 300, seed=3)]))
    return X, y


@pytest.mark.parametrize("epochs", [0, 2])
def test_centroid(epochs):
    X, y = _data()
    want = tn.vsa.Centroid(epochs=epochs).fit(X, y)
    got = tn.vsa.Centroid(epochs=epochs).fit(tensor(X), tensor(y))
    np.testing.assert_array_equal(got.sums_, want.sums_)
    np.testing.assert_array_equal(got.classes_, want.classes_)
    for clf in (got, want):
        same(clf.decision_function(tensor(X)), want.decision_function(X))
        same(clf.predict(tensor(X)), want.predict(X))
        assert clf.score(tensor(X), tensor(y)) == want.score(X, y)
    packed = tn.pack(tensor(X), "bitplane")  # a tensor's bit planes: results as tensors too
    same(got.predict(packed), want.predict(X))
    part = tn.vsa.Centroid().partial_fit(tensor(X[:9]), y[:9]).partial_fit(tensor(X[9:]), y[9:])
    np.testing.assert_array_equal(part.sums_, tn.vsa.Centroid().fit(X, y).sums_)
    animals = np.array(["ant", "bee", "cat"])  # labels a tensor cannot hold: NumPy
    np.testing.assert_array_equal(
        tn.vsa.Centroid().fit(tensor(X), animals[y]).predict(tensor(X)),
        animals[want.predict(X)])


# ------------------------------------------------------------------ ItemMemory
@pytest.mark.parametrize("fmt", ["dense", "bitplane"])
def test_item_memory(fmt):
    vectors = trits((3, 70), 5)
    mems = []
    for m in (tensor, lambda v: v):
        mem = tn.vsa.ItemMemory(70, seed=1, format=fmt)
        for symbol, v in zip("abc", vectors, strict=True):
            mem.add(symbol, m(v))
        mem.add("generated")
        mems.append(mem)
    got, want = mems
    for symbol in ("a", "c", "generated"):
        np.testing.assert_array_equal(tn.unpack(got[symbol]) if fmt == "bitplane"
                                      else got[symbol],
                                      tn.unpack(want[symbol]) if fmt == "bitplane"
                                      else want[symbol])
    noisy = vectors.copy()
    noisy[:, :10] = 0
    assert got.cleanup(tensor(noisy)) == want.cleanup(noisy) == ["a", "b", "c"]
    assert got.cleanup(tensor(noisy[1]), k=2, metric="dot") == want.cleanup(noisy[1], k=2,
                                                                             metric="dot")
    query = tensor(noisy) if fmt == "dense" else tn.pack(tensor(noisy), "bitplane")
    idx, scores = tn.vsa.search(query, want.vectors, k=2)
    want_idx, want_scores = tn.vsa.search(noisy if fmt == "dense" else tn.pack(noisy, "bitplane"),
                                          want.vectors, k=2)
    same(idx, want_idx)
    same(scores, want_scores)
