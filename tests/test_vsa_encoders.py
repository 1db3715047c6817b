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


def torchhd_level_index(values, low, high, n_levels):
    """torchhd's ``value_to_index`` in float64: round((v - low) / (high - low) * (L - 1))."""
    position = (np.asarray(values, np.float64) - low) / (high - low) * (n_levels - 1)
    return np.clip(np.round(position), 0, n_levels - 1).astype(np.int64)


def test_level_indices_match_torchhd_mapping():
    rng = np.random.default_rng(3)
    values = rng.uniform(-3, 13, (50, 4))
    values[0] = [0.0, 10.0, -3.0, 13.0]            # the ends and beyond them
    values[1] = [1.25, 3.75, 6.25, 8.75]            # exact halves round to even
    low, high = np.array([0.0, 0.0, -1.0, 2.0]), np.array([10.0, 10.0, 1.0, 12.0])
    got = vsa.level_indices(values, 9, low, high)
    np.testing.assert_array_equal(got, torchhd_level_index(values, low, high, 9))
    assert got.min() == 0 and got.max() == 8
    np.testing.assert_array_equal(vsa.level_indices([1.25, 3.75], 5, 0, 5), [1, 3])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int16])
def test_real_features_encode_as_their_levels(dtype):
    rng = np.random.default_rng(4)
    levels, keys = vsa.level(11, 256, seed=5), vsa.random(3, 256, seed=6)
    values = rng.integers(-2, 23, (8, 3)).astype(dtype)
    got = vsa.encode_features(values, levels, keys, low=0, high=20)
    indices = torchhd_level_index(values, 0, 20, 11)
    np.testing.assert_array_equal(got, formula(indices, levels, keys))


def test_real_feature_errors():
    levels, keys = vsa.level(4, 64), vsa.random(3, 64)
    x = np.zeros((2, 3))
    with pytest.raises(TypeError, match="both low and high"):
        vsa.encode_features(x, levels, keys, low=0)
    with pytest.raises(ValueError, match="low < high"):
        vsa.encode_features(x, levels, keys, low=1, high=1)
    with pytest.raises(ValueError, match="low < high"):
        vsa.encode_features(x, levels, keys, low=0, high=np.inf)
    with pytest.raises(ValueError, match="NaN"):
        vsa.encode_features(np.full((2, 3), np.nan), levels, keys, low=0, high=1)
    with pytest.raises(tn.ShapeMismatchError, match="does not broadcast"):
        vsa.encode_features(x, levels, keys, low=[0, 0], high=1)
    with pytest.raises(TypeError, match="real numbers"):
        vsa.level_indices(np.array(["a"]), 4, 0, 1)
    with pytest.raises(ValueError, match="low= and high="):
        vsa.encode_features(np.full((2, 3), 0.5), levels, keys)


@pytest.mark.parametrize(("values", "n_levels", "low", "high"), [
    ([0.0, np.inf], 1, 0, 1),  # inf * 0
    ([0.0, 1e308], 3, -1e308, 1e308),  # high - low overflows: inf / inf
])
def test_values_without_a_level_are_named_not_called_nan(values, n_levels, low, high):
    """A value whose level formula is NaN (no NaN in the input) gets a message saying why."""
    with pytest.raises(ValueError, match="high - low beyond float64"):
        vsa.level_indices(np.array(values), n_levels, low, high)
