"""Bad input: each case raises its typed error with a useful message, on every backend."""

import numpy as np
import pytest

import tritnum as tn
from tritnum import errors

FORMATS = list(tn.FORMATS)


def test_error_hierarchy():
    assert issubclass(tn.InvalidTritsError, tn.TritnumError)
    assert issubclass(tn.InvalidTritsError, ValueError)
    assert issubclass(tn.FormatError, ValueError)
    assert issubclass(tn.ShapeMismatchError, ValueError)
    assert issubclass(tn.DeviceUnavailableError, RuntimeError)
    assert errors.TritnumError is tn.TritnumError
    err = tn.ShapeMismatchError("x", expected=(3,), actual=(4,))
    assert (err.expected, err.actual) == ((3,), (4,))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("bad", [2, -2, 127, -128, 3])
@pytest.mark.parametrize("n", [320, 7, 64])
def test_invalid_value_names_first_index(n, bad, fmt, device):
    a = np.zeros((3, n), np.int8)
    a[1, n - 2] = bad
    a[2, 0] = bad  # a later offender is not the one reported
    with pytest.raises(tn.InvalidTritsError, match=rf"trits\[1, {n - 2}\] = {bad} is not a trit"):
        tn.pack(a, fmt, device=device)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_lone_invalid_value_is_seen_at_every_position(fmt, device):
    # the word-parallel kernels check several trits per load: each byte lane of a word,
    # the row's last words and its padded tail
    for n in (45, 83):
        for p in range(n):
            a = np.zeros((2, n), np.int8)
            a[1, p] = (2, -2, 127, -128)[p % 4]
            with pytest.raises(tn.InvalidTritsError, match=rf"trits\[1, {p}\] = "):
                tn.pack(a, fmt, device=device)


def test_invalid_value_wide_dtypes(device):
    for dtype, bad in [(np.int64, 2**40), (np.uint8, 255), (np.uint64, 2**64 - 1), (np.int16, -3)]:
        a = np.zeros(10, dtype)
        a[4] = bad
        with pytest.raises(tn.InvalidTritsError, match=rf"trits\[4\] = {bad} "):
            tn.pack(a, "2bit", device=device)


@pytest.mark.parametrize(
    "x", [np.zeros(3), np.zeros(3, np.float16), np.zeros(3, complex), [0.5, 1.0]]
)
def test_real_input_points_to_quantize(x):
    with pytest.raises(TypeError, match=r"tn\.quantize"):
        tn.pack(x)


@pytest.mark.parametrize("x", [np.array([1, None], dtype=object), np.zeros(3, bool), ["a"]])
def test_non_integer_input(x):
    with pytest.raises(TypeError, match="integer array of trits"):
        tn.pack(x)


def test_scalar_input():
    with pytest.raises(tn.ShapeMismatchError, match="at least one dimension") as info:
        tn.pack(np.int8(1))
    assert info.value.actual == ()


W = tn.quantize(np.ones((2, 4)))
A = np.ones((2, 8), np.int8)
NAMED_CHOICES = {  # argument -> (the call with a bad value, the error, the valid values)
    "format": (lambda: tn.pack([1], "3bit"), tn.FormatError, "'2bit', 'base3', 'bitplane'"),
    "vsa format": (lambda: tn.vsa.random(1, 8, format="3bit"), tn.FormatError,
                   "'dense', 'bitplane'"),
    "rule": (lambda: tn.vsa.bind(A, A, rule="3bit"), ValueError, "'mul', 'mod3'"),
    "metric": (lambda: tn.vsa.similarity(A, A, "3bit"), ValueError,
               "'dot', 'cosine', 'hamming'"),
    "activations": (lambda: tn.linear(np.ones(4), W, activations="3bit"), ValueError,
                    "'float', 'int8', 'q8_k', 'q8_k_unfused'"),
    "BitLinear activations": (lambda: tn.BitLinear(W, activations="3bit"), ValueError,
                              "'float', 'int8', 'q8_k', 'q8_k_unfused'"),
    "qtype": (lambda: tn.io.to_gguf_blocks(np.ones(256), "3bit"), tn.FormatError,
              "'TQ2_0', 'TQ1_0', 'I2_S'"),
    "write_gguf qtype": (lambda: tn.io.write_gguf("never-written.gguf", {}, qtype="3bit"),
                         tn.FormatError, "'TQ2_0', 'TQ1_0', 'I2_S', 'F32', 'F16', 'BF16', "
                         "'I8', 'I16', 'I32', 'I64'"),
    "quantize_gguf qtype": (lambda: tn.io.quantize_gguf("never-read.gguf", "x.gguf", "3bit"),
                            tn.FormatError, "'TQ2_0', 'TQ1_0', 'I2_S'"),
    "layout": (lambda: tn.io.to_gguf_blocks(np.ones(128), "I2_S", layout="3bit"), ValueError,
               "'x86', 'x86-interleaved', 'arm'"),
    "device": (lambda: tn.pack([1], device="3bit"), ValueError,
               "'auto', 'cpu', 'cuda', 'numpy'"),
}


@pytest.mark.parametrize("argument", NAMED_CHOICES)
def test_named_choices_share_one_message(argument):
    call, error, valid = NAMED_CHOICES[argument]
    name = argument.split()[-1]
    with pytest.raises(error, match=rf"^{name} must be one of {valid}, got '3bit'$"):
        call()


