"""The HDC classifiers' kernels (row norms, class sums, phases to trits) on every backend.

Each against an independent oracle: float64 square roots of non-zero counts, a Python
loop of row additions, and the trits read from float64 cosines of the phases.
"""

from __future__ import annotations

import numpy as np

from tritnum._dispatch import kernel


def _trits(shape, seed):
    return np.random.default_rng(seed).integers(-1, 2, shape, dtype=np.int8)


def test_row_norms(device):
    H = _trits((9, 70), 1)
    H[3] = 0
    expected = [np.sqrt(float(sum(v != 0 for v in row))) for row in H.tolist()]
    assert kernel("hdc.row_norms", device)(H).tolist() == expected


def test_add_rows_adds_each_row_to_its_class(device):
    H = _trits((12, 33), 2)
    t = np.random.default_rng(3).integers(0, 4, 12)
    W = np.arange(4 * 33, dtype=np.int64).reshape(4, 33)
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
