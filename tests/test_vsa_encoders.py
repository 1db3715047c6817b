"""tn.vsa.encode_features against its formula, and its bad input."""

import numpy as np
import pytest

import tritnum as tn
from tritnum import vsa
from tritnum.vsa import encoders


def formula(values, levels, keys):
    """sign(sum_i keys[i] * levels[values[:, i]]), tie -> 0, in plain NumPy."""
    total = (keys[None].astype(np.int64) * levels[values].astype(np.int64)).sum(axis=1)
    return np.sign(total).astype(np.int8)


@pytest.mark.parametrize("kind", ["dense", "bitplane"])
def test_matches_formula(kind, monkeypatch):
    monkeypatch.setattr(encoders, "CHUNK_BYTES", 1)  # one row per chunk: chunking is covered
    rng = np.random.default_rng(0)
    levels, keys = vsa.level(5, 300, seed=1), vsa.random(7, 300, seed=2, density=0.8)
    values = rng.integers(0, 5, (6, 7))
    wrap = (lambda a: tn.pack(a, "bitplane")) if kind == "bitplane" else (lambda a: a)
    got = vsa.encode_features(values, wrap(levels), wrap(keys))
    np.testing.assert_array_equal(got, formula(values, levels, keys))


def test_bad_input():
    levels, keys = vsa.level(4, 64), vsa.random(3, 64)
    with pytest.raises(tn.ShapeMismatchError, match="one column per key"):
        vsa.encode_features(np.zeros((2, 4), int), levels, keys)
    with pytest.raises(tn.ShapeMismatchError, match="d = 64 but keys d = 32"):
        vsa.encode_features(np.zeros((2, 3), int), levels, vsa.random(3, 32))
    with pytest.raises(ValueError, match=r"in \[0, 4\)"):
        vsa.encode_features(np.full((2, 3), 4), levels, keys)
    with pytest.raises(ValueError, match="integer level indices"):
        vsa.encode_features(np.zeros((2, 3)), levels, keys)
