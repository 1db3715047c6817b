"""Ternary matmul on every CPU-side backend against float64 math and exact int64 sums."""

import os

import numpy as np
import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numba import njit

import tritnum as tn
from tritnum import _isa as isa
from tritnum._interop import for_device, to_host
from tritnum._kernels.cpu import matmul as cpu_matmul
from tritnum._kernels.cpu import small_linear
from tritnum._kernels.cpu._llvm import dot_int8, gemv, gemv_target
from tritnum.testing import ternary_tensors

# sizes around the 128- and 256-trit SIMD blocks and 4/5-trit units, and primes
SIDES = st.sampled_from([1, 2, 3, 4, 5, 7, 13, 31, 64, 127, 128, 129, 131, 255, 256, 257, 300,
                         511, 513, 521])


def _dot_runner(dot, decode):
    @njit
    def run(w, x, q, out, blocks):
        decode(w, 3, out, 2, blocks)
        return dot(w, 3, x, 5, blocks), dot(w, 3, q, 5, blocks)

    return run


# each level's intrinsics in a runner, compiled once: the sizes are arguments, so that the
# examples of a test vary only data (every level is tested where the CPU has it)
DOTS = {level: _dot_runner(gemv.make_dot(t), gemv.make_decode(t))
        for level, t in gemv_target.TARGETS.items()}


def needs(level):
    if level not in isa.available():
        pytest.skip(f"this CPU lacks {level}: {', '.join(sorted(isa.REQUIRES[level]))}")


LEADS = hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=20)


def weights():
    return ternary_tensors(shape=st.tuples(st.integers(1, 40), SIDES))


def activations(n, lead=LEADS):
    return lead.flatmap(lambda s: hnp.arrays(
        st.sampled_from([np.float16, np.float32, np.float64]), (*s, n),
        elements={"min_value": -4, "max_value": 4}))  # from_dtype: each dtype's own width


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_activations_hold_values_of_their_own_width(dtype):
    find(activations(8), lambda x: x.dtype == dtype and (x.astype(np.float16) != x).any(),
         settings=settings(database=None, max_examples=2000))


def dense64(w):
    return w.dequantize().astype(np.float64)


def assert_rel_close(y, ref, rtol, atol=0.0):
    """``||y - ref|| <= rtol * ||ref|| + atol`` (exactly zero when ref is and atol is 0)."""
    assert y.shape == ref.shape
    assert np.linalg.norm(y - ref) <= rtol * np.linalg.norm(ref) + atol


def trits_of(w):
    return tn.unpack(w.packed).astype(np.int64)


def group_scales(w):
    """Scales as (out, groups), and the group size."""
    out, n = w.shape
    if w.group_size is None:
        return np.full((out, 1), w.scales, np.float64), n
    return w.scales.reshape(out, -1).astype(np.float64), w.group_size


