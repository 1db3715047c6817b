"""Gradient compression by random ternary projection (``tritnum.compress``, issue 17 item 2).

The oracle is a dense projection matrix built here, from a plain-Python transcription of
the generator's hash (murmur3's finalizer on Python ints, not tritnum's code): the sketch
must be ``P @ g``, the estimates ``P.T @ s`` and ``P.T @ diag(1 / (P @ P.T)) @ s``. Every
backend must give the same bits. The statistical properties (unbiased over seeds, the
mean squared error ``sum_i (c_i - 1) ||g_i||^2``, error feedback's bounded residual) are
checked on fixed seeds against bounds several standard deviations wide.
"""

from __future__ import annotations

import hashlib
import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_vsa import fmix64 as fmix  # murmur3's finalizer on Python ints

import tritnum as tn
from tritnum._interop import to_host

MASK = 2**64 - 1
STREAM = int.from_bytes(hashlib.blake2b(b"tritnum.vsa.compress", digest_size=8).digest(),
                        "little")


def dense_projection(n, m, seed):
    """The (m, n) matrix P: column j holds +-1 at row j % m, bit j % 64 of the hash of
    (key, j // 64) giving +1."""
    key = fmix(fmix(seed % 2**64) ^ STREAM)
    P = np.zeros((m, n))
    for j in range(n):
        word = fmix((key + (j >> 6) * 0xD1B54A32D192ED03) & MASK)
        P[j % m, j] = 1.0 if (word >> (j & 63)) & 1 else -1.0
    return P


def host(x):
    return np.asarray(to_host(x))


CASES = [(1, 1), (5, 1), (5, 5), (64, 4), (100, 3), (129, 16), (1000, 7.5), (3000, 64)]


@pytest.mark.parametrize(("n", "ratio"), CASES)
def test_sketch_is_the_dense_projection(n, ratio, device):
    g = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    s = tn.compress(g, ratio, seed=n + 11, device=device)
    m = math.ceil(n / ratio)
    assert s.values.shape == (m,) and s.values.dtype == np.float32
    P = dense_projection(n, m, n + 11)
    np.testing.assert_allclose(host(s.values), P @ g.astype(np.float64), rtol=1e-6, atol=1e-6)
    sv = host(s.values).astype(np.float64)
    np.testing.assert_allclose(host(tn.decompress(s, device=device)), P.T @ sv, rtol=1e-6)
    proj = tn.decompress(s, estimate="projection", device=device)
    np.testing.assert_allclose(host(proj), P.T @ (sv / np.diag(P @ P.T)), rtol=1e-6)
    assert np.count_nonzero(P @ P.T - np.diag(np.diag(P @ P.T))) == 0  # P P^T is diagonal


@settings(max_examples=30)
@given(n=st.integers(0, 700), ratio=st.one_of(st.integers(1, 300), st.floats(1, 50)),
       dtype=st.sampled_from([np.float16, np.float32, np.float64]),
       seed=st.integers(-2**70, 2**70), data=st.data())
def test_every_backend_gives_the_same_bits(backends, n, ratio, dtype, seed, data):
    g = np.array(data.draw(st.lists(st.floats(-1e3, 1e3, width=8 * np.dtype(dtype).itemsize),
                                    min_size=n, max_size=n)), dtype)
    residual = np.linspace(-1, 1, n, dtype=np.float32)
    got = {}
    for dev in backends:
        s = tn.compress(g, ratio, seed, device=dev)
        ef = tn.ErrorFeedback(ratio, seed, device=dev)
        ef(residual)  # a residual to carry into the next step
        applied = ef(g)
        got[dev] = [host(a) for a in (s.values, tn.decompress(s, device=dev),
                                      tn.decompress(s, estimate="projection", device=dev),
                                      applied, ef.residual)]
    reference, *others = backends
    for dev in others:
        for a, b in zip(got[reference], got[dev], strict=True):
            assert a.dtype == b.dtype == np.float32
            np.testing.assert_array_equal(a, b)


