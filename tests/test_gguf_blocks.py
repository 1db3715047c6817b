"""GGUF ternary blocks: byte-identical to the gguf package (TQ1_0, TQ2_0); I2_S by hand."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType, quants
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tritnum as tn
from tritnum import _isa as isa
from tritnum._dispatch import call
from tritnum._kernels.cpu._jit import jit
from tritnum._kernels.cpu._llvm import gguf as simd_gguf
from tritnum._kernels.shared import floatbits

GGUF_TYPES = {"TQ2_0": GGMLQuantizationType.TQ2_0, "TQ1_0": GGMLQuantizationType.TQ1_0}


def block_floats():
    """Float32 blocks. No subnormals: for a block whose max is subnormal, 1 / d overflows and
    the gguf package casts NaN to int8, which NumPy leaves undefined (tritnum gives code 1)."""
    shapes = st.tuples(st.integers(1, 3), st.integers(1, 3)).map(lambda s: (s[0], 256 * s[1]))
    return hnp.arrays(np.float32, shapes,
                      elements=st.floats(-1e4, 1e4, width=32, allow_subnormal=False))


@pytest.mark.parametrize("qtype", list(GGUF_TYPES))
@given(x=block_floats())
def test_matches_gguf_package(x, qtype, device):
    ref = quants.quantize(x, GGUF_TYPES[qtype])
    got = tn.io.to_gguf_blocks(x, qtype, device=device)
    assert got.dtype == np.uint8 and got.shape == ref.shape
    np.testing.assert_array_equal(got, ref)
    back = tn.io.from_gguf_blocks(got, qtype, x.shape, device=device)
    np.testing.assert_array_equal(back, quants.dequantize(ref, GGUF_TYPES[qtype]))


@pytest.mark.parametrize("qtype", list(GGUF_TYPES))
def test_exactly_ternary_round_trips(qtype, device):
    rng = np.random.default_rng(5)
    trits = rng.integers(-1, 2, size=(4, 512)).astype(np.float32)
    trits[1] = 0  # all-zero blocks: d = 0
    x = trits * np.float32(0.375)
    buf = tn.io.to_gguf_blocks(x, qtype, device=device)
    np.testing.assert_array_equal(buf, quants.quantize(x, GGUF_TYPES[qtype]))
    np.testing.assert_array_equal(tn.io.from_gguf_blocks(buf, qtype, x.shape, device=device), x)


# I2_S by hand from DESIGN §2: element j of a 128-block -> byte j % 32 at shift 6 - 2 (j // 32)
def test_i2s_known_answer():
    w = np.zeros(128, np.float32)
    w[0], w[32], w[64], w[96] = 0.5, -0.5, 0.0, 0.5  # all in byte 0: codes 2, 0, 1, 2
    w[1] = -0.25  # byte 1 at shift 6: code 0; the rest of byte 1 codes 1
    w[33] = 5e-7  # |w| < 1e-6: code 1
    buf = tn.io.to_gguf_blocks(w, "I2_S")
    assert buf.shape == (128 // 4 + 32,)
    assert buf[0] == (2 << 6) | (0 << 4) | (1 << 2) | 2
    assert buf[1] == (0 << 6) | (1 << 4) | (1 << 2) | 1
    assert (buf[2:32] == 0b01010101).all()
    assert buf[32:36].view(np.float32)[0] == np.float32(0.5)  # max |w|
    assert not buf[36:].any()
    back = tn.io.from_gguf_blocks(buf, "I2_S", (128,))
    expected = np.sign(w) * np.float32(0.5) * (np.abs(w) >= 1e-6)
    np.testing.assert_array_equal(back, expected)


def test_i2s_backends_agree(device):
    w = np.random.default_rng(6).standard_normal((3, 256)).astype(np.float32)
    w[0, :10] = 0
    np.testing.assert_array_equal(tn.io.to_gguf_blocks(w, "I2_S", device=device),
                                  tn.io.to_gguf_blocks(w, "I2_S", device="numpy"))


@pytest.mark.parametrize("qtype", ["TQ2_0", "TQ1_0", "I2_S"])
@pytest.mark.parametrize("mode", [{}, {"axis": -1}, {"group_size": 256}, {"group_size": 64}])
def test_ternary_tensor_encodes_like_its_floats(qtype, mode):
    w = np.random.default_rng(7).standard_normal((3, 512)).astype(np.float32)
    w[2, :256] = 0
    t = tn.quantize(w, **mode)
    lossy = bool(mode) if qtype == "I2_S" else mode.get("group_size") == 64
    if lossy:  # scales finer than the format's: refused unless re-quantizing is asked for
        with pytest.raises(tn.FormatError, match="requantize=True"):
            tn.io.to_gguf_blocks(t, qtype)
    np.testing.assert_array_equal(tn.io.to_gguf_blocks(t, qtype, requantize=lossy),
                                  tn.io.to_gguf_blocks(t.dequantize(), qtype))


@pytest.mark.parametrize("qtype", ["TQ2_0", "TQ1_0", "I2_S"])
def test_decode_to_ternary_tensor(qtype):
    x = np.random.default_rng(8).standard_normal((2, 512)).astype(np.float32)
    buf = tn.io.to_gguf_blocks(x, qtype)
    t = tn.io.from_gguf_blocks(buf, qtype, x.shape, ternary=True, format="base3")
    assert isinstance(t, tn.TernaryTensor) and t.format == "base3"
    np.testing.assert_array_equal(t.dequantize(), tn.io.from_gguf_blocks(buf, qtype, x.shape))
    np.testing.assert_array_equal(tn.io.to_gguf_blocks(t, qtype), buf)


@pytest.mark.parametrize("qtype", ["TQ2_0", "TQ1_0", "I2_S"])
def test_ternary_decode_runs_one_trit_kernel(qtype, device, kernel_devices):
    """ternary=True decodes once, with the resolved device's trit decoder (no float decode)."""
    x = np.random.default_rng(3).standard_normal((2, 512)).astype(np.float32)
    x[1, 256:] = 0  # a block of scale 0: its trits still come from its codes
    buf = tn.io.to_gguf_blocks(x, qtype)
    kernel_devices.clear()
    t = tn.io.from_gguf_blocks(buf, qtype, x.shape, ternary=True, device=device)
    assert [c for c in kernel_devices if c[0].startswith("gguf")] == [("gguf_trits", device)]
    np.testing.assert_array_equal(t.dequantize(), tn.io.from_gguf_blocks(buf, qtype, x.shape))


