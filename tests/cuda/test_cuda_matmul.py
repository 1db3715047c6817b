"""The CUDA ternary matmul kernels against the NumPy reference, on tiny shapes.

Under the simulator the kernels read their module constants when they run, so
:func:`small_launch` shrinks the GEMV block and the GEMM tile: shapes of a few
dozen elements then cover several tiles, partial tiles and strided threads at
a few hundred simulated threads per launch. A few tests keep the real sizes.
"""

from __future__ import annotations

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from numba import cuda

import tritnum as tn
from tritnum._dispatch import is_cuda_array
from tritnum._kernels.cuda import gemv
from tritnum._kernels.cuda import matmul as kernels
from tritnum.testing import ternary_tensors

try:  # as tests/cuda/conftest.py
    from numba.cuda.core import config
except ImportError:  # older numba-cuda
    from numba.core import config

SIMULATOR = bool(getattr(config, "ENABLE_CUDASIM", 0))
FORMATS = ("2bit", "base3", "bitplane")
# (m, out, n, group_size): 1x1, in = 1, primes, groups that split packed units and tiles
SHAPES = [
    (1, 1, 1, 1),
    (3, 2, 1, 1),
    (1, 7, 13, 13),
    (2, 5, 70, 7),
    (3, 4, 12, 1),
    (4, 3, 67, 67),
    (5, 3, 11, 11),
    (11, 7, 29, 29),
    (9, 6, 30, 3),
]
GEMV_SHAPES = [s for s in SHAPES if s[0] <= kernels.GEMV_MAX_ROWS]
GEMM_SHAPES = [s for s in SHAPES if s[0] > kernels.GEMV_MAX_ROWS]


@pytest.fixture(autouse=True)
def small_launch(monkeypatch, request):
    """8-thread GEMV blocks, 4x4 GEMM tiles and two-warp word GEMV blocks under the
    simulator, except in test_real_*."""
    if SIMULATOR and not request.node.name.startswith("test_real_"):
        monkeypatch.setattr(kernels, "GEMV_THREADS", 8)
        monkeypatch.setattr(kernels, "TILE", 4)
        monkeypatch.setattr(gemv, "WARPS", 2)
        monkeypatch.setattr(gemv, "THREADS", 64)


