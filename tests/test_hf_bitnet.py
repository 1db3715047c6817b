"""transformers' bitnet weights: tn.io.from_hf_bitnet / to_hf_bitnet against transformers itself."""

from __future__ import annotations

import numpy as np
import pytest

import tritnum as tn
from tritnum.errors import FormatError, InvalidTritsError, ShapeMismatchError

torch = pytest.importorskip("torch")
bitnet = pytest.importorskip("transformers.integrations.bitnet")

# the 8x3 known answer, worked by hand: R = 2 rows per quarter; byte [r, c] holds rows r, 2+r,
# 4+r, 6+r of column c at bits 0-1, 2-3, 4-5, 6-7, code t+1
W8x3 = np.array([[1, 0, -1], [0, 1, 1], [-1, -1, 0], [1, 0, 0],
                 [0, 0, 1], [1, 1, -1], [-1, 0, 1], [0, -1, -1]], np.int8)
# byte [0, 0]: rows 0, 2, 4, 6 = 1, -1, 0, -1 -> codes 2, 0, 1, 0 -> 2 + 0 + 16 + 0 = 18
# byte [1, 0]: rows 1, 3, 5, 7 = 0, 1, 1, 0 -> codes 1, 2, 2, 1 -> 1 + 8 + 32 + 64 = 105
P8x3 = np.array([[0b00_01_00_10, 0b01_01_00_01, 0b10_10_01_00],
                 [0b01_10_10_01, 0b00_10_01_10, 0b00_00_01_10]], np.uint8)
BF16_HALF = np.array([0x3F00], np.uint16)  # 0.5 in bfloat16 bits


@pytest.fixture(autouse=True, scope="module")
def _eager_transformers():
    """transformers' bitnet code is @torch.compile'd: run it eagerly in this module only
    (TORCH_COMPILE_DISABLE set here would leak into later modules' torch.compile tests)."""
    with torch._dynamo.config.patch(disable=True):
        yield



def _hf_pack(t: np.ndarray) -> np.ndarray:
    return bitnet.pack_weights(torch.from_numpy(t.copy())).numpy()


def _hf_unpack(p: np.ndarray) -> np.ndarray:
    return bitnet.unpack_weights(torch.from_numpy(p.copy()), dtype=torch.float32).numpy()


def test_known_answer_8x3():
    assert np.array_equal(P8x3, [[18, 81, 164], [105, 38, 6]])
    assert np.array_equal(_hf_pack(W8x3), P8x3)
    w = tn.io.from_hf_bitnet(P8x3, BF16_HALF, linear_class="autobitlinear")
    assert np.array_equal(tn.unpack(w.packed), W8x3) and w.scales == np.float32(0.5)
    packed, scale = tn.io.to_hf_bitnet(w, linear_class="autobitlinear")
    assert np.array_equal(packed, P8x3) and np.array_equal(scale, BF16_HALF)


@pytest.mark.parametrize("shape", [(4, 1), (8, 3), (12, 5), (64, 17), (128, 64), (4, 0)])
def test_random_matrices_byte_for_byte(shape):
    rng = np.random.default_rng(sum(shape))
    for trits in (rng.integers(-1, 2, shape, dtype=np.int8), np.full(shape, -1, np.int8),
                  np.ones(shape, np.int8), np.zeros(shape, np.int8)):
        packed = _hf_pack(trits)
        w = tn.io.from_hf_bitnet(packed, np.array([1.5], np.float32), linear_class="bitlinear")
        assert np.array_equal(tn.unpack(w.packed), trits)
        assert np.array_equal(tn.unpack(w.packed), _hf_unpack(packed))
        back, _ = tn.io.to_hf_bitnet(w, linear_class="bitlinear", scale_dtype="float32")
        assert back.dtype == np.uint8 and np.array_equal(back, packed)


def test_torch_inputs_and_bfloat16_scale():
    trits = np.random.default_rng(1).integers(-1, 2, (16, 8), dtype=np.int8)
    packed = bitnet.pack_weights(torch.from_numpy(trits.copy()))
    scale = torch.tensor([0.3], dtype=torch.bfloat16)
    w = tn.io.from_hf_bitnet(packed, scale, linear_class="autobitlinear")
    assert w.scales == np.float32(scale.float().item())
    _, back = tn.io.to_hf_bitnet(w, linear_class="autobitlinear")
    assert np.array_equal(back, scale.view(torch.uint16).numpy().astype(np.uint16))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("linear_class", ["bitlinear", "autobitlinear"])