def test_shapes_layouts_and_dtypes_are_read_as_the_flat_gradient():
    base = np.arange(60, dtype=np.float64).reshape(3, 4, 5) - 30
    flat = tn.compress(base.ravel(), 4, seed=3)
    for g in (base, np.asfortranarray(base), base.astype(">f8"), base.astype(np.float32)):
        s = tn.compress(g, 4, seed=3)
        assert s.shape == (3, 4, 5)
        np.testing.assert_array_equal(s.values, flat.values)
        assert tn.decompress(s).shape == (3, 4, 5)
    strided = np.repeat(base.ravel(), 2)[::2]
    strided.flags.writeable = False
    np.testing.assert_array_equal(tn.compress(strided, 4, seed=3).values, flat.values)
    scalar = tn.compress(np.float32(2.5), 1, seed=0)
    assert scalar.shape == () and abs(float(scalar.values[0])) == 2.5
    assert float(tn.decompress(scalar)) == 2.5 and tn.decompress(scalar).shape == ()
    empty = tn.compress(np.zeros((0, 3), np.float32), 16, seed=0)
    assert empty.values.shape == (0,) and tn.decompress(empty).shape == (0, 3)


def test_decompress_from_bare_values_and_reshaped():
    g = np.random.default_rng(0).standard_normal((6, 10)).astype(np.float32)
    s = tn.compress(g, 3, seed=5)
    est = tn.decompress(s)
    np.testing.assert_array_equal(tn.decompress(s.values, (6, 10), 5), est)
    np.testing.assert_array_equal(tn.decompress(s.values, 60, seed=5 + 2**64), est.ravel())
    np.testing.assert_array_equal(tn.decompress(s, shape=(60,), seed=5), est.ravel())
    out = np.full((6, 10), np.nan, np.float32)
    assert tn.decompress(s, out=out, estimate="projection") is out
    np.testing.assert_array_equal(out, tn.decompress(s, estimate="projection"))


def test_unbiased_over_seeds_with_the_stated_mean_squared_error():
    # n = 50, ratio 4: m = 13 buckets, 11 of 4 elements and 2 of 3; over K seeds the mean
    # estimate has E||mean - g||^2 = mse / K, mse = sum_i (c_i - 1) ||g_i||^2
    g = np.random.default_rng(1).standard_normal(50).astype(np.float32)
    K = 4000
    est = np.stack([tn.decompress(tn.compress(g, 4, seed=k)) for k in range(K)])
    c = np.array([4] * 11 + [3] * 2)
    mse = sum((c[i] - 1) * np.sum(g[i::13].astype(np.float64) ** 2) for i in range(13))
    assert mse <= 3 * np.sum(g.astype(np.float64) ** 2)  # (r - 1) ||g||^2
    errors = np.sum((est - g) ** 2, axis=1)
    assert abs(errors.mean() / mse - 1) < 0.08  # std of the mean of K errors: ~2 %
    assert np.sum((est.mean(axis=0) - g) ** 2) < 3 * mse / K  # unbiased: shrinks as 1/K


def test_signs_are_balanced_and_independent_of_the_seed():
    signs = np.stack([tn.decompress(np.ones(1, np.float32), 4096, seed=k) for k in range(64)])
    assert set(np.unique(signs)) == {-1.0, 1.0}
    assert abs(signs.mean()) < 4 / math.sqrt(signs.size)  # 4 standard deviations
    corr = signs @ signs.T / signs.shape[1]
    assert np.abs(corr - np.eye(64)).max() < 5 / math.sqrt(4096)


def test_projection_is_an_orthogonal_projection():
    g = np.random.default_rng(2).standard_normal(1000)
    p = tn.decompress(tn.compress(g, 8, seed=9), estimate="projection").astype(np.float64)
    np.testing.assert_allclose(np.sum((g - p) ** 2) + np.sum(p**2), np.sum(g**2), rtol=1e-5)
    again = tn.decompress(tn.compress(p, 8, seed=9), estimate="projection")
    np.testing.assert_allclose(again, p, rtol=1e-5, atol=1e-6)  # idempotent
    # it keeps about 1 / ratio of the energy
    assert 0.08 < np.sum(p**2) / np.sum(g**2) < 0.17