@pytest.mark.parametrize("qtype", ["TQ2_0", "TQ1_0", "I2_S"])
def test_trit_kernels_agree_on_corrupt_codes(qtype):
    from tritnum._dispatch import kernel

    rng = np.random.default_rng(4)
    qs = rng.integers(0, 256, (3, 64 if qtype == "TQ2_0" else 52), dtype=np.uint8)
    if qtype == "I2_S":
        qs = qs[:, :32].reshape(-1)
    ref, ref_ok = kernel("gguf_trits", "numpy")(qs, qtype)
    got, ok = kernel("gguf_trits", "cpu")(qs, qtype)
    np.testing.assert_array_equal(got, ref)
    assert ok == ref_ok == (qtype == "TQ1_0")  # random bytes hold 2-bit code 3


def test_bad_input():
    x = np.ones((2, 256), np.float32)
    valid = "qtype must be one of 'TQ2_0', 'TQ1_0', 'I2_S', got 'Q4_0'"
    with pytest.raises(tn.FormatError, match=valid):
        tn.io.to_gguf_blocks(x, "Q4_0")
    with pytest.raises(tn.ShapeMismatchError, match="multiple of 256"):
        tn.io.to_gguf_blocks(np.ones((2, 100), np.float32), "TQ2_0")
    with pytest.raises(tn.ShapeMismatchError, match="multiple of 128"):
        tn.io.to_gguf_blocks(np.ones(100, np.float32), "I2_S")
    buf = tn.io.to_gguf_blocks(x, "TQ2_0")
    with pytest.raises(tn.FormatError, match="holds 132 bytes, got 131"):
        tn.io.from_gguf_blocks(buf.reshape(-1)[:-1], "TQ2_0", (2, 256))
    with pytest.raises(tn.FormatError, match="must be uint8"):
        tn.io.from_gguf_blocks(buf.view(np.int8), "TQ2_0", (2, 256))
    with pytest.raises(tn.ShapeMismatchError, match="no negative sizes"):
        tn.io.from_gguf_blocks(buf, "TQ2_0", (-2, -256))
    with pytest.raises(TypeError, match="tuple of ints"):
        tn.io.from_gguf_blocks(buf, "TQ2_0", (2, 256.0))
    x[1, 7] = np.nan
    with pytest.raises(ValueError, match=r"x\[1, 7\] = nan is not finite"):
        tn.io.to_gguf_blocks(x, "TQ1_0")
    corrupt = buf.copy()
    corrupt[0, 0] = 0xFF  # code 3
    assert tn.io.from_gguf_blocks(corrupt, "TQ2_0", (2, 256))[0, 0] == 2  # as llama.cpp reads it
    with pytest.raises(tn.InvalidTritsError, match="code 3"):
        tn.io.from_gguf_blocks(corrupt, "TQ2_0", (2, 256), ternary=True)