def weights(out, n, fmt, mode, group_size, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((out, n)).astype(np.float32)
    kwargs = {"tensor": {}, "row": {"axis": -1}, "group": {"group_size": group_size}}[mode]
    return tn.quantize(w, format=fmt, device="numpy", **kwargs)


def float64_math(x, w, bias):
    y = np.asarray(x, np.float64) @ tn.dequantize(w).astype(np.float64).T
    return y if bias is None else y + bias


def relative_error(y, ref):
    return np.linalg.norm(y - ref) / max(np.linalg.norm(ref), 1e-30)


def check_float(x, w, bias):
    got = tn.linear(x, w, bias, device="cuda")
    ref = tn.linear(x, w, bias, device="numpy")
    assert got.shape == ref.shape and got.dtype == np.float32
    assert relative_error(got, float64_math(x, w, bias)) <= 1e-5
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


def exact_int8(q, w):
    """int8 activations with unit scales: the outputs are the exact int64 sums."""
    got = tn.linear(q, w, x_scale=1.0, device="cuda")
    trits = tn.unpack(w.packed).astype(np.int64)
    sums = q.astype(np.int64) @ trits.T
    np.testing.assert_array_equal(got, sums.astype(np.float32))
    assert np.abs(sums).max(initial=0) < 2**24  # the float32 output holds them exactly


def cases(modes):
    """(shape, mode) pairs; modes other than "tensor" only where they differ from it."""
    return [pytest.param(shape, mode, id=f"{'x'.join(map(str, shape))}-{mode}")
            for shape in SHAPES for mode in modes
            if mode == "tensor" or (shape[1] > 1 and (mode != "group" or shape[3] < shape[2]))]


@pytest.mark.parametrize(("shape", "mode"), cases(["tensor", "row", "group"]))
@pytest.mark.parametrize("fmt", FORMATS)
def test_float_matches_float64_math(fmt, shape, mode):
    m, out, n, gs = shape
    rng = np.random.default_rng(m * 100 + n)
    x = rng.standard_normal((m, n)).astype(np.float32)
    bias = rng.standard_normal(out).astype(np.float32) if mode != "row" else None
    check_float(x, weights(out, n, fmt, mode, gs), bias)


@pytest.mark.parametrize(("shape", "mode"), cases(["tensor", "group"]))
@pytest.mark.parametrize("fmt", FORMATS)
def test_int8_sums_are_exact(fmt, shape, mode):
    m, out, n, gs = shape
    packed = weights(out, n, fmt, "tensor", gs).packed
    w = (tn.TernaryTensor(packed, np.float32(1.0)) if mode == "tensor" else
         tn.TernaryTensor(packed, np.ones((out, n // gs), np.float32), gs))
    q = np.random.default_rng(n).integers(-128, 128, (m, n), dtype=np.int8)
    q[0, 0] = -128
    exact_int8(q, w)


@pytest.mark.parametrize("shape", [SHAPES[3], SHAPES[7]],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("fmt", FORMATS)
def test_int8_activations_match_reference(fmt, shape):
    m, out, n, gs = shape
    rng = np.random.default_rng(5)
    x = rng.standard_normal((m, n)).astype(np.float32) * 3
    bias = rng.standard_normal(out).astype(np.float32)
    w = weights(out, n, fmt, "group", gs)
    got = tn.linear(x, w, bias, activations="int8", device="cuda")
    ref = tn.linear(x, w, bias, activations="int8", device="numpy")
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6 * np.abs(ref).max())
    xs = np.linspace(0.01, 0.2, m, dtype=np.float32)  # int8 x with its own scales
    q = rng.integers(-128, 128, (m, n), dtype=np.int8)
    got = tn.linear(q, w, bias, x_scale=xs, device="cuda")
    ref = tn.linear(q, w, bias, x_scale=xs, device="numpy")
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6 * np.abs(ref).max())


@pytest.mark.parametrize("fmt", FORMATS)
def test_gemm_kernel_on_few_rows(fmt, monkeypatch):
    monkeypatch.setattr(kernels, "GEMV_MAX_ROWS", 0)  # every row count takes the GEMM kernel
    for m, out, n, gs in GEMV_SHAPES:
        rng = np.random.default_rng(n)
        x = rng.standard_normal((m, n)).astype(np.float32)
        check_float(x, weights(out, n, fmt, "group", gs), rng.standard_normal(out))
        exact_int8(rng.integers(-128, 128, (m, n), dtype=np.int8),
                   tn.TernaryTensor(weights(out, n, fmt, "tensor", gs).packed, np.float32(1)))


@pytest.mark.parametrize("fmt", FORMATS)
def test_grid_stride_loops(fmt, monkeypatch):
    monkeypatch.setattr(kernels, "MAX_BLOCKS", 2)  # fewer blocks than rows or tiles
    rng = np.random.default_rng(8)
    w = weights(9, 22, fmt, "group", 11)
    for m in (2, 13):
        check_float(rng.standard_normal((m, 22)).astype(np.float32), w, None)


@pytest.mark.parametrize("fmt", FORMATS)
def test_real_block_and_tile_sizes(fmt):
    rng = np.random.default_rng(9)
    w = weights(3, 37, fmt, "group", 37)
    check_float(rng.standard_normal((1, 37)).astype(np.float32), w, np.ones(3))  # GEMV
    exact_int8(rng.integers(-128, 128, (17, 37), dtype=np.int8),  # GEMM: two row tiles
               tn.TernaryTensor(w.packed, np.float32(1.0)))


@pytest.mark.parametrize("lead", [(), (1,), (2, 3), (1, 1)])
def test_vector_and_3d_x(lead):
    rng = np.random.default_rng(10)
    w = weights(4, 9, "base3", "row", None)
    x = rng.standard_normal((*lead, 9)).astype(np.float32)
    got = tn.linear(x, w, device="cuda")
    assert got.shape == (*lead, 4)
    np.testing.assert_allclose(got, tn.linear(x, w, device="numpy"), rtol=1e-5, atol=1e-6)
    got = tn.linear(x, w, activations="int8", device="cuda")
    ref = tn.linear(x, w, activations="int8", device="numpy")
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


# linear() reads x.shape[-1]; the simulator's device-array shapes refuse negative indices
@pytest.mark.parametrize("m", [1, 6])
def test_device_x_stays_on_device(m):
    rng = np.random.default_rng(11)
    w = weights(5, 17, "2bit", "group", 17)
    x = rng.standard_normal((m, 17)).astype(np.float32)
    for activations in ("float", "int8"):
        got = tn.linear(cuda.to_device(x), w, activations=activations)
        assert is_cuda_array(got) and tuple(got.shape) == (m, 5)
        ref = tn.linear(x, w, activations=activations, device="numpy")
        np.testing.assert_allclose(got.copy_to_host(), ref, rtol=1e-5, atol=1e-5)
    got = cuda.to_device(x) @ w.T
    assert is_cuda_array(got)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
@pytest.mark.parametrize("m", [2, 7])
def test_non_finite_x_propagates(m):
    w = weights(4, 10, "bitplane", "tensor", None)
    x = np.ones((m, 10), np.float32)
    x[0, 3] = np.nan
    x[1, 5] = np.inf
    got = tn.linear(x, w, device="cuda")
    ref = tn.linear(x, w, device="numpy")
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(ref))
    assert np.isnan(got[0]).all()


@st.composite
def problems(draw):
    """A TernaryTensor (out <= 6, n <= 40, any scales and format) and x, sometimes strided."""
    w = draw(ternary_tensors(shape=st.tuples(st.integers(1, 6), st.integers(1, 40))))
    m = draw(st.integers(1, 9))
    step = draw(st.sampled_from([1, 2]))
    wide = draw(hnp.arrays(np.float32, (m, w.shape[1] * step),
                           elements=st.floats(-4, 4, width=32)))
    return w, wide[:, ::step], draw(st.booleans())


def _bias_dominates():
    """Found on a GPU: output terms of 2e-3 beside a bias of -1, rounded to float32."""
    trits = np.zeros((5, 12), np.int8)
    trits[0, 0] = 1
    return (tn.TernaryTensor(tn.pack(trits), np.float32(1 / 60)),
            np.full((1, 12), 0.125, np.float32), True)


@given(problems())
@example(_bias_dominates())
def test_any_shape_matches_reference(problem):
    w, x, with_bias = problem
    bias = np.linspace(-1, 1, w.shape[0], dtype=np.float32) if with_bias else None
    dense = tn.dequantize(w).astype(np.float64)
    # float32 error bound: relative to the sizes of the terms, not of their (cancelling) sum,
    # bias included (the output is rounded to float32 after the bias is added: found on a GPU
    # with terms of 2e-3 beside a bias of 1)
    terms = np.abs(x.astype(np.float64)) @ np.abs(dense).T
    if bias is not None:
        terms = terms + np.abs(bias)
    bound = np.linalg.norm(terms) + 1e-30
    got = tn.linear(x, w, bias, device="cuda")
    assert np.linalg.norm(got - float64_math(x, w, bias)) <= 1e-5 * bound
    got = tn.linear(x, w, bias, activations="int8", device="cuda")
    ref = tn.linear(x, w, bias, activations="int8", device="numpy")
    assert np.linalg.norm(got - ref) <= 1e-6 * (bound + np.linalg.norm(ref))


@pytest.fixture
def launched(monkeypatch):
    """The names of the kernels :mod:`..cuda.matmul` launches through ``_launch.launch``."""
    names = []
    real = kernels.launch

    def spy(kernel, *args):
        names.append(kernel.py_func.__qualname__.split(".<locals>")[0])
        return real(kernel, *args)

    monkeypatch.setattr(kernels, "launch", spy)
    return names


@pytest.mark.parametrize("act", ["float", "int8"])
@pytest.mark.parametrize("mode", ["tensor", "row"])
@pytest.mark.parametrize(("out", "n"), [(1, 64), (5, 128), (3, 320), (9, 64)])
def test_2bit_word_gemv(out, n, mode, act, launched):
    """One row of x on "2bit" weights with one scale per row: the warp-per-row GEMV."""
    rng = np.random.default_rng(out * n)
    w = weights(out, n, "2bit", mode, None)
    x = rng.standard_normal((1, n)).astype(np.float32)
    bias = rng.standard_normal(out).astype(np.float32) if mode == "tensor" else None
    if act == "float":
        check_float(x, w, bias)
        check_float(x[0], w, bias)  # a vector x is one row too
        assert "_float_kernel" in launched
    else:
        exact_int8(rng.integers(-128, 128, (1, n), dtype=np.int8),
                   tn.TernaryTensor(w.packed, np.float32(1.0)))
        got = tn.linear(x, w, bias, activations="int8", device="cuda")
        np.testing.assert_allclose(
            got, tn.linear(x, w, bias, activations="int8", device="numpy"), rtol=1e-6, atol=1e-6)
        assert launched.count("_int8_kernel") == 2 and "quantize_act_permuted" in launched


def test_word_gemv_needs_aligned_float_x(launched):
    """A float x that does not start on 16 bytes (a view one float in) takes the general GEMV."""
    w = weights(3, 64, "2bit", "row", None)
    wide = np.random.default_rng(13).standard_normal((1, 65)).astype(np.float32)
    x = cuda.to_device(wide)[:, 1:]
    got = tn.linear(x, w, device="cuda").copy_to_host()
    np.testing.assert_allclose(got, tn.linear(wide[:, 1:], w, device="numpy"), rtol=1e-5,
                               atol=1e-5)
    assert "_float_kernel" not in launched
    tn.linear(wide[:, 1:], w, device="cuda")  # copied to the GPU: aligned
    assert "_float_kernel" in launched


@pytest.mark.parametrize("n", [16, 48, 80])
def test_word_gemv_needs_whole_128_bit_chunks(n, launched):
    """n not a multiple of 64: the general GEMV, still exact."""
    w = weights(3, n, "2bit", "row", None)
    exact_int8(np.random.default_rng(n).integers(-128, 128, (1, n), dtype=np.int8),
               tn.TernaryTensor(w.packed, np.float32(1.0)))
    assert "_int8_kernel" not in launched


@pytest.mark.parametrize(("shape", "permute"), [((1, 64), True), ((3, 32), True),
                                                 ((3, 32), False), ((2, 7), False)])
def test_fused_quantizer_matches_quantize_activations(shape, permute):
    """Quants, row sums and scales of the fused kernel; the GEMV's byte order when permuted
    (whole 16-value chunks only, as the word GEMV takes them)."""
    rng = np.random.default_rng(shape[1])
    x = (rng.standard_normal(shape) * 5).astype(np.float32)
    q, qsum, xs = kernels._quantized(cuda.to_device(x), None, permute, False)
    ref_q, ref_scale = tn.quantize_activations(x, device="numpy")
    got = q.copy_to_host()
    if permute:
        j = np.arange(shape[1])
        got = got[:, (j & ~15) | ((j & 3) << 2) | ((j >> 2) & 3)]
    np.testing.assert_array_equal(got, ref_q)
    np.testing.assert_array_equal(qsum.copy_to_host(), ref_q.astype(np.int64).sum(1))
    np.testing.assert_array_equal(xs.copy_to_host(), ref_scale)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
@pytest.mark.parametrize("n", [64, 30])
def test_int8_nan_raises_or_gives_nan_rows(n):
    """NaN or infinity in x: ValueError by default; NaN rows with check_finite=False."""
    w = weights(4, n, "2bit", "row", None)
    x = np.ones((3, n), np.float32)
    x[1, 5] = np.inf
    with pytest.raises(ValueError, match=r"x\[1, 5\] = inf"):
        tn.linear(x, w, activations="int8", device="cuda")
    with pytest.raises(ValueError, match="is not finite"):
        tn.linear(x[1], w, activations="int8", device="cuda")
    got = tn.linear(x, w, activations="int8", device="cuda", check_finite=False)
    assert np.isnan(got[1]).all() and np.isfinite(got[[0, 2]]).all()
    got = tn.linear(x[1], w, activations="int8", device="cuda", check_finite=False)
    assert np.isnan(got).all()


@pytest.mark.parametrize("m", [1, 2])
def test_out_on_device_and_steady_state_allocates_nothing(m, monkeypatch):
    """With out=, a warm int8 or float call on device data allocates and copies nothing."""
    rng = np.random.default_rng(12)
    layer = tn.BitLinear(rng.standard_normal((6, 64)), bias=rng.standard_normal(6))
    x = cuda.to_device(rng.standard_normal((m, 64)).astype(np.float32))
    out = cuda.device_array((m, 6), np.float32)
    ref = tn.linear(x.copy_to_host(), layer.weight, layer.bias, activations="int8",
                    device="numpy")
    assert layer(x, out=out, check_finite=False) is out  # warm: copies made once
    calls = []
    for name in ("device_array", "to_device", "device_array_like"):
        monkeypatch.setattr(cuda, name, lambda *a, _n=name, **k: calls.append(_n))
    assert layer(x, out=out, check_finite=False) is out
    assert tn.linear(x, layer.weight, activations="float", out=out) is out
    assert calls == []
    monkeypatch.undo()
    assert layer(x, out=out) is out
    np.testing.assert_allclose(out.copy_to_host(), ref, rtol=1e-6, atol=1e-6)


def test_weights_copied_to_the_gpu_once():
    w = weights(3, 64, "2bit", "row", None)
    x = np.ones((1, 64), np.float32)
    tn.linear(x, w, device="cuda")
    cached = dict(w._cache)
    assert len(cached) == 2  # the host scale rows, the GPU layouts
    tn.linear(x, w, device="cuda")
    assert w._cache.keys() == cached.keys()
    assert all(w._cache[k] is v for k, v in cached.items())
    host = np.zeros((1, 3), np.float32)
    assert tn.linear(x, w, device="numpy", out=host) is host
    np.testing.assert_array_equal(host, tn.linear(x, w, device="numpy"))
