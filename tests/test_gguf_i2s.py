"""bitnet.cpp's I2_S: its zero threshold and its three byte layouts, against its C loops.

``bitnet_quantize_i2_s`` transcribes ``quantize_i2_s`` of bitnet.cpp's
``src/ggml-bitnet-mad.cpp`` (commit 16da220) line by line in plain Python, one branch
per build: x86 with ``ACT_PARALLEL`` (the default ``include/gemm-config.h``), x86
without it (four rows per byte) and ARM NEON (64-element blocks, since 112f853).
"""

import struct

import numpy as np
import pytest

import tritnum as tn
from tritnum.io.gguf.i2s import from_codec_order, to_codec_order


def bitnet_quantize_i2_s(src, build):
    """bitnet.cpp's quantize_i2_s on a (nrow, n_per_row) float32 array, for one build."""
    nrow, n_per_row = src.shape
    x = [float(v) for v in src.reshape(-1)]  # (double)src[i]
    n = nrow * n_per_row
    i2_scale = 0.0
    for v in x:
        i2_scale = max(i2_scale, abs(v))
    q8 = [1 if abs(v) < 1e-6 else (2 if v * i2_scale > 0 else 0) for v in x]
    dst = bytearray(n // 4 + 32)  # llama-quantize leaves the 28 bytes after the scale as
    # they were in its buffer; tritnum writes zeros there
    if build == "x86":  # QK_I2_S 128, ACT_PARALLEL
        for i in range(n // 128):
            for j in range(128):
                dst[i * 32 + j % 32] |= q8[i * 128 + j] << (6 - 2 * (j // 32))
    elif build == "x86-interleaved":  # x86 without ACT_PARALLEL: quantize_i2_s_1x4
        assert nrow % 4 == 0
        for rg in range(nrow // 4):
            for col in range(n_per_row):
                q = [q8[(rg * 4 + k) * n_per_row + col] for k in range(4)]
                dst[rg * n_per_row + col] = (q[0] << 6) | (q[1] << 4) | (q[2] << 2) | q[3]
    else:  # __ARM_NEON: QK_I2_S 64
        for i in range(n // 64):
            for j in range(64):
                dst[i * 16 + j % 16] |= q8[i * 64 + j] << (6 - 2 * (j // 16))
    struct.pack_into("<f", dst, n // 4, i2_scale)  # scale_ptr[0] = (float)i2_scale
    return np.frombuffer(bytes(dst), np.uint8)


LAYOUTS = ["x86", "x86-interleaved", "arm"]
ONE = np.float32(1e-6)  # 9.99999997e-07: below 1e-6 as a double


def threshold_values():
    """Weights around bitnet.cpp's zero threshold, and ordinary ones."""
    near = [ONE, np.nextafter(ONE, np.float32(1)), np.nextafter(ONE, np.float32(0)),
            np.float32(5e-7), np.float32(1.0000001e-6), np.float32(0)]
    near = np.array(near + [-v for v in near], np.float32)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 384)).astype(np.float32) * np.float32(1e-6)
    x.reshape(-1)[: near.size] = near
    return x


def test_zero_threshold_is_bitnets_double_comparison(device):
    """|w| < 1e-6 compared in double: float32(1e-6) itself is coded 0."""
    x = threshold_values()
    buf = tn.io.to_gguf_blocks(x, "I2_S", device=device)
    np.testing.assert_array_equal(buf, bitnet_quantize_i2_s(x, "x86"))
    trits = tn.io.from_gguf_blocks(buf, "I2_S", x.shape, ternary=True, device=device)
    want = np.where(np.abs(x.astype(np.float64)) < 1e-6, 0, np.sign(x))
    np.testing.assert_array_equal(trits.packed.unpack(), want)
    assert trits.packed.unpack().reshape(-1)[0] == 0  # np.float32(1e-6)
    assert trits.packed.unpack().reshape(-1)[1] == 1  # the next float32 up


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", [(4, 128), (8, 384), (12, 64), (4, 2, 192)])
def test_layouts_match_bitnet_quantize_i2_s(layout, shape, device):
    if layout != "arm" and np.prod(shape) % 128:
        pytest.skip("x86 builds quantize whole 128-blocks")
    rng = np.random.default_rng(sum(shape))
    x = rng.integers(-1, 2, shape).astype(np.float32) * np.float32(0.25)
    x.reshape(-1)[:3] = [ONE, -ONE, 2e-6]
    want = bitnet_quantize_i2_s(x.reshape(-1, shape[-1]), layout)
    got = tn.io.to_gguf_blocks(x, "I2_S", layout=layout, device=device)
    np.testing.assert_array_equal(got, want)
    values = tn.io.from_gguf_blocks(got, "I2_S", shape, layout=layout, device=device)
    trits = np.where(np.abs(x.astype(np.float64)) < 1e-6, 0, np.sign(x))
    np.testing.assert_array_equal(values, trits * np.float32(0.25))
    t = tn.io.from_gguf_blocks(got, "I2_S", shape, layout=layout, ternary=True, device=device)
    np.testing.assert_array_equal(t.packed.unpack(), trits)
    np.testing.assert_array_equal(tn.io.to_gguf_blocks(t, "I2_S", layout=layout), want)
    out = np.full(shape, np.nan, np.float32)
    assert tn.io.from_gguf_blocks(got, "I2_S", shape, layout=layout, out=out) is out
    np.testing.assert_array_equal(out, values)


def test_known_answers_by_hand():
    """The first bytes of each layout, worked out from the C loops on paper."""
    w = np.zeros((4, 128), np.float32)
    w[0, 0], w[1, 0], w[2, 0], w[3, 0] = 1, -1, 0, 1  # one column, four rows
    w[0, 16], w[0, 32], w[0, 48] = -1, 0, 1
    w[0, 64] = -1  # arm: second block, byte 16; x86: byte 0 (j = 64: shift 2)
    blocks = {lay: tn.io.to_gguf_blocks(w, "I2_S", layout=lay) for lay in LAYOUTS}
    # x86: byte p of block 0 holds elements p, p+32, p+64, p+96 at shifts 6, 4, 2, 0
    assert blocks["x86"][0] == (2 << 6) | (1 << 4) | (0 << 2) | 1  # w[0,0], w[0,32], w[0,64]
    assert blocks["x86"][16] == (0 << 6) | (2 << 4) | (1 << 2) | 1  # w[0,16], w[0,48]
    assert blocks["x86"][32] == (0 << 6) | 0b010101  # block 1 = row 1: w[1,0] = -1
    # interleaved: byte c holds column c of rows 0..3 at shifts 6, 4, 2, 0
    assert blocks["x86-interleaved"][0] == (2 << 6) | (0 << 4) | (1 << 2) | 2
    assert blocks["x86-interleaved"][16] == (0 << 6) | 0b010101  # w[0,16] = -1
    assert blocks["x86-interleaved"][64] == (0 << 6) | 0b010101  # w[0,64] = -1
    # arm: byte p of a 64-block holds elements p, p+16, p+32, p+48
    assert blocks["arm"][0] == (2 << 6) | (0 << 4) | (1 << 2) | 2
    assert blocks["arm"][16] == (0 << 6) | 0b010101  # w[0,64]: block 1, byte 0
    for buf in blocks.values():
        assert buf.size == 512 // 4 + 32 and buf[128:132].view(np.float32)[0] == 1
        assert not buf[132:].any()
    assert len({buf.tobytes() for buf in blocks.values()}) == 3


@pytest.mark.parametrize("layout", LAYOUTS)
def test_codec_order_is_a_permutation(layout):
    shape = (8, 192) if layout != "arm" else (3, 64)
    a = np.arange(np.prod(shape))
    c = to_codec_order(a, shape, layout, -1)
    assert c.size % 128 == 0
    assert sorted(c[c >= 0]) == list(a) and (c < 0).sum() == c.size - a.size
    np.testing.assert_array_equal(from_codec_order(c, shape, layout), a)


def test_layout_shapes_refused():
    with pytest.raises(tn.ShapeMismatchError, match="row count that is a multiple of 4"):
        tn.io.to_gguf_blocks(np.ones((6, 128), np.float32), "I2_S", layout="x86-interleaved")
    with pytest.raises(tn.ShapeMismatchError, match="multiple of 64"):
        tn.io.to_gguf_blocks(np.ones(96, np.float32), "I2_S", layout="arm")
    with pytest.raises(tn.ShapeMismatchError, match="multiple of 128"):
        tn.io.to_gguf_blocks(np.ones(64, np.float32), "I2_S")
    with pytest.raises(ValueError, match="layout='arm' is one of I2_S's layouts"):
        tn.io.to_gguf_blocks(np.ones(256, np.float32), "TQ2_0", layout="arm")


def test_i2s_file_in_each_layout(tmp_path):
    w = tn.quantize(np.random.default_rng(4).standard_normal((8, 256)))
    for layout in LAYOUTS:
        path = tmp_path / f"{layout}.gguf"
        tn.io.write_gguf(path, {"w": w}, qtype="I2_S", layout=layout)
        raw = path.read_bytes()
        assert raw.count(tn.io.to_gguf_blocks(w, "I2_S", layout=layout).tobytes()) == 1
        back = tn.io.read_gguf(path, layout=layout)
        np.testing.assert_array_equal(back["w"].packed.unpack(), w.packed.unpack())
        assert back.layout == layout
        tn.io.write_gguf(tmp_path / "again.gguf", back)  # the model's layout by default
        assert (tmp_path / "again.gguf").read_bytes() == raw