@pytest.mark.parametrize("qtype", [*GGUF_TYPES, "I2_S"])
def test_no_blocks(qtype, device):
    x = np.zeros((0, 256), np.float32)
    buf = tn.io.to_gguf_blocks(x, qtype, device=device)
    assert buf.size == (32 if qtype == "I2_S" else 0)  # I2_S: just the scale and its padding
    got = tn.io.from_gguf_blocks(buf, qtype, x.shape, device=device)
    assert got.shape == x.shape and got.dtype == np.float32
    t = tn.io.from_gguf_blocks(buf, qtype, x.shape, ternary=True, device=device)
    assert t.shape == x.shape


@pytest.mark.parametrize("qtype", [*GGUF_TYPES, "I2_S"])
def test_decode_into_out(qtype, device):
    x = np.random.default_rng(6).standard_normal((3, 512)).astype(np.float32)
    buf = tn.io.to_gguf_blocks(x, qtype)
    out = np.full(x.shape, np.nan, np.float32)  # every value must be written
    got = tn.io.from_gguf_blocks(buf, qtype, x.shape, out=out, device=device)
    assert got is out
    np.testing.assert_array_equal(out, tn.io.from_gguf_blocks(buf, qtype, x.shape, device="numpy"))


def test_decode_into_bad_out():
    x = np.ones((2, 256), np.float32)
    buf = tn.io.to_gguf_blocks(x, "TQ2_0")
    with pytest.raises(tn.ShapeMismatchError, match=r"out has shape \(512,\)"):
        tn.io.from_gguf_blocks(buf, "TQ2_0", (2, 256), out=np.empty(512, np.float32))
    with pytest.raises(TypeError, match="float32 NumPy array, got ndarray of float64"):
        tn.io.from_gguf_blocks(buf, "TQ2_0", (2, 256), out=np.empty((2, 256)))
    with pytest.raises(TypeError, match="C-contiguous"):
        tn.io.from_gguf_blocks(buf, "TQ2_0", (2, 256), out=np.empty((256, 2), np.float32).T)
    with pytest.raises(TypeError, match="ternary=True"):
        tn.io.from_gguf_blocks(buf, "TQ2_0", (2, 256), ternary=True,
                               out=np.empty((2, 256), np.float32))


