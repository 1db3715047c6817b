"""The HDC classifiers of raw features (tritnum.vsa.estimators, issue 31 item 1).

The update rules are checked against NumPy transcriptions of the papers' (torchhd's)
rules, sample by sample, on a tiny problem: exactly for the integer models
(Centroid, QuantHD, SparseHD), to float tolerance for the float ones; against
torchhd's own ``Centroid.add_adapt``/``add_online`` where it is installed.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

sklearn = pytest.importorskip("sklearn")

from sklearn.base import clone  # noqa: E402
from sklearn.exceptions import NotFittedError  # noqa: E402
from sklearn.model_selection import GridSearchCV, cross_val_score  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

import tritnum as tn  # noqa: E402
from tritnum.vsa import _hdc_models as rules  # noqa: E402
from tritnum.vsa.estimators import (  # noqa: E402
    AdaptHDClassifier,
    CentroidClassifier,
    NeuralHDClassifier,
    OnlineHDClassifier,
    QuantHDClassifier,
    SparseHDClassifier,
)

ALL = (CentroidClassifier, AdaptHDClassifier, OnlineHDClassifier, QuantHDClassifier,
       SparseHDClassifier, NeuralHDClassifier)
SMALL = {"n_dimensions": 512, "epochs": 3, "random_state": 0}


def small(cls, **kw):
    return cls(**{**SMALL, **kw})


@parametrize_with_checks([small(cls) for cls in ALL])
def test_scikit_learn_checks(estimator, check):
    check(estimator)


def blobs(n=48, features=5, classes=3, seed=0, spread=3.0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, spread, (classes, features))
    y = np.arange(n) % classes
    return centers[y] + rng.normal(0, 1, (n, features)), y


def encoded(clf, X):
    """The encoder ``clf`` fits (seeded as ``fit`` seeds it) and ``X`` encoded by it."""
    rng = np.random.RandomState(clf.random_state)
    enc = rules.Encoder(clf.encoder, clf.n_dimensions, clf.n_levels,
                        int(rng.randint(2**62))).fit(X)
    return enc, enc.transform(X).astype(np.float64), rng


def cos(h, w):
    nh, nw = math.sqrt(np.count_nonzero(h)), np.linalg.norm(w)
    return 0.0 if nh == 0 or nw == 0 else float(h @ w) / (nh * nw)


def ref_mistakes(W, H, t, batch, score):
    """One pass: per mini-batch, the (sample, target, predicted, scores) of each mistake."""
    for r in range(0, len(H), batch):
        preds = []
        for i in range(r, min(r + batch, len(H))):
            s = [score(H[i], W[c]) for c in range(len(W))]
            preds.append((i, t[i], int(np.argmax(s)), s))
        yield [p for p in preds if p[1] != p[2]]


def ref_adapt_pass(W, H, t, lr, batch):
    wrong = 0
    for mistakes in ref_mistakes(W, H, t, batch, cos):
        for i, c, p, _ in mistakes:
            W[c] += (lr * H[i]).astype(W.dtype)
            W[p] -= (lr * H[i]).astype(W.dtype)
        wrong += len(mistakes)
    return wrong


@pytest.mark.parametrize("encoder", ["record", "projection", "thermometer", "nonlinear"])
def test_centroid_sums_and_wraps_centroid(encoder):
    X, y = blobs()
    clf = CentroidClassifier(n_dimensions=256, encoder=encoder, random_state=3).fit(X, y)
    _, H, _ = encoded(clf, X)
    sums = np.zeros((3, 256))
    for h, c in zip(H, y, strict=True):
        sums[c] += h
    assert np.array_equal(clf.centroid_.sums_, sums)
    retrained = CentroidClassifier(n_dimensions=256, encoder=encoder, epochs=2,
                                   random_state=3).fit(X, y)
    proto = tn.vsa.Centroid(epochs=2).fit(H.astype(np.int8), y)
    assert np.array_equal(retrained.centroid_.sums_, proto.sums_)


@pytest.mark.parametrize("adaptive", [False, True])
def test_adapthd_rule(adaptive):
    X, y = blobs()
    clf = AdaptHDClassifier(n_dimensions=256, epochs=4, lr=0.5, adaptive=adaptive,
                            batch_size=8, random_state=1).fit(X, y)
    _, H, _ = encoded(clf, X)
    W, rate = np.zeros((3, 256)), 0.5
    for _ in range(4):
        wrong = ref_adapt_pass(W, H, y, rate, 8)
        if adaptive:
            rate = 0.5 * wrong / len(y)
    np.testing.assert_allclose(clf.class_vectors_, W, atol=1e-9)


def test_onlinehd_rule():
    X, y = blobs()
    clf = OnlineHDClassifier(n_dimensions=256, epochs=3, lr=0.3, batch_size=8,
                             random_state=2).fit(X, y)
    _, H, _ = encoded(clf, X)
    W = np.zeros((3, 256))
    for _ in range(3):
        for mistakes in ref_mistakes(W, H, y, 8, cos):
            for i, c, p, s in mistakes:
                W[c] += 0.3 * (1 - s[c]) * H[i]
                W[p] += 0.3 * (s[p] - 1) * H[i]
    # the weights come from float32 cosines (as torchhd's): float32's precision
    np.testing.assert_allclose(clf.class_vectors_, W, rtol=1e-5, atol=1e-6)


def test_quanthd_rule_is_exact():
    X, y = blobs(60, spread=0.7)  # classes that overlap: retraining has work to do
    clf = QuantHDClassifier(n_dimensions=256, epochs=4, lr=0.1, batch_size=8,
                            random_state=4).fit(X, y)
    _, H, _ = encoded(clf, X)
    counts = np.zeros((3, 256), np.int64)
    for h, c in zip(H, y, strict=True):
        counts[c] += 10 * h.astype(np.int64)  # first pass weight 1 / lr
    assert not np.array_equal(clf.class_counts_, counts)
    for _ in range(3):
        model = np.sign(counts)
        for mistakes in ref_mistakes(model, H, y, 8, lambda h, w: int(h @ w)):
            for i, c, p, _ in mistakes:
                counts[c] += H[i].astype(np.int64)
                counts[p] -= H[i].astype(np.int64)
    assert clf.class_counts_.dtype == np.int64
    assert np.array_equal(clf.class_counts_, counts)
    assert np.array_equal(clf.class_vectors_, np.sign(counts))
    # prediction on bit planes: the integer dot products of the dense trits
    assert np.array_equal(clf.decision_function(X), H @ np.sign(counts).T)


def test_sparsehd_rule_is_exact():
    X, y = blobs(60)
    clf = SparseHDClassifier(n_dimensions=256, epochs=3, density=0.25, batch_size=8,
                             random_state=5).fit(X, y)
    _, H, _ = encoded(clf, X)
    W = np.zeros((3, 256), np.int64)
    for _ in range(3):
        ref_adapt_pass(W, H, y, 1, 8)
        variation = W.max(axis=0) - W.min(axis=0)
        drop = sorted(range(256), key=lambda j: (variation[j], j))[:256 - 64]
        W[:, drop] = 0
    assert clf.class_vectors_.dtype == np.int64
    assert np.array_equal(clf.class_vectors_, W)
    assert np.count_nonzero(np.any(W, axis=0)) <= 64


# regenerations after epochs 1 and 3 of 5; after each of 3, the last one's columns unread
@pytest.mark.parametrize(("encoder", "epochs", "freq"), [("record", 5, 2), ("projection", 5, 2),
                                                          ("nonlinear", 3, 1)])
def test_neuralhd_rule_and_regeneration(encoder, epochs, freq):
    X, y = blobs(60, spread=0.7)  # classes that overlap: every pass has mistakes to move
    clf = NeuralHDClassifier(n_dimensions=256, encoder=encoder, epochs=epochs, lr=0.4,
                             regen_rate=0.1, regen_freq=freq, batch_size=8,
                             random_state=6).fit(X, y)
    enc, H, rng = encoded(clf, X)
    W = np.zeros((3, 256))
    for h, c in zip(H, y, strict=True):
        W[c] += h
    regenerated = []
    for epoch in range(1, epochs):
        ref_adapt_pass(W, H, y, 0.4, 8)
        if epoch % freq == freq - 1:
            unit = W / np.linalg.norm(W, axis=1, keepdims=True)
            var = unit.var(axis=0, ddof=1)
            dims = np.array(sorted(range(256), key=lambda j: (var[j], j))[:26])
            W[:, dims] = 0
            enc.regenerate(dims, int(rng.randint(2**62)))
            H[:, dims] = enc.transform(X, dims)
            regenerated.append(dims)
    assert len(regenerated) == 2
    np.testing.assert_allclose(clf.class_vectors_, W, atol=1e-9)
    assert np.array_equal(clf.encoder_.transform(X), H)


def test_update_rules_match_torchhd():
    torch = pytest.importorskip("torch")
    models = pytest.importorskip("torchhd.models")
    X, y = blobs()
    for cls, method in ((AdaptHDClassifier, "add_adapt"), (OnlineHDClassifier, "add_online")):
        kw = {"adaptive": False} if cls is AdaptHDClassifier else {}
        clf = cls(n_dimensions=256, epochs=3, lr=0.2, batch_size=8, random_state=0,
                  **kw).fit(X, y)
        _, H, _ = encoded(clf, X)
        ref = models.Centroid(256, 3, dtype=torch.float64)
        for _ in range(3):
            for r in range(0, len(H), 8):
                getattr(ref, method)(torch.from_numpy(H[r:r + 8]), torch.from_numpy(y[r:r + 8]),
                                     lr=0.2)
        # torchhd's cosine differs in the last digits (its norms): a float tolerance
        np.testing.assert_allclose(clf.class_vectors_, ref.weight.numpy(), rtol=1e-4, atol=1e-6)


def test_projection_and_thermometer_encoders():
    X, _ = blobs(10)
    enc = rules.Encoder("projection", 300, 2, 9).fit(X)
    z = (X - X.mean(axis=0)) / X.std(axis=0)
    h = z @ tn.vsa.random(5, 300, seed=9).astype(np.float64)
    rms = np.sqrt(2 / 3 * (z ** 2).sum(axis=1, keepdims=True))
    expect = np.where(np.abs(h) < 0.43 * rms, 0, np.sign(h))
    got = enc.transform(X)
    assert got.dtype == np.int8
    # float32 products: a value right at the threshold may fall either way
    assert np.mean(got == expect) > 0.995
    assert 0.6 < np.count_nonzero(got) / got.size < 0.73
    levels = rules.thermometer(5, 8)
    assert levels.tolist() == [[-1] * 8, [1, 1] + [-1] * 6, [1] * 4 + [-1] * 4,
                               [1] * 6 + [-1] * 2, [1] * 8]


def test_nonlinear_encoder_is_cosine_signs():
    """The ``"nonlinear"`` trits against ``cos`` of the projection computed in float64."""
    X, _ = blobs(10)
    enc = rules.Encoder("nonlinear", 300, 2, 9).fit(X)
    z = (X - X.mean(axis=0)) / X.std(axis=0)
    rng = np.random.default_rng(9)
    # near-Gaussian entries from 64 random bits each: (popcount of the high 48 - 24 +
    # the low 16 / 65536 - 1/2) / sqrt(12 + 1/12), here in float64
    bits = [int(w) for w in rng.integers(0, 2**64, 5 * 300, np.uint64)]
    g = [(bin(w >> 16).count("1") - 24 + (w & 0xFFFF) / 65536 - 0.5) / math.sqrt(12 + 1 / 12)
         for w in bits]
    G = np.reshape(g, (5, 300)) * rules.BANDWIDTH / math.sqrt(5)
    b = 2 * math.pi * rng.random(300, dtype=np.float32).astype(np.float64)
    v = np.cos(z @ G + b)
    got = enc.transform(X)
    # 0 where |cos| is below cos(2 pi EDGE): phases within EDGE turns of a quarter turn
    limit = math.cos(2 * math.pi * rules.EDGE)
    expect = np.where(v > limit, 1, np.where(v < -limit, -1, 0))
    assert got.dtype == np.int8 and set(np.unique(got)) == {-1, 0, 1}
    # float32 products: a phase right at the band's edge may fall either way
    clear = np.abs(np.abs(v) - limit) > 1e-3
    assert clear.mean() > 0.99 and np.array_equal(got[clear], expect[clear])
    # 0 where a phase is more than EDGE turns from a whole and from a half turn: 1 - 4 EDGE
    assert abs(np.mean(got == 0) - (1 - 4 * rules.EDGE)) < 0.05
    # the columns asked for only, and regenerated columns drawn afresh
    dims = np.array([3, 17, 250])
    assert np.array_equal(enc.transform(X, dims), got[:, dims])
    enc.regenerate(dims, 4)
    again = enc.transform(X)
    assert np.array_equal(np.delete(again, dims, axis=1), np.delete(got, dims, axis=1))
    assert not np.array_equal(again[:, dims], got[:, dims])


def test_phase_trits_zero_band():
    from tritnum._kernels.cpu import hdc

    turns = np.linspace(-2, 2, 4001, dtype=np.float32)[None, :]
    phase = np.zeros(4001, np.float32)
    out = np.empty((1, 4001), np.int8)
    hdc.phase_trits(turns, phase, np.float32(0.2), out)
    c = np.cos(2 * np.pi * turns.astype(np.float64))
    edge = np.cos(2 * np.pi * 0.2)
    clear = np.abs(np.abs(c) - edge) > 1e-5
    expect = np.where(c > edge, 1, np.where(c < -edge, -1, 0))
    assert np.array_equal(out[clear], expect[clear])
    assert {-1, 0, 1} == set(np.unique(out))


@pytest.mark.parametrize("cls", ALL)
def test_random_state_determines_the_fit(cls):
    X, y = blobs()
    a = small(cls, random_state=11).fit(X, y).decision_function(X)
    b = small(cls, random_state=np.random.RandomState(11)).fit(X, y).decision_function(X)
    assert np.array_equal(a, b)
    g1 = small(cls, random_state=np.random.default_rng(5)).fit(X, y).decision_function(X)
    g2 = small(cls, random_state=np.random.default_rng(5)).fit(X, y).decision_function(X)
    assert np.array_equal(g1, g2)
    assert not np.array_equal(a, small(cls, random_state=12).fit(X, y).decision_function(X))


@pytest.mark.parametrize("cls", ALL)
def test_bad_input(cls):
    X, y = blobs()
    clf = small(cls)
    with pytest.raises(NotFittedError):
        clf.predict(X)
    with pytest.raises(ValueError, match="one class"):
        clf.fit(X, np.zeros(len(X), int))
    with pytest.raises(ValueError, match="Mix of label input types"):
        clf.fit(X, np.array([1, "a"] * (len(X) // 2), dtype=object))
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        clf.fit(bad, y)
    with pytest.raises(ValueError, match="classes must be passed on the first call"):
        small(cls).partial_fit(X, y)
    part = small(cls).partial_fit(X, y, classes=[0, 1, 2])
    with pytest.raises(ValueError, match=r"labels \[7\] that are not among"):
        part.partial_fit(X, np.where(y == 2, 7, y))
    with pytest.raises(ValueError, match="is not the same as on last call"):
        part.partial_fit(X, y, classes=[0, 1, 2, 3])
    with pytest.raises(ValueError, match="encoder must be one of"):
        small(cls, encoder="fourier").fit(X, y)


@pytest.mark.parametrize("cls", ALL)
def test_warm_start(cls):
    X, y = blobs()
    X2, y2 = blobs(seed=1)
    fresh = small(cls).fit(X2, y2).decision_function(X)
    refit = small(cls).fit(X, y).fit(X2, y2).decision_function(X)
    assert np.array_equal(refit, fresh)  # warm_start=False forgets the first fit
    warm = small(cls, warm_start=True).fit(X, y).fit(X2, y2).decision_function(X)
    assert not np.array_equal(warm, fresh)
    with pytest.raises(ValueError, match="not among"):
        small(cls, warm_start=True).fit(X, y).fit(X2, y2 + 5)


def test_partial_fit_classes_seen_later():
    X, y = blobs()
    for cls in ALL:
        clf = small(cls).partial_fit(X[y < 2], y[y < 2], classes=[0, 1, 2])
        assert clf.decision_function(X).shape == (len(X), 3)
        clf.partial_fit(X, y)
        assert set(clf.predict(X)) <= {0, 1, 2}


def test_scikit_learn_tools():
    X, y = blobs(60)
    clf = small(OnlineHDClassifier)
    assert clone(clf).get_params() == clf.get_params()
    scores = cross_val_score(clf, X, y, cv=3)
    assert scores.mean() > 0.8
    search = GridSearchCV(small(QuantHDClassifier), {"encoder": ["record", "thermometer"]},
                          cv=2).fit(X, y)
    assert search.best_params_["encoder"] in ("record", "thermometer")
    pipe = make_pipeline(StandardScaler(), small(SparseHDClassifier, density=0.5)).fit(X, y)
    assert pipe.score(X, y) > 0.8
    assert clf.set_params(lr=0.5).lr == 0.5


def test_import_tritnum_leaves_sklearn_unloaded():
    code = ("import sys, tritnum as tn; assert 'sklearn' not in sys.modules; "
            "tn.vsa.QuantHDClassifier; assert 'sklearn' in sys.modules; "
            "assert 'CentroidClassifier' in dir(tn.vsa)")
    subprocess.run([sys.executable, "-c", code], check=True)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        tn.vsa.Nope  # noqa: B018


def test_weakest_dimensions_in_order_ties_to_the_lower():
    """NeuralHD's regenerated dimensions: the least variances first, equal ones by index."""
    rng = np.random.default_rng(3)
    for n in (1, 7, 29, 30):
        W = rng.integers(-2, 3, (3, 30)).astype(np.float64)  # small integers: many ties
        W[:, 5] = W[:, 11] = 0  # two zero-variance dimensions
        unit = W / np.linalg.norm(W, axis=1, keepdims=True)
        var = [float(np.var(unit[:, j], ddof=1)) for j in range(30)]
        assert rules.weakest(W, n).tolist() == sorted(range(30), key=lambda j: (var[j], j))[:n]
