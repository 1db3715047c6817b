"""The CUDA GGUF block kernels against the NumPy reference, on a few blocks."""

from __future__ import annotations

import numpy as np
import pytest

import tritnum as tn


@pytest.mark.parametrize("qtype", ["TQ2_0", "TQ1_0", "I2_S"])
def test_encode_decode_match_reference(qtype):
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 256)).astype(np.float32)
    x[0, :40] = 0
    x[1, :3] = [5e-7, -5e-7, 1e-6]
    ref = tn.io.to_gguf_blocks(x, qtype, device="numpy")
    got = tn.io.to_gguf_blocks(x, qtype, device="cuda")
    np.testing.assert_array_equal(got, ref)
    expected = tn.io.from_gguf_blocks(ref, qtype, x.shape, device="numpy")
    np.testing.assert_array_equal(tn.io.from_gguf_blocks(ref, qtype, x.shape, device="cuda"),
                                  expected)
    out = np.full(x.shape, np.nan, np.float32)
    assert tn.io.from_gguf_blocks(ref, qtype, x.shape, out=out, device="cuda") is out
    np.testing.assert_array_equal(out, expected)
    t = tn.io.from_gguf_blocks(ref, qtype, x.shape, ternary=True, device="cuda")
    np.testing.assert_array_equal(t.dequantize(), expected)


def test_code_three_is_reported():
    buf = tn.io.to_gguf_blocks(np.ones((1, 256), np.float32), "TQ2_0")
    buf[0, 5] = 0xFF
    with pytest.raises(tn.InvalidTritsError, match="code 3"):
        tn.io.from_gguf_blocks(buf, "TQ2_0", (1, 256), ternary=True, device="cuda")


def test_tq1_every_digit_pattern_and_byte_value(tq1_every_pattern, tq1_every_byte):
    np.testing.assert_array_equal(
        tn.io.to_gguf_blocks(tq1_every_pattern, "TQ1_0", device="cuda"),
        tn.io.to_gguf_blocks(tq1_every_pattern, "TQ1_0", device="numpy"))
    shape = (256, 256)
    np.testing.assert_array_equal(
        tn.io.from_gguf_blocks(tq1_every_byte, "TQ1_0", shape, device="cuda"),
        tn.io.from_gguf_blocks(tq1_every_byte, "TQ1_0", shape, device="numpy"))


@pytest.mark.parametrize("qtype", ["TQ2_0", "TQ1_0"])
def test_scales_beyond_float16_normals(qtype):
    below_inf = np.nextafter(np.float32(65520), np.float32(0))  # 65520 and up: refused
    maxima = np.array([1e-7, 3e-8, 2.9e-8, 65519, below_inf, 1e-40, 2.0**-128,
                       np.nextafter(np.float32(2.0**-128), np.float32(1))], np.float32)
    x = np.linspace(-1, 1, 256, dtype=np.float32) * maxima[:, None]
    np.testing.assert_array_equal(tn.io.to_gguf_blocks(x, qtype, device="cuda"),
                                  tn.io.to_gguf_blocks(x, qtype, device="numpy"))


@pytest.mark.parametrize("layout", ["x86", "x86-interleaved", "arm"])
def test_i2s_layouts_and_zero_threshold(layout):
    """bitnet.cpp's |w| < 1e-6 in double (float32(1e-6) is coded 0), in each I2_S layout."""
    one = np.float32(1e-6)
    x = np.random.default_rng(2).standard_normal((4, 128)).astype(np.float32)
    x[0, :4] = [one, -one, np.nextafter(one, np.float32(1)), -np.nextafter(one, np.float32(1))]
    ref = tn.io.to_gguf_blocks(x, "I2_S", layout=layout, device="numpy")
    np.testing.assert_array_equal(tn.io.to_gguf_blocks(x, "I2_S", layout=layout, device="cuda"),
                                  ref)
    t = tn.io.from_gguf_blocks(ref, "I2_S", x.shape, layout=layout, ternary=True, device="cuda")
    np.testing.assert_array_equal(t.packed.unpack()[0, :4], [0, 0, 1, -1])
    np.testing.assert_array_equal(
        tn.io.from_gguf_blocks(ref, "I2_S", x.shape, layout=layout, device="cuda"),
        tn.io.from_gguf_blocks(ref, "I2_S", x.shape, layout=layout, device="numpy"))


def test_float16_widening():
    from tritnum._kernels.cuda.gguf import _widened

    halves = np.arange(0, 1 << 16, 37, dtype=np.uint32).astype(np.uint16)
    halves[:6] = [0x0001, 0x03FF, 0x7C00, 0xFC00, 0x7E01, 0x8001]  # subnormal, inf, NaN
    np.testing.assert_array_equal(_widened(halves).copy_to_host().view(np.uint32),
                                  halves.view(np.float16).astype(np.float32).view(np.uint32))
    x = np.random.default_rng(1).standard_normal((2, 256)).astype(np.float16)
    for qtype in ("TQ2_0", "TQ1_0", "I2_S"):
        np.testing.assert_array_equal(tn.io.to_gguf_blocks(x, qtype, device="cuda"),
                                      tn.io.to_gguf_blocks(x, qtype, device="numpy"))