@pytest.mark.parametrize("qtype", list(GGUF_TYPES))
@pytest.mark.parametrize("offset", [0, 4, 16, 1])  # bytes: 32-aligned, float-aligned, unaligned
def test_streaming_decoder_writes_what_the_plain_one_does(qtype, offset):
    from tritnum._kernels.cpu import gguf as cpu_gguf

    x = np.random.default_rng(8).standard_normal((5, 256)).astype(np.float32)
    rows = tn.io.to_gguf_blocks(x, qtype).reshape(5, -1)
    codes = 64 if qtype == "TQ2_0" else 52
    qs, d = rows[:, :codes], rows[:, codes:].copy().view(np.float16).astype(np.float32).ravel()
    expected = quants.dequantize(rows.reshape(-1), GGUF_TYPES[qtype]).reshape(5, 256)
    raw = bytearray(5 * 256 * 4 + 64)
    base = np.frombuffer(raw, np.uint8)
    start = (-base.ctypes.data) % 32 + offset
    out = np.frombuffer(raw, np.float32, count=5 * 256, offset=start).reshape(5, 256)
    out[...] = np.nan
    for t0, t1 in [(0, 2), (2, 5)]:  # two tasks, as two threads would run them
        assert cpu_gguf._decode_tq(qs, d, qtype == "TQ2_0", True, out, t0, t1) == 0
    np.testing.assert_array_equal(out, expected)
    assert not base[:start].any() and not base[start + out.nbytes:].any()  # nothing outside


def test_tq1_every_digit_pattern(tq1_every_pattern, device):
    ref = quants.quantize(tq1_every_pattern, GGMLQuantizationType.TQ1_0)
    np.testing.assert_array_equal(tn.io.to_gguf_blocks(tq1_every_pattern, "TQ1_0",
                                                       device=device), ref)


def test_tq1_every_byte_value(tq1_every_byte, device):
    ref = quants.dequantize(tq1_every_byte, GGMLQuantizationType.TQ1_0)
    got = tn.io.from_gguf_blocks(tq1_every_byte, "TQ1_0", ref.shape, device=device)
    np.testing.assert_array_equal(got, ref)


def test_float16_bits_rounds_as_numpy():
    """The kernels' float16 conversion of the scales, on every float16, its float32
    neighbours and the midpoints between float16s (where rounding to even decides),
    overflow, subnormal halves and random float32 bits."""
    half = jit(inline="always")(floatbits.float16_bits)

    @jit()
    def convert(bits, out):
        for i in range(bits.size):
            out[i] = half(bits[i])

    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    every = every[np.isfinite(every)].astype(np.float64)
    every.sort()
    mid = ((every[:-1] + every[1:]) / 2).astype(np.float32).view(np.uint32)
    exact = every.astype(np.float32).view(np.uint32)
    rng = np.random.default_rng(3)
    bits = np.concatenate([exact, exact + 1, exact - 1, mid, mid + 1, mid - 1,
                           np.array([0x7F800000, 0xFF800000, 0x477FF000, 0x477FEFFF], np.uint32),
                           rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32)])
    values = bits.view(np.float32)
    bits = bits[~np.isnan(values)]
    got = np.empty(bits.size, np.uint16)
    convert(bits, got)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got, bits.view(np.float32).astype(np.float16).view(np.uint16))


@pytest.mark.parametrize("qtype", list(GGUF_TYPES))
def test_scales_beyond_float16_normals(qtype, device):
    """Block maxima that are subnormal, round to zero or overflow as float16, and those whose
    inverse overflows float32 (2**-128 and below)."""
    tiny = [1e-40, 2.0**-128, np.nextafter(np.float32(2.0**-128), np.float32(1)), 1e-45]
    below_inf = np.nextafter(np.float32(65520), np.float32(0))  # the largest finite float16
    maxima = np.array([1e-7, 3e-8, 2.9e-8, 6.1e-5, 65504, 65519, below_inf, *tiny], np.float32)
    x = np.linspace(-1, 1, 256, dtype=np.float32) * maxima[:, None]
    with np.errstate(over="ignore", invalid="ignore"):
        ref = quants.quantize(x, GGUF_TYPES[qtype])
    np.testing.assert_array_equal(tn.io.to_gguf_blocks(x, qtype, device=device), ref)