def test_scales_round_trip_exactly(linear_class, dtype):
    """Every stored scale of a dtype reads back as a float32 scale that writes the same value."""
    rng = np.random.default_rng(2)
    values = np.exp(rng.uniform(-12, 6, 300)).astype(np.float32)
    trits = tn.pack(rng.integers(-1, 2, (4, 4), dtype=np.int8))
    if dtype == "bfloat16":
        stored = [np.array([b], np.uint16) for b in (values.view(np.uint32) >> 16)]
        as_float = [float(np.array(s.astype(np.uint32) << 16).view(np.float32)[0])
                    for s in stored]
    else:
        stored = [np.array([v], dtype) for v in values]
        as_float = [float(s[0]) for s in stored]
    for s, value in zip(stored, as_float, strict=True):
        w = tn.io.from_hf_bitnet(bitnet.pack_weights(torch.zeros(4, 4, dtype=torch.int8)).numpy(),
                                 s, linear_class=linear_class)
        expected = value if linear_class == "autobitlinear" else 1.0 / value
        assert w.scales == np.float32(expected)
        _, back = tn.io.to_hf_bitnet(tn.TernaryTensor(trits, w.scales),
                                     linear_class=linear_class, scale_dtype=dtype)
        assert back.dtype == s.dtype
        if linear_class == "bitlinear" and dtype == "float32":
            # two neighbouring float32 values may share a float32 reciprocal: the value written
            # is the one nearest 1 / g, which reads back as the same g
            assert tn.io.from_hf_bitnet(P8x3, back, linear_class=linear_class).scales == w.scales
        else:
            assert np.array_equal(back, s)