@pytest.mark.parametrize("bad", ["3bit", "BASE3", None, 2])
def test_unknown_format_lists_valid_ones(bad):
    valid = "format must be one of '2bit', 'base3', 'bitplane', got "
    with pytest.raises(tn.FormatError, match=valid):
        tn.pack([1, 0], bad)
    with pytest.raises(tn.FormatError):
        tn.pack([1, 0]).to(bad)


def test_unpack_needs_packed():
    with pytest.raises(TypeError, match=r"unpack takes a tn\.PackedTrits"):
        tn.unpack(np.zeros(4, np.uint8))


@pytest.mark.parametrize(
    ("data", "shape", "fmt", "msg"),
    [
        (np.zeros(2, np.uint8), (10,), "2bit", r"uint8 of shape \(3,\), got uint8 of shape \(2,\)"),
        (np.zeros(3, np.uint8), (10,), "base3", r"must be uint8 of shape \(2,\)"),
        (np.zeros(3, np.int8), (10,), "2bit", "got int8"),
        (np.zeros(2, np.uint64), (10,), "bitplane", r"uint64 of shape \(2, 1\)"),
        (np.zeros((2, 1), np.uint32), (10,), "bitplane", "must be uint64"),
        (np.zeros((1, 3), np.uint8), (3, 10), "2bit", r"shape \(3, 3\)"),
    ],
)
def test_wrong_buffer(data, shape, fmt, msg):
    with pytest.raises(tn.FormatError, match=msg):
        tn.PackedTrits(data, shape, fmt)


def test_wrong_shape_argument():
    with pytest.raises(tn.ShapeMismatchError, match="rank >= 1"):
        tn.PackedTrits(np.zeros(1, np.uint8), (), "2bit")
    with pytest.raises(tn.ShapeMismatchError, match="negative"):
        tn.PackedTrits(np.zeros(1, np.uint8), (-4,), "2bit")
    assert tn.PackedTrits(np.zeros(1, np.uint8), np.int64(4), "2bit").shape == (4,)  # as NumPy
    with pytest.raises(TypeError, match="tuple of ints"):
        tn.PackedTrits(np.array([86], np.uint8), (1.9,), "2bit")
    with pytest.raises(TypeError, match="tuple of ints"):
        tn.PackedTrits(np.zeros((1, 1), np.uint8), "12", "2bit")


@pytest.mark.parametrize("shape", [-5, (2, -8), (), [3, 4.0], "12"])
def test_nbytes_refuses_bad_shapes(shape):
    error = TypeError if isinstance(shape, (str, list)) else tn.ShapeMismatchError
    with pytest.raises(error, match="shape must"):
        tn.nbytes(shape)


def noncanonical_base3():
    canonical = {(q * 256 + 242) // 243 for q in range(243)}
    return sorted(set(range(256)) - canonical)


def corrupt_cases(n):
    """(format, data, expected message) for buffers of 2 rows of n trits no pack writes."""
    cases = []
    two = tn.pack(np.zeros((2, n), np.int8), "2bit").data.copy()
    two[1, 0] = 0xFF  # code 3
    cases.append(("2bit", two, r"byte \(1, 0\) = 0xff"))
    for byte in noncanonical_base3():
        for at in {0, -1}:  # the unpack kernel stores its first units whole, its last apart
            b3 = tn.pack(np.zeros((2, n), np.int8), "base3").data.copy()
            b3[1, at] = byte
            where = at % b3.shape[1]
            cases.append(("base3", b3, rf"byte \(1, {where}\) = {byte:#04x}"))
    bp = tn.pack(np.zeros((2, n), np.int8), "bitplane").data.copy()
    bp[0, :, -1] = 1 << 3  # trit 3 of the last word in both planes
    cases.append(("bitplane", bp, r"word \(0, \d+\) has plus=0x0+8, minus=0x0+8"))
    if n % 4:
        pad = tn.pack(np.zeros((2, n), np.int8), "2bit").data.copy()
        pad[0, -1] &= 0x3F  # last padding code 1 -> 0
        cases.append(("2bit", pad, "padding is code 1"))
    if n % 5:
        pad = tn.pack(np.zeros((2, n), np.int8), "base3").data.copy()
        pad[1, -1] = 0  # all five trits -1: the padding ones too
        cases.append(("base3", pad, "canonical"))
    if n % 64:
        pad = tn.pack(np.zeros((2, n), np.int8), "bitplane").data.copy()
        pad[1, 1, -1] = np.uint64(1) << np.uint64(63)  # a minus bit past the end
        cases.append(("bitplane", pad, r"word \(1, \d+\) has plus=0x0+, minus=0x8"))
    return cases


@pytest.mark.parametrize("n", [7, 320, 640])
def test_corrupt_buffers(n, device):
    for fmt, data, msg in corrupt_cases(n):
        packed = tn.PackedTrits(data, (2, n), fmt)
        with pytest.raises(tn.InvalidTritsError, match=msg):
            tn.unpack(packed, device=device)
        for dst in FORMATS:
            if dst != fmt:
                with pytest.raises(tn.InvalidTritsError, match=msg):
                    packed.to(dst, device=device)