@pytest.mark.parametrize("qtype", list(GGUF_TYPES))
def test_block_maxima_past_float16_are_refused(qtype, device):
    """A block maximum |x| of 65520 or more makes an infinite float16 scale, which the gguf
    package and llama.cpp write: refused, naming the block and its value, in the words the
    TernaryTensor path uses; the kernels themselves still encode as the gguf package does."""
    x = np.ones((2, 3, 512), np.float32)
    x[1, 2, 300] = -65520
    x[0, 0, 0] = 7e4
    with pytest.raises(tn.FormatError, match=(
            r"2 of its 12 block maxima \(the largest 70000; the first is block 0, "
            r"x\[0, 0, 0:256\], with max\|x\| 70000\) reach 65520 or more, where "
            + qtype + "'s float16 block scale becomes infinite")):
        tn.io.to_gguf_blocks(x, qtype, device=device)
    x[0, 0, 0] = 1
    with pytest.raises(tn.FormatError, match=r"1 of its 12 .*block 11, x\[1, 2, 256:512\], "
                                             r"with max\|x\| 65520\)"):
        tn.io.to_gguf_blocks(x, qtype, device=device)
    t = tn.TernaryTensor(tn.pack(np.ones((2, 256), np.int8)),
                         np.array([[1.0], [7e4]], np.float32), 256)
    with pytest.raises(tn.FormatError, match=r"1 of its 2 scales \(the largest 70000\) reach "
                                             "65520 or more, where " + qtype):
        tn.io.to_gguf_blocks(t, qtype, device=device)
    rows = np.linspace(-1, 1, 256, dtype=np.float32) * np.float32([[65520], [7e4]])
    with np.errstate(over="ignore"):
        ref = quants.quantize(rows, GGUF_TYPES[qtype])
    qs = np.empty_like(ref)
    call("gguf_encode", device, rows.reshape(-1), qtype, qs=qs)
    np.testing.assert_array_equal(qs, ref)


