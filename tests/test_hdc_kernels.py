"""The HDC classifiers' kernels (row norms, class sums, phases to trits, cosines, passes) on
every backend.

Each against an independent oracle: float64 square roots of non-zero counts, a Python
loop of row additions, the trits read from float64 cosines of the phases, float64 cosines
row by row, and a Python loop of the update rule, row by row.
"""

from __future__ import annotations

import numpy as np
import pytest

from tritnum._dispatch import kernel


def _trits(shape, seed):
    return np.random.default_rng(seed).integers(-1, 2, shape, dtype=np.int8)


def test_row_norms(device):
    H = _trits((9, 70), 1)
    H[3] = 0
    expected = [np.sqrt(float(sum(v != 0 for v in row))) for row in H.tolist()]
    assert kernel("hdc.row_norms", device)(H).tolist() == expected


@pytest.mark.parametrize(("rows", "d"), [(12, 33), (200, 6000)])  # the second on threads
def test_add_rows_adds_each_row_to_its_class(device, rows, d):
    H = _trits((rows, d), 2)
    t = np.random.default_rng(3).integers(0, 4, rows)
    W = np.arange(4 * d, dtype=np.int64).reshape(4, d)
    expected = W.copy()
    for i, k in enumerate(t.tolist()):  # repeated classes add up
        expected[k] += H[i]
    kernel("hdc.add_rows", device)(W, H, t)
    np.testing.assert_array_equal(W, expected)


def test_phase_trits_are_the_cosines_signs_past_the_edge(device):
    rng = np.random.default_rng(4)
    turns = (rng.random((7, 50)) * 6 - 3).astype(np.float32)
    phase = rng.random(50).astype(np.float32)
    edge = np.float32(0.2)
    u = turns.astype(np.float64) + phase.astype(np.float64)
    c, limit = np.cos(2 * np.pi * u), np.cos(2 * np.pi * 0.2)
    far = np.abs(np.abs(c) - limit) > 1e-4  # away from the band's edges (float32 phases)
    out = np.full((7, 50), 9, np.int8)
    kernel("hdc.phase_trits", device)(turns, phase, edge, out)
    expected = (c > limit).astype(np.int8) - (c < -limit)
    assert far.mean() > 0.99
    np.testing.assert_array_equal(out[far], expected[far])


def _cosine(h, w):
    """The float64 cosine of two rows, 0 when either is zero."""
    nh, nw = np.sqrt(float(np.count_nonzero(h))), float(np.linalg.norm(w))
    return 0.0 if nh == 0 or nw == 0 else float(h.astype(np.float64) @ w) / (nh * nw)


@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_cosines_of_rows_with_class_vectors(device, dtype):
    H = _trits((11, 70), 5)  # not a multiple of the kernel's four rows
    H[2] = 0  # a zero row: cosines 0
    W = np.random.default_rng(6).integers(-5, 6, (5, 70)).astype(dtype)  # an odd count
    W[4] = 0  # a zero class vector: cosines 0
    got = kernel("hdc.cosines", device)(H, W, np.sqrt(np.count_nonzero(H, axis=1)))
    expected = [[_cosine(h, w) for w in W.astype(np.float64)] for h in H]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(("online", "dtype", "lr", "fresh"), [(False, np.float64, 0.3, False),
                                                              (True, np.float64, 0.3, False),
                                                              (False, np.int64, 1, False),
                                                              (False, np.float64, 0.3, True)])
def test_mistake_pass_follows_the_rule_row_by_row(device, online, dtype, lr, fresh):
    """A Python loop over the rows: batches scored as they stand, then their mistakes moved.

    With ``fresh``, columns of the rows are replaced first (NeuralHD's regenerated
    dimensions) and the norms follow.
    """
    rng = np.random.default_rng(7)
    H = _trits((23, 40), 8)  # batches of 5: the last one short
    t = rng.integers(0, 3, 23)
    W = rng.integers(-3, 4, (3, 40)).astype(dtype)
    dims = np.array([7, 2, 30, 39] if fresh else [], np.int64)  # not sorted: weakest first
    columns = _trits((23, len(dims)), 12)
    columns[0] = 0  # a row that loses non-zeros
    rows = H.copy()
    for k, j in enumerate(dims.tolist()):
        rows[:, j] = columns[:, k]
    expected, wrong = W.astype(np.float64), 0
    for r in range(0, 23, 5):
        scores = [[_cosine(h, w) for w in expected] for h in rows[r:r + 5]]
        for i, s in enumerate(scores):
            c, p = t[r + i], int(np.argmax(s))
            if p != c:
                a, b = (lr * (1 - s[c]), lr * (s[p] - 1)) if online else (lr, -lr)
                expected[c] += a * rows[r + i]
                expected[p] += b * rows[r + i]
                wrong += 1
    norms = np.sqrt(np.count_nonzero(H, axis=1)).astype(np.float64)
    got = kernel("hdc.mistake_pass", device)(W, H, t, float(lr), 5, online, norms, dims, columns)
    assert got == wrong and wrong > 5
    assert W.dtype == dtype
    np.testing.assert_allclose(W, expected, rtol=1e-5, atol=1e-6)  # float32 cosines
    np.testing.assert_array_equal(H, rows)
    assert norms.tolist() == [np.sqrt(float(sum(v != 0 for v in row))) for row in rows.tolist()]


def test_near_normal_values_from_bits(device):
    """Each word's value by its formula (Python integers, float64), and their moments."""
    bits = np.random.default_rng(9).integers(0, 2**64, 50_000, np.uint64)
    out = np.empty(50_000, np.float32)
    kernel("hdc.near_normal", device)(bits, out)
    some = [int(w) for w in bits[:500]]
    expected = [(bin(w >> 16).count("1") - 24 + (w & 0xFFFF) / 65536 - 0.5) / np.sqrt(12 + 1 / 12)
                for w in some]
    np.testing.assert_allclose(out[:500], expected, rtol=1e-6, atol=1e-6)  # float32 steps
    assert abs(out.mean()) < 0.015 and abs(out.std() - 1) < 0.01
    assert np.unique(out).size > 45_000  # a density (of 3.2 M values), not 49 popcounts


def test_project_trits_are_the_cosines_trits_of_the_projection(device):
    """Rows in several blocks and threads: the trits of the float64 ``cos(z @ proj + phase)``."""
    rng = np.random.default_rng(10)
    z = rng.standard_normal((300, 6)).astype(np.float32)
    proj = (rng.standard_normal((6, 20_000)) * 0.3).astype(np.float32)  # 64 rows a block
    phase = rng.random(20_000).astype(np.float32)
    out = np.full((300, 20_000), 9, np.int8)
    kernel("hdc.project_trits", device)(z, proj, phase, np.float32(0.15), out)
    c = np.cos(2 * np.pi * (z.astype(np.float64) @ proj + phase))
    limit = np.cos(2 * np.pi * 0.15)
    far = np.abs(np.abs(c) - limit) > 1e-4  # float32 products: the band's edges either way
    expected = (c > limit).astype(np.int8) - (c < -limit)
    assert far.mean() > 0.99
    np.testing.assert_array_equal(out[far], expected[far])