def int8_formula(q, xscale, w):
    """W1.58A8 from the formula: exact int64 group sums, rescaled in float64."""
    scales, g = group_scales(w)
    t = trits_of(w)
    rows, n = q.shape
    sums = np.einsum("rgj,ogj->rog", q.astype(np.int64).reshape(rows, n // g, g),
                     t.reshape(t.shape[0], n // g, g))
    return (sums * scales).sum(-1) * xscale.astype(np.float64)[:, None]


@given(w=weights(), data=st.data())
def test_float_path_matches_float64(w, device, data):
    x = data.draw(activations(w.shape[1]))
    y = tn.linear(x, w, device=device)
    assert y.dtype == np.float32 and y.shape == (*x.shape[:-1], w.shape[0])
    ref = x.astype(np.float32).astype(np.float64) @ dense64(w).T
    # float32 spaces its subnormals 2**-149 apart: products below that underflow
    subnormal = w.shape[1] * 2.0**-149 * np.sqrt(max(y.size, 1))
    assert_rel_close(y, ref, 1e-5, subnormal)
    np.testing.assert_array_equal(x @ w.T, tn.linear(x, w))


@given(w=weights(), data=st.data())
def test_int8_path_matches_formula(w, device, data):
    x = data.draw(activations(w.shape[1], hnp.array_shapes(min_dims=1, max_dims=1, max_side=20)))
    y = tn.linear(x, w, activations="int8", device=device)
    q, scale = tn.quantize_activations(x, device="numpy")
    assert_rel_close(y, int8_formula(q, scale, w), 1e-6)


@pytest.mark.parametrize("rows", [1, 3, cpu_matmul.GEMV_MAX_ROWS + 1])  # GEMV and GEMM paths
@given(n=SIDES, fmt=st.sampled_from(tn.FORMATS), seed=st.integers(0, 2**32 - 1))
def test_int8_integer_sums_are_exact(rows, n, fmt, device, seed):
    """Unit scales and int8 x with x_scale=1: the output is the exact integer sum."""
    rng = np.random.default_rng(seed)
    trits = rng.integers(-1, 2, (9, n), dtype=np.int8)
    q = rng.integers(-128, 128, (rows, n), dtype=np.int8)
    w = tn.TernaryTensor(tn.pack(trits, fmt), np.float32(1.0))
    y = tn.linear(q, w, x_scale=1.0, device=device)
    np.testing.assert_array_equal(y, q.astype(np.int64) @ trits.T.astype(np.int64))


def test_int8_extreme_sums_are_exact(device):
    """Every product at its largest, 2**17 of them: int32 and float32 sums still exact."""
    n = 1 << 17
    trits = np.ones((2, n), np.int8)
    trits[1] = -1
    w = tn.TernaryTensor(tn.pack(trits), np.float32(1.0))
    for rows in (1, cpu_matmul.GEMV_MAX_ROWS + 1):
        q = np.full((rows, n), -128, np.int8)
        y = tn.linear(q, w, x_scale=np.float32(1.0), device=device)
        np.testing.assert_array_equal(y, np.tile([-128.0 * n, 128.0 * n], (rows, 1)))


@pytest.mark.parametrize("activation", ["float", "int8"])
def test_gemm_matches_gemv(device, activation):
    """The same rows through the GEMV path (one at a time) and the GEMM path."""
    rng = np.random.default_rng(7)
    w = tn.quantize(rng.standard_normal((70, 333)), group_size=111)
    x = rng.standard_normal((cpu_matmul.GEMV_MAX_ROWS + 5, 333)).astype(np.float32)
    together = tn.linear(x, w, activations=activation, device=device)
    apart = np.stack([tn.linear(r, w, activations=activation, device=device) for r in x])
    np.testing.assert_allclose(together, apart, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("group", [32, 320, 100])
@pytest.mark.parametrize("fmt", ["2bit", "base3"])
def test_float_gemm_with_scale_groups(group, fmt):
    """Tiles scaled per group before one sgemm (2bit groups in the GEMV layout, others unpacked)."""
    rng = np.random.default_rng(group)
    w = tn.quantize(rng.standard_normal((37, 1600)), group_size=group, format=fmt)
    x = rng.standard_normal((cpu_matmul.GEMV_MAX_ROWS + 4, 1600)).astype(np.float32)
    assert_rel_close(tn.linear(x, w, device="cpu"), x.astype(np.float64) @ dense64(w).T, 1e-6)


@pytest.mark.parametrize("activation", ["float", "int8"])
def test_threaded_gemv(activation):
    """A weight matrix large enough for the thread pool (> 1 MiB packed)."""
    rng = np.random.default_rng(3)
    w = tn.quantize(rng.standard_normal((2053, 2100)).astype(np.float32), axis=-1)
    x = rng.standard_normal(2100).astype(np.float32)
    y = tn.linear(x, w, activations=activation, device="cpu")
    ref = tn.linear(x, w, activations=activation, device="numpy")
    assert_rel_close(y, ref.astype(np.float64), 1e-6)


def test_bias_shapes_and_layouts(device):
    rng = np.random.default_rng(1)
    w = tn.quantize(rng.standard_normal((6, 10)).astype(np.float32), axis=-1)
    bias = rng.standard_normal(6)
    x = rng.standard_normal((4, 3, 20))[..., ::2]  # 3-D and non-contiguous
    x.flags.writeable = False
    y = tn.linear(x, w, bias, device=device)
    assert y.shape == (4, 3, 6)
    ref = x.astype(np.float32).astype(np.float64) @ dense64(w).T + bias.astype(np.float32)
    assert_rel_close(y, ref, 1e-5)
    assert tn.linear(x[0, 0], w, device=device).shape == (6,)
    assert tn.linear(np.zeros((0, 10)), w, bias, device=device).shape == (0, 6)
    empty = tn.quantize(np.zeros((3, 0)))
    np.testing.assert_array_equal(tn.linear(np.ones((2, 0)), empty, [1, 2, 3], device=device),
                                  [[1, 2, 3], [1, 2, 3]])


def test_zero_weights_give_exact_zeros(device):
    w = tn.TernaryTensor(tn.pack(np.zeros((3, 300), np.int8)), np.float32(2.0))
    x = np.random.default_rng(0).standard_normal((2, 300)).astype(np.float32)
    np.testing.assert_array_equal(tn.linear(x, w, device=device), np.zeros((2, 3)))


def test_nan_and_inf_propagate_on_the_float_path(device):
    w = tn.quantize(np.array([[1.0, 0.0, -1.0], [1.0, 1.0, 1.0]]))
    x = np.array([np.nan, 1.0, 1.0], np.float32)
    assert np.isnan(tn.linear(x, w, device=device)).all()
    y = tn.linear(np.array([np.inf, 0.0, 0.0]), w, device=device)
    assert np.isinf(y).all()


def test_nan_on_the_int8_path_names_the_position():
    w = tn.quantize(np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"x\[1, 2\] = nan"):
        tn.linear(np.array([[0.0, 1, 2], [0, 1, np.nan]]), w, activations="int8")


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_int8_nan_rows_without_the_check(device):
    """check_finite=False: a row holding NaN or infinity gives NaN outputs, the others stay."""
    w = tn.quantize(np.arange(12.0).reshape(3, 4) - 5)
    x = np.array([[1.0, 2, 3, 4], [0, np.inf, 1, 1], [4, 3, 2, 1]], np.float32)
    y = tn.linear(x, w, activations="int8", device=device, check_finite=False)
    assert np.isnan(y[1]).all()
    ref = tn.linear(x[[0, 2]], w, activations="int8", device=device)
    np.testing.assert_array_equal(y[[0, 2]], ref)


@pytest.mark.parametrize("dtype", [">f4", ">f8", ">f2"])
@pytest.mark.parametrize("activations", ["float", "int8", "q8_k"])
def test_big_endian_activations_give_the_native_result(device, activations, dtype):
    w = tn.quantize(np.random.default_rng(5).standard_normal((5, 512)), group_size=256)
    x = np.random.default_rng(6).standard_normal((3, 512)).astype(dtype)
    want = tn.linear(x.astype(x.dtype.newbyteorder("=")), w, activations=activations,
                     device=device)
    np.testing.assert_array_equal(tn.linear(x, w, activations=activations, device=device), want)


@pytest.mark.parametrize("activations", ["float", "int8", "q8_k"])
def test_out_receives_the_result(device, activations):
    w = tn.quantize(np.random.default_rng(3).standard_normal((3, 256)), group_size=256)
    x = np.random.default_rng(4).standard_normal((2, 2, 256)).astype(np.float32)
    out = for_device(np.full((2, 2, 3), np.nan, np.float32), device)  # on the GPU for CUDA
    got = tn.linear(x, w, activations=activations, device=device, out=out)
    assert got is out
    np.testing.assert_array_equal(to_host(out),
                                  tn.linear(x, w, activations=activations, device=device))
    for bad, error in [(for_device(np.zeros((2, 2, 4), np.float32), device),
                        tn.ShapeMismatchError),
                       (for_device(np.zeros((2, 2, 3)), device), TypeError),
                       (for_device(np.zeros((2, 2, 6), np.float32), device)[..., ::2],
                        ValueError)]:  # not contiguous
        with pytest.raises(error):
            tn.linear(x, w, device=device, out=bad)


@pytest.mark.parametrize("level", isa.LEVELS)
@given(blocks=st.integers(0, 6), seed=st.integers(0, 2**32 - 1))
def test_simd_dot_and_decode_match_numpy(level, blocks, seed):
    """The SIMD dot (the documented layout) and decoder (the trits' order) of every level."""
    needs(level)
    target = gemv_target.TARGETS[level]
    run = DOTS[level]
    size = target.block
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 3, (blocks, 4, size)).astype(np.uint8)  # block, code n, byte m
    w = np.zeros(size * blocks + 3, np.uint8)
    w[3:] = np.bitwise_or.reduce(codes << (2 * np.arange(4, dtype=np.uint8))[:, None],
                                 axis=1).reshape(-1)
    x = rng.standard_normal(4 * size * blocks + 5).astype(np.float32)
    q = rng.integers(-128, 128, 4 * size * blocks + 5).astype(np.int8)
    out = np.full(4 * size * blocks + 4, 7, np.float32)
    fsum, isum = run(w, x, q, out, blocks)
    flat = codes.reshape(-1).astype(np.int64)
    in_order = codes.transpose(0, 2, 1).reshape(-1).astype(np.int64)  # code n of byte m at 4m + n
    np.testing.assert_array_equal(out[2:-2], in_order - 1)  # the decoder: the trits in order
    assert (out[:2] == 7).all() and (out[-2:] == 7).all()  # nothing written outside
    assert isum == flat @ q[5:].astype(np.int64)
    np.testing.assert_allclose(fsum, (flat - 1) @ x[5:].astype(np.float64), rtol=1e-5,
                               atol=1e-4)


def _scaled_runner(scaled_dot):
    @njit
    def run(w, stride, x, q, blocks, segments, scales, xneg):
        return (scaled_dot(w, 1, stride, x, 2, blocks, segments, scales, 3, segments + 1,
                           xneg, 1),
                scaled_dot(w, 1, stride, q, 2, blocks, segments, scales, 3, segments + 1,
                           xneg, 1))

    return run


SCALED = {(level, rows, grouped): _scaled_runner(gemv.make_scaled_dot(t, rows, grouped))
          for level, t in gemv_target.TARGETS.items() for rows, grouped in
          ((1, False), (1, True), (gemv.SCALED_ROWS, False), (gemv.SCALED_ROWS, True))}


@pytest.mark.parametrize("rows,grouped", [(1, False), (1, True), (gemv.SCALED_ROWS, False),
                                          (gemv.SCALED_ROWS, True)])
@pytest.mark.parametrize("level", isa.LEVELS)
@given(blocks=st.integers(0, 3), segments=st.integers(0, 5), seed=st.integers(0, 2**32 - 1))
def test_scaled_dot_matches_numpy(level, rows, grouped, blocks, segments, seed):
    """Per weight row, sum_g scale_g * (dot_g - xsum_g) over runs of whole blocks."""
    needs(level)
    size = gemv_target.TARGETS[level].block
    run = SCALED[level, rows, grouped]
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 3, (rows, segments, blocks, 4, size)).astype(np.uint8)
    stride = size * blocks * segments + 2  # weight rows 2 bytes apart beyond their codes
    w = np.zeros(1 + rows * stride, np.uint8)
    for i in range(rows):
        w[1 + i * stride:1 + i * stride + size * blocks * segments] = np.bitwise_or.reduce(
            codes[i] << (2 * np.arange(4, dtype=np.uint8))[:, None], axis=2).reshape(-1)
    flat = codes.reshape(rows, segments, 4 * size * blocks).astype(np.int64)
    x = rng.standard_normal(flat[0].size + 2).astype(np.float32)
    q = rng.integers(-128, 128, flat[0].size + 2).astype(np.int8)
    scales = rng.uniform(0.1, 2, 3 + rows * (segments + 1)).astype(np.float32)
    xneg = rng.integers(-500, 500, segments + 1).astype(np.int32)
    fsum, isum = (np.atleast_1d(np.array(v))
                  for v in run(w, stride, x, q, blocks, segments, scales, xneg))
    s64 = scales[3:].reshape(rows, segments + 1)[:, :segments].astype(np.float64)
    exact = (flat * q[2:].reshape(flat.shape[1:])).sum(axis=2) + xneg[1:]  # integer sums
    want = (s64 * exact).sum(axis=1)
    if grouped:  # float32 sums of exact lanes: a rounding per product, add and lane level
        magnitude = (flat * np.abs(q[2:].reshape(flat.shape[1:]))).sum(axis=2) + abs(xneg[1:])
        bound = (segments + 8) * 2.0**-24 * (s64 * magnitude).sum(axis=1)
        assert (np.abs(isum - want) <= bound).all()
        assert np.abs(isum - want).max(initial=0) <= 1e-3 * np.abs(want).max(initial=0)
    else:
        np.testing.assert_allclose(isum, want, rtol=1e-12, atol=1e-9)
    fdot = ((flat - 1) * x[2:].reshape(flat.shape[1:]).astype(np.float64)).sum(axis=2)
    np.testing.assert_allclose(fsum, (s64 * fdot).sum(axis=1), rtol=1e-5, atol=1e-3)


def test_the_kernels_use_the_best_level_the_cpu_has():
    assert isa.ISA == (os.environ.get("TRITNUM_ISA") or isa.available()[-1])
    assert gemv_target.BLOCK_BYTES == gemv_target.TARGETS[isa.ISA].block


@pytest.mark.parametrize("n,segment", [(1, 1), (13, 4), (300, 75), (256, 16), (520, 130)])
def test_layout_pairs_each_code_with_its_element(n, segment):
    """Position 4Bk + Bc + m of a segment holds element 4 * (Bk + m) + c (B bytes a block)."""
    size = gemv_target.BLOCK_BYTES
    idx = cpu_matmul.layout(n, segment)
    per_segment = 4 * size * -(-segment // size)
    assert idx.size % per_segment == 0
    for s in range(idx.size // per_segment):
        part = idx[s * per_segment:(s + 1) * per_segment].reshape(-1, 4, size)
        for k, c, m in np.ndindex(part.shape):
            element = s * 4 * segment + 4 * (size * k + m) + c
            inside = size * k + m < segment and element < n
            assert part[k, c, m] == (element if inside else n)


@pytest.mark.parametrize("n,segment", [(256, 64), (512, 32), (256, 16), (300, 75)])
def test_laid_out_rows_follow_the_layout(n, segment):
    x = np.random.default_rng(0).standard_normal((3, n)).astype(np.float32)
    padded = np.concatenate([x, np.zeros((3, 1), np.float32)], axis=1)
    expected = padded[:, cpu_matmul.layout(n, segment)]
    np.testing.assert_array_equal(cpu_matmul._laid_out(x, n, segment), expected)


class TestBadInput:
    w = tn.quantize(np.ones((4, 6)))

    def test_mismatched_features(self):
        with pytest.raises(tn.ShapeMismatchError, match="5 features") as e:
            tn.linear(np.ones((2, 5)), self.w)
        assert (e.value.expected, e.value.actual) == (6, 5)
        with pytest.raises(tn.ShapeMismatchError):
            np.ones(7) @ self.w.T
        with pytest.raises(tn.ShapeMismatchError, match="scalar"):
            tn.linear(np.float32(1), self.w)

    @pytest.mark.parametrize("dtype", [np.int16, np.int64, np.uint8, np.bool_, np.complex64,
                                       object])
    def test_non_float_x(self, dtype):
        with pytest.raises(TypeError, match="x must be a float"):
            tn.linear(np.ones((2, 6), dtype), self.w)

    def test_int8_x_needs_its_scale(self):
        with pytest.raises(TypeError, match="x_scale"):
            tn.linear(np.ones(6, np.int8), self.w)
        with pytest.raises(TypeError, match="x_scale goes with int8"):
            tn.linear(np.ones(6), self.w, x_scale=1.0)
        with pytest.raises(tn.ShapeMismatchError):
            tn.linear(np.ones((2, 6), np.int8), self.w, x_scale=np.ones(3))

    def test_bias(self):
        with pytest.raises(tn.ShapeMismatchError, match=r"bias must have shape \(4,\)") as e:
            tn.linear(np.ones(6), self.w, np.ones(5))
        assert (e.value.expected, e.value.actual) == ((4,), (5,))
        with pytest.raises(TypeError, match="bias"):
            tn.linear(np.ones(6), self.w, np.array(["a"] * 4))

    def test_weights(self):
        with pytest.raises(TypeError, match=r"not w\.T"):
            tn.linear(np.ones(4), self.w.T)
        with pytest.raises(TypeError, match="TernaryTensor"):
            tn.linear(np.ones(6), np.ones((4, 6)))
        with pytest.raises(tn.ShapeMismatchError, match="2-D"):
            tn.linear(np.ones(6), tn.quantize(np.ones(6)))
        with pytest.raises(ValueError, match="activations"):
            tn.linear(np.ones(6), self.w, activations="fp8")
        with pytest.raises(TypeError):
            np.ones((2, 6)) @ self.w

    def test_corrupt_wrapped_weights(self, device):
        data = tn.pack(np.zeros((3, 8), np.int8)).data.copy()
        data[2, 1] = 0xFF  # code 3
        w = tn.TernaryTensor(tn.PackedTrits(data, (3, 8), "2bit"), np.float32(1))
        with pytest.raises(tn.InvalidTritsError, match=r"byte \(2, 1\) = 0xff"):
            tn.linear(np.ones(8), w, device=device)


class TestBitLinear:
    def test_matches_linear_on_the_quantized_weight(self):
        rng = np.random.default_rng(5)
        weight, bias = rng.standard_normal((12, 40)), rng.standard_normal(12)
        x = rng.standard_normal((3, 40))
        for activations in ("int8", "float"):
            layer = tn.BitLinear(weight, bias, group_size=8, activations=activations)
            w = tn.quantize(weight, group_size=8)
            np.testing.assert_array_equal(layer(x), tn.linear(x, w, bias,
                                                              activations=activations))
        assert (layer.in_features, layer.out_features) == (40, 12)
        assert layer.nbytes == w.nbytes + 12 * 4
        assert layer.sparsity == np.mean(tn.unpack(w.packed) == 0)
        assert repr(layer).startswith("BitLinear(in_features=40, out_features=12, "
                                      "activations='float', format='2bit', group_size=8")

    def test_takes_a_ternary_tensor_and_checks_arguments(self):
        w = tn.quantize(np.ones((2, 4)))
        assert tn.BitLinear(w).weight is w
        with pytest.raises(ValueError, match="activations"):
            tn.BitLinear(w, activations="fp16")
        with pytest.raises(tn.ShapeMismatchError):
            tn.BitLinear(w, bias=np.ones(3))
        with pytest.raises(tn.ShapeMismatchError):
            tn.BitLinear(np.ones((2, 4)), group_size=3)


@pytest.mark.parametrize("group_size", [None, 32, 64, 96, 256, 512])
@pytest.mark.parametrize("n", [512, 1024, 1000, 768])
@pytest.mark.parametrize("m", [1, 3])
def test_cpu_fused_int8_gemv_is_the_composed_path(m, n, group_size):
    """The CPU quantizer writing the GEMV's layout itself gives what quantizing and then
    multiplying gives, bit for bit (the fused case and the shapes that fall back)."""
    from tritnum.matmul import _scale_rows

    if group_size is not None and n % group_size:
        pytest.skip("the group size must divide n")
    rng = np.random.default_rng(n + m)
    w = tn.quantize(rng.standard_normal((40, n)).astype(np.float32), group_size=group_size)
    x = (rng.standard_normal((m, n)) * 3).astype(np.float32)
    x[-1, : n // 2] = 0  # a row with many zeros (and a zero row when m == 1 and n is small)
    weights = (w.packed.data, w.packed._format, n, _scale_rows(w), np.float32(rng.random(40)))
    y, xs = cpu_matmul.linear_int8_fused(x, *weights)
    y0, xs0 = cpu_matmul._int8_fused(x, *weights)
    np.testing.assert_array_equal(xs, xs0)
    np.testing.assert_array_equal(y, y0)
    buf = np.empty_like(y)
    assert cpu_matmul.linear_int8_fused(x, *weights, out=buf)[0] is buf
    np.testing.assert_array_equal(buf, y0)
    q, scale = tn.quantize_activations(x)
    np.testing.assert_array_equal(tn.linear(x, w, weights[-1], activations="int8"),
                                  tn.linear(q, w, weights[-1], activations="int8", x_scale=scale))


def test_cpu_fused_int8_gemv_keeps_no_result_in_its_buffers():
    """The fused GEMV reuses its activation buffers across calls (per thread): results and
    scales handed out stay as they were, through calls of other shapes and back."""
    from tritnum.matmul import _scale_rows

    rng = np.random.default_rng(5)
    w = tn.quantize(rng.standard_normal((24, 1024)).astype(np.float32))
    w2 = tn.quantize(rng.standard_normal((8, 512)).astype(np.float32), group_size=256)
    x, x2 = (rng.standard_normal((2, n)).astype(np.float32) for n in (1024, 512))
    want = [tn.linear(q, t, activations="int8", x_scale=s)
            for q, s, t in ((*tn.quantize_activations(x), w), (*tn.quantize_activations(x2), w2))]
    first = tn.linear(x, w, activations="int8")
    other = tn.linear(x2, w2, activations="int8")
    again = tn.linear(x[::-1], w, activations="int8")
    np.testing.assert_array_equal(first, want[0])
    np.testing.assert_array_equal(other, want[1])
    np.testing.assert_array_equal(again, want[0][::-1])
    weights = (w.packed.data, w.packed._format, 1024, _scale_rows(w), None)
    _, xs = cpu_matmul.linear_int8_fused(x, *weights)
    kept = xs.copy()
    cpu_matmul.linear_int8_fused(x * 4, *weights)
    np.testing.assert_array_equal(xs, kept)


@pytest.mark.parametrize("level", isa.LEVELS)
@pytest.mark.parametrize("gfni", [False, True])
def test_int8_dot_with_and_without_gfni(level, gfni, monkeypatch):
    """The int8 dot takes codes out by ``vgf2p8affineqb`` where the CPU has GFNI, else by
    shifts and masks: both ways on every level the CPU has (the kernels use one)."""
    needs(level)
    if gfni and not gemv_target.GFNI:
        pytest.skip("this CPU lacks GFNI")
    monkeypatch.setattr(dot_int8, "GFNI", gfni)  # read when the intrinsic is compiled
    target = gemv_target.TARGETS[level]
    run = _dot_runner(gemv.make_dot(target), gemv.make_decode(target))
    size, blocks = target.block, 5
    rng = np.random.default_rng(isa.LEVELS.index(level))
    codes = rng.integers(0, 3, (blocks, 4, size)).astype(np.uint8)
    w = np.zeros(size * blocks + 3, np.uint8)
    w[3:] = np.bitwise_or.reduce(codes << (2 * np.arange(4, dtype=np.uint8))[:, None],
                                 axis=1).reshape(-1)
    x = np.zeros(4 * size * blocks + 5, np.float32)
    q = rng.integers(-128, 128, 4 * size * blocks + 5).astype(np.int8)
    out = np.zeros(4 * size * blocks + 4, np.float32)
    assert run(w, x, q, out, blocks)[1] == codes.reshape(-1).astype(np.int64) @ q[5:]


@pytest.mark.parametrize("group", [None, 32, 64, 256, 512])
def test_float_gemv_rows_equal_one_row_calls(monkeypatch, group):
    """The float GEMV takes blocks of ``FLOAT_ROWS`` weight rows per row of x, up to
    ``FLOAT_GEMV_ROWS`` rows of x: each output row has the bits of its one-row call."""
    monkeypatch.setattr(cpu_matmul, "FLOAT_GEMV_BYTES", 0)  # small weights take it too
    rng = np.random.default_rng(5)
    out = 16 * cpu_matmul.FLOAT_ROWS + 5  # whole blocks and a short one
    # 4096 inputs: more weights than a small layer's (its one-row calls take another dot)
    assert out * 4096 > small_linear.SMALL_WEIGHTS
    w = tn.quantize(rng.standard_normal((out, 4096)), group_size=group)
    x = rng.standard_normal((cpu_matmul.FLOAT_GEMV_ROWS, 4096)).astype(np.float32)
    together = tn.linear(x, w, device="cpu")
    np.testing.assert_array_equal(together, np.stack([tn.linear(r, w, device="cpu") for r in x]))
    assert_rel_close(together, x.astype(np.float64) @ dense64(w).T, 1e-6)


def _no_other_route(*args, **kwargs):
    raise AssertionError("a few rows went to the GEMM")


@settings(max_examples=40, deadline=None)
@given(fmt=st.sampled_from(["base3", "bitplane"]), out=st.integers(1, 300),
       n=st.sampled_from([64, 256, 1000, 1024, 1280]),
       group=st.sampled_from([None, 32, 64, 128, 256]), rows=st.integers(1, 16),
       activations=st.sampled_from(["int8", "float"]), kept=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_other_formats_take_the_2bit_gemv_and_its_bits(fmt, out, n, group, rows, activations,
                                                      kept, seed):
    """A few rows on "base3" or "bitplane" weights are transcoded for the 2bit GEMV (once
    and kept for a layer of up to ``KEEP_2BIT_TRITS`` weights, else each call): the bits
    of the same trits packed "2bit" (float too), and no GEMM (before, float rows were
    decoded for BLAS and int8 rows repacked for the integer GEMM, 3-20x slower)."""
    if group is not None and n % group:
        group = None
    rng = np.random.default_rng(seed)
    trits = rng.integers(-1, 2, (out, n), dtype=np.int8)
    scales = (np.float32(0.25) if group is None
              else rng.uniform(0.1, 2, (out, n // group)).astype(np.float32))
    w = tn.TernaryTensor(tn.pack(trits, fmt), scales, group)
    w2 = tn.TernaryTensor(tn.pack(trits, "2bit"), scales, group)
    x = rng.standard_normal((rows, n)).astype(np.float32)
    want = tn.linear(x, w2, activations=activations, device="cpu")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cpu_matmul, "_gemm", _no_other_route)
        patch.setattr(cpu_matmul, "gemm_int8", _no_other_route)
        patch.setattr(small_linear, "KEEP_2BIT_TRITS", 1 << 22 if kept else 0)
        for _ in range(2):  # the copy made, then used
            np.testing.assert_array_equal(
                tn.linear(x, w, activations=activations, device="cpu"), want)
    copy = w._cache.get("cpu_2bit")
    if kept and not small_linear._small(out, n, w2._cache["cpu_linear"][2]):
        assert not copy.codes.flags.writeable
        np.testing.assert_array_equal(copy.codes, w2.packed.data)
    else:
        assert copy is None


@pytest.mark.parametrize("fmt", ["2bit", "base3", "bitplane"])
@pytest.mark.parametrize("transcode", [True, False])
@pytest.mark.parametrize("group_size", [None, 32, 128])
def test_float_gemm_in_tiles_of_scaled_rows(monkeypatch, fmt, transcode, group_size):
    """The float GEMM's tiles (3 rows of 256 inputs each: 3, 3, 1 of 7), scaled by the decoding
    thread, transcoded or unpacked: within float32 rounding of a float64 oracle."""
    monkeypatch.setattr(cpu_matmul, "TILE_ELEMENTS", 3 * 256)
    monkeypatch.setattr(cpu_matmul, "TRANSCODE_TRITS", 0 if transcode else 1 << 30)
    rng = np.random.default_rng(9)
    trits = rng.integers(-1, 2, (7, 256), dtype=np.int8)
    scales = (np.float32(0.75) if group_size is None
              else rng.uniform(0.1, 2, (7, 256 // group_size)).astype(np.float32))
    w = tn.TernaryTensor(tn.pack(trits, fmt), scales, group_size)
    x = rng.standard_normal((60, 256)).astype(np.float32)  # past the float GEMV's 48 rows
    dense = trits * np.repeat(np.reshape(scales, (-1, 1)) if group_size is None else scales,
                              group_size or 256, axis=1).astype(np.float64)
    y = tn.linear(x, w, device="cpu")
    np.testing.assert_allclose(y, x.astype(np.float64) @ dense.T, rtol=1e-5, atol=1e-5)
