"""The CUDA quantization kernels against the NumPy reference, on tiny shapes."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

import tritnum as tn

FORMATS = ("2bit", "base3", "bitplane")
MODES = [{}, {"axis": -1}, {"group_size": 5}]


@pytest.mark.parametrize("mode", MODES, ids=["tensor", "row", "group"])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_quantize_matches_reference(fmt, mode, dtype):
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((3, 70)) * 2).astype(dtype)
    w[0, :3] = [0.0, 1e-9, -1e-9]
    ref = tn.quantize(w, format=fmt, device="numpy", **mode)
    got = tn.quantize(w, format=fmt, device="cuda", **mode)
    assert got.packed == ref.packed
    np.testing.assert_array_equal(got.scales, ref.scales)


def test_quantize_ties_and_clipping():
    # mean |w| = 1, so w / scale hits 0.5 and 1.5 exactly
    w = np.array([[0.5, -0.5, 1.5, -1.5, 2.0, 0.0, 1.0, 1.0]], np.float32)
    got = tn.quantize(w, device="cuda")
    assert got.scales == np.float32(1.0)
    assert tn.unpack(got.packed).tolist() == [[0, 0, 1, -1, 1, 0, 1, 1]]


def test_float64_weights_a_hair_from_half_a_scale(weights_a_hair_from_half_a_scale):
    w, s, trits = weights_a_hair_from_half_a_scale
    got = tn.quantize(w, axis=-1, device="cuda")
    np.testing.assert_array_equal(got.scales, np.full((3, 1), s))
    np.testing.assert_array_equal(tn.unpack(got.packed), trits)


def test_quantize_stays_on_device():
    w = cuda.to_device(np.linspace(-2, 2, 40, dtype=np.float32).reshape(2, 20))
    t = tn.quantize(w, axis=-1)
    assert t.packed.device == "cuda"
    ref = tn.quantize(w.copy_to_host(), axis=-1, device="numpy")
    assert t.packed == ref.packed


@pytest.mark.parametrize("axis", [-1, None])
def test_quantize_activations_matches_reference(axis):
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((3, 50)) * 10).astype(np.float32)
    x[1, :7] = [127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5]  # .5 ties once 127 / amax = 1
    x[1, 7:] = np.clip(x[1, 7:], -100, 100)
    q_ref, s_ref = tn.quantize_activations(x, axis=axis, device="numpy")
    q, s = tn.quantize_activations(x, axis=axis, device="cuda")
    np.testing.assert_array_equal(q, q_ref)
    np.testing.assert_array_equal(s, s_ref)
    assert q[1, :7].tolist() == [127, 0, 2, 2, 0, -2, -2]


def test_non_finite_inputs_raise():
    w = np.ones((2, 6), np.float32)
    w[1, 4] = np.inf
    with pytest.raises(ValueError, match=r"w\[1, 4\] = inf is not finite"):
        tn.quantize(w, device="cuda")
    w[1, 4] = np.nan
    with pytest.raises(ValueError, match=r"x\[1, 4\] = nan is not finite"):
        tn.quantize_activations(w, device="cuda")