def test_sketches_are_linear():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 500)).astype(np.float32)
    sa, sb, sab = (tn.compress(x, 10, seed=4) for x in (a, b, a + b))
    np.testing.assert_allclose(sa.values + sb.values, sab.values, rtol=1e-5, atol=1e-5)
    summed = tn.decompress(sa.values + sb.values, 500, seed=4)
    np.testing.assert_allclose(summed, tn.decompress(sab), rtol=1e-5, atol=1e-5)


def test_error_feedback_applies_what_it_does_not_keep():
    # sum of applied updates + the residual = sum of the gradients, at every step
    rng = np.random.default_rng(4)
    ef = tn.ErrorFeedback(16, seed=0)
    total, applied = np.zeros(300), np.zeros(300)
    for _ in range(50):
        g = rng.standard_normal((10, 30)).astype(np.float32)
        total += g.ravel()
        applied += ef(g).ravel()
        np.testing.assert_allclose(applied + ef.residual.ravel(), total, rtol=1e-4, atol=1e-4)
    assert ef.step == 50 and ef.residual.shape == (10, 30)


def test_error_feedback_residual_stays_bounded_and_the_updates_track_the_gradient():
    # a constant gradient: the residual settles near |e| ~ r |g| (E|e|^2 ~ r (r - 1) |g|^2)
    # and the mean applied update over T steps is g + (e_0 - e_T) / T
    g = np.random.default_rng(5).standard_normal(4000).astype(np.float32)
    ratio, norm = 8, np.linalg.norm(g)
    ef = tn.ErrorFeedback(ratio, seed=1)
    norms, applied = [], np.zeros(4000)
    for t in range(600):
        p = ef(g)
        if t >= 200:
            applied += p
        norms.append(np.linalg.norm(ef.residual))
    assert max(norms) < 1.5 * ratio * norm
    assert np.mean(norms[200:]) > 0.5 * ratio * norm  # it is near that level, not far below
    assert np.linalg.norm(applied / 400 - g) < 0.05 * norm


def test_error_feedback_sketches_sum_over_workers():
    # two workers with one seed: decompressing the summed sketches gives the sum of the
    # updates each would apply alone (all-reduce of the values instead of the gradients)
    rng = np.random.default_rng(6)
    workers = [tn.ErrorFeedback(4, seed=2) for _ in range(2)]
    alone = [tn.ErrorFeedback(4, seed=2) for _ in range(2)]
    for _ in range(3):
        grads = rng.standard_normal((2, 100)).astype(np.float32)
        sketches = [w.compress(g) for w, g in zip(workers, grads, strict=True)]
        assert sketches[0].seed == sketches[1].seed
        total = tn.decompress(sketches[0].values + sketches[1].values, 100, sketches[0].seed,
                              estimate="projection")
        expected = sum(a(g) for a, g in zip(alone, grads, strict=True))
        np.testing.assert_allclose(total, expected, rtol=1e-5, atol=1e-6)
    assert len({workers[0].compress(grads[0]).seed, workers[0].compress(grads[0]).seed}) == 2


def test_sketch_pickles_small():
    s = tn.compress(np.ones(4096, np.float32), 16, seed=2**63 + 5)
    blob = pickle.dumps(s)
    assert len(blob) < s.nbytes + 300
    back = pickle.loads(blob)
    assert (back.shape, back.seed, back.ratio) == ((4096,), 2**63 + 5, 16.0)
    np.testing.assert_array_equal(tn.decompress(back), tn.decompress(s))
    assert repr(s) == f"Sketch(shape=(4096,), ratio=16, seed={2**63 + 5}, 256 values)"


def test_seed_kinds():
    g = np.ones(100, np.float32)
    assert tn.compress(g, 4, seed=-1).seed == 2**64 - 1
    a = tn.compress(g, 4, seed=np.random.SeedSequence(3))
    assert a.seed == tn.compress(g, 4, seed=np.random.SeedSequence(3)).seed
    assert tn.compress(g, 4).seed != tn.compress(g, 4).seed  # fresh entropy
    assert tn.ErrorFeedback(4, seed=np.random.default_rng(0)).seed < 2**64