def test_layer_outputs_match_transformers():
    """Both conventions: the TernaryTensor's x @ W.T * g is the layer's output before rounding."""
    rng = np.random.default_rng(3)
    trits = rng.integers(-1, 2, (8, 16), dtype=np.int8)
    x = rng.integers(-127, 128, (2, 16)).astype(np.float32)
    x[:, 0] = 127  # each row's absmax is 127: the layers' activation quantization keeps x as is
    gamma = np.float32(0.375)
    w = tn.TernaryTensor(tn.pack(trits), gamma)
    for linear_class in ("bitlinear", "autobitlinear"):
        packed, scale = tn.io.to_hf_bitnet(w, linear_class=linear_class, scale_dtype="float32")
        if linear_class == "bitlinear":
            layer = bitnet.BitLinear(16, 8, bias=False, dtype=torch.float32)
            layer.weight.copy_(torch.from_numpy(packed))
        else:
            layer = bitnet.AutoBitLinear(16, 8, bias=False, dtype=torch.float32)
            layer.weight.data.copy_(bitnet.unpack_weights(torch.from_numpy(packed), torch.float32))
        layer.weight_scale.copy_(torch.from_numpy(scale))
        with torch.no_grad():
            y = layer(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(y, tn.linear(x, w, device="numpy"), rtol=1e-6)


@pytest.mark.parametrize("linear_class", ["bitlinear", "autobitlinear"])
def test_bias(linear_class):
    w = tn.io.from_hf_bitnet(P8x3, np.array([0.5], np.float32), linear_class=linear_class)
    bias = np.arange(8, dtype=np.float32) - 3.5
    packed, scale, stored = tn.io.to_hf_bitnet(w, linear_class=linear_class,
                                               scale_dtype="float32", bias=bias)
    factor = 0.5 if linear_class == "autobitlinear" else 1.0  # autobitlinear: bias * scale
    np.testing.assert_array_equal(stored * factor, bias)
    _, real = tn.io.from_hf_bitnet(packed, scale, linear_class=linear_class, bias=stored)
    np.testing.assert_array_equal(real, bias)


def test_bias_not_exact_is_refused():
    w = tn.TernaryTensor(tn.pack(W8x3), np.float32(3.0))
    bias = np.full(8, 0.1, np.float32)  # float32(0.1 / 3) * 3 is not 0.1 in float32
    with pytest.raises(FormatError, match=r"bias.*requantize=True"):
        tn.io.to_hf_bitnet(w, linear_class="autobitlinear", scale_dtype="float32", bias=bias)
    *_, stored = tn.io.to_hf_bitnet(w, linear_class="autobitlinear", scale_dtype="float32",
                                    bias=bias, requantize=True)
    np.testing.assert_allclose(stored * 3.0, bias, rtol=1e-7)
    assert not np.array_equal(stored.astype(np.float64) * 3.0, bias)


def test_scale_not_representable():
    w = tn.TernaryTensor(tn.pack(W8x3), np.float32(0.1))
    with pytest.raises(FormatError, match=r"not exact in bfloat16.*requantize=True"):
        tn.io.to_hf_bitnet(w, linear_class="autobitlinear")
    _, scale = tn.io.to_hf_bitnet(w, linear_class="autobitlinear", requantize=True)
    assert scale.dtype == np.uint16 and scale[0] == 0x3DCD  # 0.1 rounded to nearest bfloat16
    _, scale = tn.io.to_hf_bitnet(w, linear_class="autobitlinear", scale_dtype="float32")
    assert scale[0] == np.float32(0.1)


def test_several_scales():
    x = np.random.default_rng(4).standard_normal((8, 6)).astype(np.float32)
    rows = tn.quantize(x, axis=-1)
    with pytest.raises(FormatError, match="one per projection"):
        tn.io.to_hf_bitnet(rows, linear_class="bitlinear", scale_dtype="float32")
    packed, _ = tn.io.to_hf_bitnet(rows, linear_class="autobitlinear",
                                       scale_dtype="float32", requantize=True)
    per_tensor = tn.quantize(rows.dequantize())
    assert np.array_equal(_hf_unpack(packed), tn.unpack(per_tensor.packed))
    same = tn.quantize(np.where(x > 0, 1.0, -1.0), axis=-1)  # every row's scale is 1
    tn.io.to_hf_bitnet(same, linear_class="bitlinear")


def test_bad_inputs():
    good = tn.io.from_hf_bitnet(P8x3, BF16_HALF, linear_class="bitlinear")
    bad = P8x3.copy()
    bad[1, 2] |= 0b11 << 4  # code 3 at rows 2R + 1 = 5, column 2
    with pytest.raises(InvalidTritsError, match=r"packed\[1, 2\] bits 4-5.*weight\[5, 2\]"):
        tn.io.from_hf_bitnet(bad, BF16_HALF, linear_class="bitlinear")
    with pytest.raises(TypeError, match="uint8"):
        tn.io.from_hf_bitnet(P8x3.astype(np.int16), BF16_HALF, linear_class="bitlinear")
    with pytest.raises(ShapeMismatchError, match="2-D"):
        tn.io.from_hf_bitnet(P8x3.reshape(-1), BF16_HALF, linear_class="bitlinear")
    with pytest.raises(FormatError, match=r"linear_class.*'bitlinear', 'autobitlinear'"):
        tn.io.from_hf_bitnet(P8x3, BF16_HALF, linear_class="BitLinear")
    with pytest.raises(FormatError, match="one value"):
        tn.io.from_hf_bitnet(P8x3, np.ones(2, np.float32), linear_class="bitlinear")
    for scale in (0.0, -1.0, np.inf, np.nan):
        with pytest.raises(FormatError, match="positive finite"):
            tn.io.from_hf_bitnet(P8x3, np.array([scale]), linear_class="bitlinear")
    with pytest.raises(TypeError, match="floats"):
        tn.io.from_hf_bitnet(P8x3, np.array([2], np.int32), linear_class="bitlinear")
    with pytest.raises(ShapeMismatchError, match=r"multiple of 4.*pad"):
        tn.io.to_hf_bitnet(tn.quantize(np.ones((6, 4))), linear_class="bitlinear")
    with pytest.raises(ShapeMismatchError, match="multiple of 4"):
        tn.io.to_hf_bitnet(tn.quantize(np.ones((4, 4, 4))), linear_class="bitlinear")
    with pytest.raises(FormatError, match="scale_dtype"):
        tn.io.to_hf_bitnet(good, linear_class="bitlinear", scale_dtype="float64")
    with pytest.raises(TypeError, match="TernaryTensor"):
        tn.io.to_hf_bitnet(W8x3, linear_class="bitlinear")
    with pytest.raises(ShapeMismatchError, match=r"bias must have shape \(8,\)"):
        tn.io.from_hf_bitnet(P8x3, BF16_HALF, linear_class="bitlinear", bias=np.ones(4))