@pytest.mark.parametrize("qtype", ["TQ2_0", "TQ1_0", "I2_S"])
def test_decode_into_an_out_that_overlaps_the_codes(qtype, device):
    """out= may alias buf (decoding in place over a buffer of floats): values stay right."""
    x = np.random.default_rng(9).standard_normal((2, 256)).astype(np.float32)
    want = tn.io.from_gguf_blocks(tn.io.to_gguf_blocks(x, qtype), qtype, x.shape)
    blocks = tn.io.to_gguf_blocks(x, qtype)
    for offset in (0, 4, 64):  # the codes at the start of, and inside, the output floats
        store = np.zeros(x.size + 64, np.float32)
        out = store[offset // 4: offset // 4 + x.size].reshape(x.shape)
        buf = store.view(np.uint8)[offset: offset + blocks.size]
        buf[...] = blocks.reshape(-1)
        got = tn.io.from_gguf_blocks(buf, qtype, x.shape, out=out, device=device)
        np.testing.assert_array_equal(got, want)


def test_float16_input_encodes_as_its_float32_values(device):
    """float16 input goes to the encoders as bits, widened block by block: every finite half
    (subnormals included) alone in a block gives that half as the block's scale d, bit for
    bit, and blocks of mixed halves the bytes of their float32 values."""
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    finite = halves[np.isfinite(halves.view(np.float16))]
    if device == "cuda":  # the simulator: a sample
        finite = finite[::97]
    alone = np.zeros((finite.size, 256), np.float16)
    alone[:, 7] = finite.view(np.float16)
    for qtype in GGUF_TYPES:
        got = tn.io.to_gguf_blocks(alone, qtype, device=device)
        d = got[:, -2:].copy().view(np.uint16).ravel()
        np.testing.assert_array_equal(d, finite & 0x7FFF)  # |x|, exactly
        np.testing.assert_array_equal(got, quants.quantize(alone.astype(np.float32),
                                                           GGUF_TYPES[qtype]))
    x = np.random.default_rng(11).standard_normal((3, 4096)).astype(np.float16)
    x[0, :300] = np.arange(300).astype(np.uint16).view(np.float16)  # subnormal halves
    for qtype in GGUF_TYPES:
        np.testing.assert_array_equal(tn.io.to_gguf_blocks(x, qtype, device=device),
                                      quants.quantize(x.astype(np.float32), GGUF_TYPES[qtype]))
    np.testing.assert_array_equal(tn.io.to_gguf_blocks(x, "I2_S", device=device),
                                  tn.io.to_gguf_blocks(x.astype(np.float32), "I2_S"))
    x[2, 9] = np.inf
    with pytest.raises(ValueError, match=r"x\[2, 9\] = inf is not finite"):
        tn.io.to_gguf_blocks(x, "TQ2_0", device=device)


def _encoders_runner(tq2, tq1, absmax):
    @jit()
    def run(x, inv, q2, q1, out):
        for b in range(2):
            out[b] = absmax(x.view(np.uint32), 3 + 256 * b)
            tq2(x, 3 + 256 * b, inv[b], q2, 1 + 66 * b)
            tq1(x, 3 + 256 * b, inv[b], q1, 2 + 54 * b)

    return run


# the SIMD block encoders of every ISA level (tritnum._isa) on two blocks, compiled once; a
# level the CPU lacks skips
ENCODERS = {level: _encoders_runner(*simd_gguf.make_encoders(simd_gguf.lanes_of(level)))
            for level in isa.LEVELS}


@pytest.mark.parametrize("level", isa.LEVELS)
@given(seed=st.integers(0, 2**32 - 1), special=st.sampled_from(
    [None, "nan", "inf", "zero", "ties", "tiny"]))
def test_simd_encoders_match_numpy(level, seed, special):
    """Each level's absmax and TQ2_0/TQ1_0 code bytes against the layouts in NumPy, with
    values on the +-0.5 boundaries, NaN, infinities, an all-zero and a subnormal block."""
    if level not in isa.available():
        pytest.skip(f"this CPU lacks {level}: {', '.join(sorted(isa.REQUIRES[level]))}")
    from tritnum._kernels.shared import gguf as shared

    run = ENCODERS[level]
    rng = np.random.default_rng(seed)
    x = np.zeros(3 + 2 * 256, np.float32)  # two blocks from element 3 (unaligned)
    x[3:] = rng.standard_normal(512).astype(np.float32) * rng.choice([1e-3, 1, 1e5])
    if special == "nan":
        x[3 + rng.integers(512)] = np.nan
    elif special == "inf":
        x[3 + rng.integers(512)] = -np.inf
    elif special == "zero":
        x[3:259] = 0
    elif special == "ties":  # exactly +-d/2 and their neighbours, d = 2
        x[3:] = rng.choice(np.array([2, -2, 1, -1, np.nextafter(1, 0), np.nextafter(-1, 0),
                                     0], np.float32), 512)
    elif special == "tiny":
        x[3:259] = rng.choice(np.array([2**-140, -(2**-130), 0], np.float32), 256)
    blocks = x[3:].reshape(2, 256)
    maxima = np.abs(blocks).max(axis=1)
    inv = np.array([shared.block_inverse(np.float32(m)) for m in maxima], np.float32)
    q2 = np.full(1 + 2 * 66 + 1, 0xEE, np.uint8)
    q1 = np.full(2 + 2 * 54 + 1, 0xEE, np.uint8)
    out = np.empty(2, np.uint32)
    with np.errstate(invalid="ignore"):
        run(x, inv, q2, q1, out)
        v = blocks * inv[:, None]
    bits = np.abs(blocks).view(np.uint32).max(axis=1)
    np.testing.assert_array_equal(out, np.where(bits > 0x7F800000, 0x7FC00000, bits))
    codes = (1 + (v >= 0.5) - (v <= -0.5)).astype(np.uint8)
    np.testing.assert_array_equal(q2[1:-1].reshape(2, 66)[:, :64], shared.tq2_bytes(codes))
    np.testing.assert_array_equal(q1[2:-1].reshape(2, 54)[:, :52], shared.tq1_bytes(codes))
    untouched = [q2[0], q2[-1], *q2[1 + 64:1 + 66], q1[0], q1[1], q1[-1], *q1[2 + 52:2 + 54]]
    assert all(b == 0xEE for b in untouched)  # nothing written outside the code bytes