def test_torch_tensors_in_and_out():
    torch = pytest.importorskip("torch")
    g = torch.linspace(-1, 1, 300, requires_grad=True)
    s = tn.compress(g, 4, seed=1)
    assert isinstance(s.values, torch.Tensor) and s.values.dtype == torch.float32
    np.testing.assert_array_equal(s.values.numpy(), tn.compress(g.detach().numpy(), 4, 1).values)
    est = tn.decompress(s)
    assert isinstance(est, torch.Tensor) and est.shape == (300,)
    assert tn.compress(g.bfloat16(), 4, seed=1).values.shape == (75,)
    ef = tn.ErrorFeedback(4, seed=1)
    assert isinstance(ef(g.detach().view(3, 100)), torch.Tensor)
    assert isinstance(ef.residual, torch.Tensor) and ef.residual.shape == (3, 100)
    back = pickle.loads(pickle.dumps(s))
    assert torch.equal(back.values, s.values)


BUFFER = np.ones(4, np.float32)


@pytest.mark.parametrize(("call", "error"), [
    (lambda: tn.compress(np.ones(4, np.int32), 2, 0), TypeError),
    (lambda: tn.compress(np.ones(4), "16", 0), TypeError),
    (lambda: tn.compress(np.ones(4), True, 0), TypeError),
    (lambda: tn.compress(np.ones(4), 0.5, 0), ValueError),
    (lambda: tn.compress(np.ones(4), float("inf"), 0), ValueError),
    (lambda: tn.compress(np.ones(4), float("nan"), 0), ValueError),
    (lambda: tn.compress(np.ones(4), 2, 1.5), TypeError),
    (lambda: tn.compress(np.ones(4), 2, 0, device="gpu"), ValueError),
    (lambda: tn.decompress(np.ones(2, np.float32)), TypeError),
    (lambda: tn.decompress(np.ones(2, np.float32), 4), TypeError),
    (lambda: tn.decompress(np.ones(2, np.float32), 4, 1.0), TypeError),
    (lambda: tn.decompress(np.ones(2), 4, 1), TypeError),
    (lambda: tn.decompress(np.ones(5, np.float32), 4, 1), tn.ShapeMismatchError),
    (lambda: tn.decompress(np.ones(0, np.float32), 4, 1), tn.ShapeMismatchError),
    (lambda: tn.decompress(np.ones((1, 2), np.float32), 4, 1), tn.ShapeMismatchError),
    (lambda: tn.decompress(np.ones(2, np.float32), (2, -2), 1), tn.ShapeMismatchError),
    (lambda: tn.decompress(tn.compress(np.ones(4), 2, 0), seed=1), ValueError),
    (lambda: tn.decompress(tn.compress(np.ones(4), 2, 0), shape=(5,)), tn.ShapeMismatchError),
    (lambda: tn.decompress(tn.compress(np.ones(4), 2, 0), estimate="mean"), ValueError),
    (lambda: tn.decompress(tn.compress(np.ones(4), 2, 0), out=np.ones(4)), TypeError),
    (lambda: tn.decompress(tn.compress(np.ones(4), 2, 0), out=np.ones(3, np.float32)),
     TypeError),
    (lambda: tn.decompress(tn.compress(np.ones(4), 2, 0), out=np.ones(8, np.float32)[::2]),
     TypeError),
    (lambda: tn.decompress(BUFFER[:2], 4, 0, out=BUFFER[:4]), ValueError),  # aliased
    (lambda: tn.ErrorFeedback(0, 1), ValueError),
    (lambda: tn.ErrorFeedback(2, 1, device="tpu"), ValueError),
])
def test_argument_errors_are_typed(call, error):
    with pytest.raises(error):
        call()


def test_error_feedback_refuses_a_gradient_of_another_size():
    ef = tn.ErrorFeedback(2, 0)
    ef(np.ones(10, np.float32))
    with pytest.raises(tn.ShapeMismatchError):
        ef(np.ones(11, np.float32))
    ef(np.ones((2, 5), np.float32))  # the same size in another shape is the same vector
    assert ef.step == 2


def test_integer_gradients_are_told_to_cast_not_to_pack():
    for call in (lambda: tn.compress(np.ones(4, np.int32), 2, 0),
                 lambda: tn.ErrorFeedback(2, 0).compress(np.ones(4, np.int64))):
        with pytest.raises(TypeError, match="cast integer gradients to a float dtype") as info:
            call()
        assert "tn.pack" not in str(info.value)
