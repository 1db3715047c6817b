"""The "base3" GEMV (tritnum/_kernels/cpu/base3_gemv.py): 5 trits a byte, never unpacked.

int8 activations: the exact group sums rescaled in the int8 order, so the same bits as
the NumPy reference backend, as the same weights in "2bit", and as the integer GEMM a
row takes in a batch of more than 16 (batch invariance). Float activations: within
float32 rounding of a float64 oracle.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_group_sizes import rescaled

import tritnum as tn
from tritnum._kernels.cpu import _parallel, base3_gemv, small_linear
from tritnum._kernels.cpu import matmul as cpu_matmul

# (in, out, group size): rows not of whole bytes (n % 5), groups straddling bytes
SHAPES = [(13, 3, None), (1000, 7, None), (960, 5, 32), (960, 6, 960), (1280, 9, 64),
          (4096, 8, 128), (640, 4, 160)]


def _weights(n, out, group_size, seed):
    w = np.random.default_rng(seed).standard_normal((out, n)).astype(np.float32)
    return tn.quantize(w, format="base3", group_size=group_size)


def _x(rows, n, seed):
    return np.random.default_rng(seed).standard_normal((rows, n)).astype(np.float32)


@pytest.fixture
def no_other_route(monkeypatch):
    """The other routes (decode for BLAS, transcode to 2bit, the integer GEMM) fail."""
    def other(*args, **kwargs):
        raise AssertionError("a call the base3 GEMV takes went another route")
    monkeypatch.setattr(cpu_matmul, "_gemm", other)
    monkeypatch.setattr(cpu_matmul, "gemm_int8", other)
    monkeypatch.setattr(cpu_matmul, "_two_bit", other)


@pytest.fixture
def gemv_only(no_other_route, monkeypatch):
    """Every call takes the GEMV, small weights (kept as they are) and short groups too."""
    monkeypatch.setattr(cpu_matmul, "_base3_gemv_pays", lambda *args: True)
    monkeypatch.setattr(small_linear, "KEEP_2BIT_TRITS", 0)
    monkeypatch.setattr(small_linear, "SMALL_WEIGHTS", 0)  # no one-call route of small layers


# calls the GEMV takes (a row or two, long groups, weights past BASE3_GEMV_TRITS)
ROUTED = [(4096, 1100, None, "int8", 1), (4100, 1100, None, "float", 2),
          (8192, 600, 4096, "float", 1)]


@pytest.mark.parametrize(("n", "out", "group_size", "activations", "rows"), ROUTED)
def test_the_gemv_takes_a_row_or_two_of_long_groups(n, out, group_size, activations, rows,
                                                    no_other_route):
    w = _weights(n, out, group_size, n)
    assert w.shape[0] * w.shape[1] > cpu_matmul.BASE3_GEMV_TRITS
    x = _x(rows, n, rows)
    y = tn.linear(x, w, activations=activations, device="cpu")
    reference = tn.linear(x, w, activations=activations, device="numpy")
    if activations == "int8":
        assert np.array_equal(y, reference)
    else:  # float32 sums of n products: rounding grows as sqrt(n) eps times the sum of
        # their magnitudes (Higham's statistical bound; measured errors are under 1e-3 of
        # it; n eps, the worst case, would pass a flipped trit); an absolute 1e-5 failed
        # outputs near 0
        dense = w.dequantize(device="numpy").astype(np.float64)
        x64 = x.astype(np.float64)
        bound = np.sqrt(n) * np.finfo(np.float32).eps * (np.abs(x64) @ np.abs(dense).T)
        assert (np.abs(y - x64 @ dense.T) <= bound).all()
        assert (np.abs(reference - x64 @ dense.T) <= bound).all()


@pytest.mark.parametrize(("n", "out", "group_size"), SHAPES)
def test_kernel_any_group_gives_the_rescale_bits(n, out, group_size):
    """The kernel itself, on groups the route sends elsewhere (short, straddling bytes)."""
    rng = np.random.default_rng(n)
    g = n if group_size is None else group_size
    trits = rng.integers(-1, 2, (out, n), dtype=np.int8)
    scales = (rng.random((out, n // g)) * 3 + 0.01).astype(np.float32)
    q = rng.integers(-128, 128, (3, n), dtype=np.int8)
    xscale = (rng.random(3) + 0.1).astype(np.float32)
    y = base3_gemv.gemv_base3(q, xscale, tn.pack(trits, "base3").data, n, scales)
    np.testing.assert_array_equal(y, rescaled(q, xscale, trits, scales))


@pytest.mark.parametrize(("n", "out", "group_size"), SHAPES)
@pytest.mark.parametrize("rows", [1, 3, 16])
def test_int8_bits_equal_the_reference_and_2bit(n, out, group_size, rows):
    w3 = _weights(n, out, group_size, n + out)
    w2 = tn.TernaryTensor(tn.pack(tn.unpack(w3.packed), "2bit"), w3.scales,
                          group_size=group_size)
    assert np.array_equal(tn.unpack(w2.packed), tn.unpack(w3.packed))
    x = _x(rows, n, rows)
    y = tn.linear(x, w3, activations="int8", device="cpu")
    assert np.array_equal(y, tn.linear(x, w3, activations="int8", device="numpy"))
    assert np.array_equal(y, tn.linear(x, w2, activations="int8", device="cpu"))


@pytest.mark.parametrize("size", [1024, 1283])
def test_int8_rescale_order(size, gemv_only):
    """Group products 5 * 2**60, 1, -5 * 2**60: the slot order keeps the 1, a sequence loses it.

    In slots (group g into slot g % 8, then halves) the two large products cancel before
    the 1 is added; added one after the other, 5 * 2**60 + 1 rounds to 5 * 2**60 in float64.
    """
    trits = np.zeros((1, 3 * size), np.int8)
    trits[0, :5], trits[0, size], trits[0, 2 * size:2 * size + 5] = 1, 1, -1
    scales = np.array([[2.0 ** 60, 1.0, 2.0 ** 60]], np.float32)
    w = tn.TernaryTensor(tn.pack(trits, "base3"), scales, size)
    q = np.ones((1, 3 * size), np.int8)
    xscale = np.array([0.5], np.float32)
    expected = rescaled(q, xscale, trits, scales)
    assert expected.tolist() == [[0.5]]
    np.testing.assert_array_equal(tn.linear(q, w, x_scale=xscale, device="cpu"), expected)


@pytest.mark.parametrize(("n", "out", "group_size"), SHAPES)
def test_int8_row_bits_do_not_depend_on_the_batch(n, out, group_size):
    w = _weights(n, out, group_size, 7)
    x = _x(40, n, 8)
    batch = tn.linear(x, w, activations="int8")  # more than 16 rows: the integer GEMM
    for r in (0, 17, 39):
        assert np.array_equal(tn.linear(x[r], w, activations="int8"), batch[r])


@pytest.mark.parametrize(("n", "out", "group_size"), SHAPES)
@pytest.mark.parametrize("rows", [1, 5])
def test_float_within_float32_rounding_of_float64(n, out, group_size, rows):
    w = _weights(n, out, group_size, 3)
    x = _x(rows, n, 4)
    y = tn.linear(x, w, activations="float", device="cpu")
    dense = tn.dequantize(w).astype(np.float64)  # trit * scale: exact
    expected = x.astype(np.float64) @ dense.T
    bound = np.abs(x).astype(np.float64) @ np.abs(dense).T
    assert np.all(np.abs(y - expected) <= 4e-7 * n ** 0.5 * bound + 1e-30)


def test_rows_longer_than_a_dot_run(gemv_only):
    """A digit plane longer than ``RUN`` bytes is summed run by run: still exact."""
    n = 5 * base3_gemv.RUN + 7
    w = _weights(n, 2, None, 11)
    q = np.full((1, n), 127, np.int8)  # the largest sums
    assert np.array_equal(tn.linear(q, w, x_scale=np.ones(1, np.float32), device="cpu"),
                          tn.linear(q, w, x_scale=np.ones(1, np.float32), device="numpy"))


@pytest.mark.parametrize("activations", ["int8", "float"])
def test_two_threads_give_the_same_bits(gemv_only, monkeypatch, activations):
    w = _weights(2048, 64, None, 5)
    x = _x(2, 2048, 6)
    with tn.limit_threads(1):
        alone = tn.linear(x, w, activations=activations)
    monkeypatch.setattr(_parallel, "MIN_PARALLEL_BYTES", 0)  # share even this small call
    with tn.limit_threads(2):
        assert np.array_equal(tn.linear(x, w, activations=activations), alone)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 300), st.integers(1, 9), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_any_shape_int8_equals_the_reference(n, out, rows, seed):
    w = _weights(n, out, None, seed)
    x = _x(rows, n, seed + 1)
    assert np.array_equal(tn.linear(x, w, activations="int8", device="cpu"),
                          tn.linear(x, w, activations="int8", device="numpy"))


def test_planes_lay_out_each_digit_contiguously():
    x = np.arange(1, 13, dtype=np.float32)[None]  # 12 values: 3 bytes, 3 zeros of padding
    assert base3_gemv.planes(x, 3).tolist() == [[1, 6, 11, 2, 7, 12, 3, 8, 0, 4, 9, 0,
                                                 5, 10, 0]]
