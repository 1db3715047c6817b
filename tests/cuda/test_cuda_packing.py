"""The CUDA packing kernels (``tritnum/_kernels/cuda/packing.py``) against the NumPy reference.

Runs under numba's CUDA simulator (see conftest.py) on tiny shapes: every launch is at least
one 128-thread block at ~150 µs per simulated thread, so each case stays at a few hundred
trits. Results must be byte-identical to ``device="numpy"``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numba import cuda

import tritnum as tn
import tritnum._dispatch as dispatch_module
import tritnum.packing as packing_module
from tritnum._kernels.shared import packing as codecs

try:
    from numba.cuda.core import config as _cuda_config
except ImportError:  # older numba-cuda
    from numba.core import config as _cuda_config

SIMULATOR = bool(getattr(_cuda_config, "ENABLE_CUDASIM", 0))
FORMATS = ("2bit", "base3", "bitplane")
PER_UNIT = {"2bit": 4, "base3": 5, "bitplane": 64}
SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")

# The simulator runs kernels as Python on NumPy scalars, where uint8 * 3 wraps and int8 << 6
# overflows; numba promotes to int64 on the GPU. An overflow warning means the simulator
# computed something the GPU would not: fail on it.
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


# ------------------------------------------------------------------------------- helpers
def host(x):
    """A NumPy copy of a device or host array."""
    return x.copy_to_host() if hasattr(x, "copy_to_host") else np.asarray(x)


def assert_on_device(x) -> None:
    assert not isinstance(x, np.ndarray), type(x)
    if SIMULATOR:  # the simulator's device arrays carry no __cuda_array_interface__
        assert getattr(x, "__cuda_ndarray__", False), type(x)
    else:
        assert hasattr(x, "__cuda_array_interface__"), type(x)


def assert_on_host(x) -> None:
    assert isinstance(x, np.ndarray), type(x)


def random_trits(shape, dtype="int8", seed=0) -> np.ndarray:
    lo = -1 if np.dtype(dtype).kind == "i" else 0
    return np.random.default_rng(seed).integers(lo, 2, size=shape).astype(dtype)


def check_pack(a: np.ndarray, fmt: str) -> tn.PackedTrits:
    """pack on CUDA == pack on NumPy, byte for byte; unpack on CUDA inverts it."""
    ref = tn.pack(a, fmt, device="numpy")
    got = tn.pack(a, fmt, device="cuda")
    assert got.format == fmt
    assert got.shape == a.shape
    assert got.device == "cpu"  # host in, host out
    assert_on_host(got.data)
    assert got.data.dtype == ref.data.dtype
    assert got.data.shape == ref.data.shape
    np.testing.assert_array_equal(got.data, ref.data)
    out = tn.unpack(got, device="cuda")
    assert_on_host(out)
    assert out.dtype == np.int8
    assert out.shape == a.shape
    np.testing.assert_array_equal(out, a.astype(np.int8))
    return got


def check_to(packed: tn.PackedTrits, dst: str) -> None:
    """``.to(dst)`` on CUDA equals the reference conversion."""
    got = packed.to(dst, device="cuda")
    ref = packed.to(dst, device="numpy")
    if dst == packed.format:
        assert got is packed
        return
    assert got.format == dst
    assert got.shape == packed.shape
    assert_on_host(got.data)
    np.testing.assert_array_equal(got.data, ref.data)
    assert got == ref


@st.composite
def small_trits(draw, dtypes=SIGNED + UNSIGNED, max_trits=300, max_n=140):
    """Trit arrays of rank 1-3 with at most ``max_trits`` elements, any last-axis length."""
    lead = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    rows = math.prod(lead)
    n = draw(st.integers(0, min(max_n, max_trits // max(rows, 1))))
    dtype = np.dtype(draw(st.sampled_from(dtypes)))
    lo = -1 if dtype.kind == "i" else 0
    return draw(hnp.arrays(dtype, (*lead, n), elements=st.integers(lo, 1)))


def canonical_base3_bytes() -> dict[int, tuple[int, ...]]:
    """Byte -> its five codes, enumerated from DESIGN §2 (q = sum c_n 3^(4-n))."""
    table = {}
    for codes in itertools.product(range(3), repeat=5):
        q = sum(c * 3 ** (4 - i) for i, c in enumerate(codes))
        table[(q * 256 + 242) // 243] = codes
    return table


BASE3 = canonical_base3_bytes()
NON_CANONICAL_BASE3 = sorted(set(range(256)) - set(BASE3))


# ---------------------------------------------- the shared codecs, as the simulator runs them
def test_base3_table_from_design():
    assert len(BASE3) == 243  # the encoding is injective
    assert NON_CANONICAL_BASE3 == [1, 20, 40, 60, 79, 99, 119, 138, 158, 178, 197, 217, 237]
    assert BASE3[0xFF] == (2, 2, 2, 2, 2)  # 0xFF is canonical: five +1 trits
    assert BASE3[0x00] == (0, 0, 0, 0, 0)


@pytest.mark.parametrize("dtype", ["uint8", "int16"])
def test_codecs_with_numpy_scalars(dtype):
    """The per-unit codecs run as plain Python on NumPy scalars (what the simulator does).

    numba types them with int64 arithmetic; under Python, NumPy scalars keep their width
    (NEP 50), so any reliance on promotion shows up here first, without a kernel launch.
    """
    row = np.arange(256, dtype=np.uint8)  # every byte once
    for b in range(256):
        ok = codecs.unit_ok(1, row, b, 5 * 256, 0)
        assert bool(ok) == (b in BASE3), f"base3 unit_ok({b})"
        if b in BASE3:
            digits = tuple(int(codecs.read_code(1, row, 5 * b + k, 0)) for k in range(5))
            assert digits == BASE3[b], f"base3 read_code of byte {b}"
        codes = tuple((b >> (2 * k)) & 3 for k in range(4))
        assert bool(codecs.unit_ok(0, row, b, 4 * 256, 0)) == (3 not in codes), f"2bit {b}"
        got = tuple(int(codecs.read_code(0, row, 4 * b + k, 0)) for k in range(4))
        assert got == codes, f"2bit read_code of byte {b}"
    signed = np.dtype(dtype).kind == "i"
    for trits in itertools.product((-1, 0, 1) if signed else (0, 1), repeat=5):
        src = np.array(trits, dtype=dtype)
        assert int(codecs.encode_unit(0, src, 0, 4)) == sum(
            (t + 1) << (2 * k) for k, t in enumerate(trits[:4])
        ), trits
        q = sum((t + 1) * 3 ** (4 - k) for k, t in enumerate(trits))
        assert int(codecs.encode_unit(1, src, 0, 5)) == (q * 256 + 242) // 243, trits
        plus = sum(1 << k for k, t in enumerate(trits) if t == 1)
        minus = sum(1 << k for k, t in enumerate(trits) if t == -1)
        assert int(codecs.encode_unit(2, src, 0, 5)) == plus | minus << 8, trits
    top = np.array([np.iinfo(dtype).max, np.iinfo(dtype).min], dtype=dtype)
    for fmt in (0, 1, 2):
        for start in (0, 1):
            if top[start] in (-1, 0, 1):
                continue
            assert codecs.encode_unit(fmt, top, start, 1) == -1, (fmt, top[start])


# ------------------------------------------------------------------ pack / unpack / to
@pytest.mark.parametrize("fmt", FORMATS)
@given(a=small_trits())
def test_pack_matches_reference(fmt, a):
    check_pack(a, fmt)


@pytest.mark.parametrize(("src", "dst"), list(itertools.product(FORMATS, FORMATS)))
@given(a=small_trits(dtypes=("int8",), max_trits=200))
def test_to_matches_reference(src, dst, a):
    check_to(tn.pack(a, src, device="numpy"), dst)


SHAPES = [
    (0,), (1,), (3,), (4,), (5,), (6,), (63,), (64,), (65,), (129,),
    (2, 0), (0, 7), (3, 1), (1, 1, 1), (2, 3, 13), (2, 2, 65),
]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_shapes(fmt, shape):
    a = random_trits(shape, seed=sum(shape))
    packed = check_pack(a, fmt)
    for dst in FORMATS:
        check_to(packed, dst)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", [*SIGNED, *UNSIGNED, ">i2", ">i4"])
def test_dtypes(fmt, dtype):
    check_pack(random_trits((2, 37), dtype, seed=1), fmt)


def _views():
    base = random_trits((4, 6, 71), seed=3)
    row = random_trits(67, seed=4)
    readonly = random_trits((3, 33), seed=5)
    readonly.flags.writeable = False
    return {
        "every-other-column": base[0, :, ::2],
        "reversed-last-axis": base[1, :, ::-1],
        "offset-slice": base[:, 1:-1, 3:-2],
        "transposed": base[:, :, :9].transpose(2, 0, 1),
        "strided-3d": base[::2, ::3, ::5],
        "broadcast": np.broadcast_to(row, (3, 67)),
        "read-only": readonly,
        "int16-columns": random_trits((5, 90), "int16", seed=6)[:, 1::3],
    }


VIEWS = _views()


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", list(VIEWS))
def test_non_contiguous_and_read_only(fmt, name):
    view = VIEWS[name]
    before = view.copy()
    check_pack(view, fmt)
    np.testing.assert_array_equal(view, before)  # input untouched


@pytest.mark.parametrize("fmt", FORMATS)
def test_all_units_every_code(fmt):
    """Every code combination of a storage unit at once, padding included."""
    if fmt == "base3":
        codes = np.array([BASE3[b] for b in sorted(BASE3)], dtype=np.int8)  # 243 units
    else:
        codes = np.array(list(itertools.product(range(3), repeat=4)), dtype=np.int8)  # 81 units
    a = (codes.reshape(1, -1) - 1)[:, :-1]  # drop one trit: the last unit is padded
    packed = check_pack(a, fmt)
    for dst in FORMATS:
        check_to(packed, dst)


# --------------------------------------------------------------------------- bad input
BAD_VALUES = [
    ("int8", 2), ("int8", -2), ("int8", 127), ("int8", -128),
    ("int16", 300), ("int32", -7), ("int64", 2**40),
    ("uint8", 2), ("uint8", 255), ("uint16", 65535), ("uint32", 2**32 - 1),
    ("uint64", 2**64 - 1),
]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(("dtype", "value"), BAD_VALUES, ids=lambda v: str(v))
def test_pack_rejects_non_trits(fmt, dtype, value):
    a = random_trits((2, 9), dtype, seed=7)
    a[1, 8] = value  # the last trit: lies in a padded unit of every format
    with pytest.raises(tn.InvalidTritsError, match=r"\[1, 8\]"):
        tn.pack(a, fmt, device="cuda")


def _corrupt_cases():
    """(format, n, mutate(data) -> None) for buffers no encoder writes."""
    cases = []

    def set_byte(row, byte, value):
        def mutate(data):
            data[row, byte] = value
        return mutate

    # "2bit", n = 7: byte 1 holds trits 4, 5, 6 and one padding slot (bits 6-7)
    for k in range(4):
        cases.append((f"2bit-code3-trit{k}", "2bit", 7, set_byte(1, 0, 0x55 | 3 << 2 * k)))
    cases.append(("2bit-code3-padding", "2bit", 7, set_byte(1, 1, 0x15 | 3 << 6)))
    cases.append(("2bit-padding-minus", "2bit", 7, set_byte(0, 1, 0x15)))
    cases.append(("2bit-padding-plus", "2bit", 7, set_byte(1, 1, 0x15 | 2 << 6)))
    cases.append(("2bit-all-ones", "2bit", 8, set_byte(0, 1, 0xFF)))
    # "base3": every non-canonical byte, in a full unit
    for b in NON_CANONICAL_BASE3:
        cases.append((f"base3-byte{b}", "base3", 10, set_byte(1, 1, b)))
    # "base3" padding: n = 7, byte 1 holds trits 5, 6 and three padding digits (code 1)
    for digit in (2, 4):
        for code in (0, 2):
            codes = [1] * 5
            codes[digit] = code
            q = sum(c * 3 ** (4 - i) for i, c in enumerate(codes))
            byte = (q * 256 + 242) // 243
            cases.append((f"base3-padding-d{digit}-c{code}", "base3", 7, set_byte(0, 1, byte)))
    # "bitplane", n = 70: two words per plane, bits 70..127 of word 1 are padding

    def set_bit(row, plane, trit, both=False):
        def mutate(data):
            w, bit = divmod(trit, 64)
            data[row, plane, w] |= np.uint64(1) << np.uint64(bit)
            if both:
                data[row, 1 - plane, w] |= np.uint64(1) << np.uint64(bit)
        return mutate

    for trit in (0, 63, 64, 69):
        cases.append((f"bitplane-both-{trit}", "bitplane", 70, set_bit(1, 0, trit, both=True)))
    for plane, trit in ((0, 70), (1, 71), (0, 127), (1, 127)):
        cases.append((f"bitplane-pad-p{plane}-{trit}", "bitplane", 70, set_bit(0, plane, trit)))
    return cases


CORRUPT = _corrupt_cases()


@pytest.mark.parametrize(("fmt", "n", "mutate"), [c[1:] for c in CORRUPT],
                         ids=[c[0] for c in CORRUPT])
def test_corrupt_buffers_raise(fmt, n, mutate):
    trits = random_trits((2, n), seed=n)
    data = tn.pack(trits, fmt, device="numpy").data.copy()
    mutate(data)
    corrupt = tn.PackedTrits(data, (2, n), fmt)
    with pytest.raises(tn.InvalidTritsError):  # the oracle agrees the buffer is corrupt
        tn.unpack(corrupt, device="numpy")
    with pytest.raises(tn.InvalidTritsError, match=f"corrupt '{fmt}'"):
        tn.unpack(corrupt, device="cuda")
    for dst in FORMATS:
        if dst != fmt:
            with pytest.raises(tn.InvalidTritsError, match=f"corrupt '{fmt}'"):
                corrupt.to(dst, device="cuda")


def test_every_canonical_base3_byte_decodes():
    data = np.array([sorted(BASE3)], dtype=np.uint8)  # (1, 243): 1215 trits
    packed = tn.PackedTrits(data, (1, 5 * 243), "base3")
    want = np.array([BASE3[b] for b in sorted(BASE3)], dtype=np.int8).reshape(1, -1) - 1
    np.testing.assert_array_equal(tn.unpack(packed, device="cuda"), want)


# ------------------------------------------------------------------------ data on the GPU
@pytest.fixture
def resolved(monkeypatch):
    """The devices that kernels were resolved for, in call order."""
    seen: list[str] = []
    real = dispatch_module.kernel

    def spy(op, device):
        seen.append(device)
        return real(op, device)

    monkeypatch.setattr(dispatch_module, "kernel", spy)
    monkeypatch.setattr(packing_module, "kernel", spy)  # its host route takes the CPU's
    return seen


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("device", ["auto", "cuda"])
def test_gpu_input_stays_on_gpu(fmt, device, resolved):
    a = random_trits((2, 3, 41), seed=8)
    ref = tn.pack(a, fmt, device="numpy")
    ref_to = {dst: ref.to(dst, device="numpy") for dst in FORMATS}
    resolved.clear()
    packed = tn.pack(cuda.to_device(a), fmt, device=device)
    assert packed.device == "cuda"
    assert_on_device(packed.data)
    assert packed.shape == a.shape
    np.testing.assert_array_equal(host(packed.data), ref.data)

    out = tn.unpack(packed, device=device)
    assert_on_device(out)
    assert tuple(out.shape) == a.shape
    np.testing.assert_array_equal(host(out), a)
    assert_on_device(packed.unpack())

    for dst in FORMATS:
        moved = packed.to(dst, device=device)
        assert moved.device == "cuda"
        assert_on_device(moved.data)
        np.testing.assert_array_equal(host(moved.data), ref_to[dst].data)
    assert resolved and set(resolved) == {"cuda"}


@pytest.mark.parametrize("fmt", FORMATS)
def test_wrapped_gpu_buffer(fmt):
    a = random_trits((3, 29), seed=9)
    ref = tn.pack(a, fmt, device="numpy")
    packed = tn.PackedTrits(cuda.to_device(ref.data), a.shape, fmt)
    assert packed.device == "cuda"
    out = tn.unpack(packed)
    assert_on_device(out)
    np.testing.assert_array_equal(host(out), a)
    assert packed == ref


@pytest.mark.parametrize("fmt", FORMATS)
def test_corrupt_gpu_buffer_raises(fmt):
    n = 13
    data = tn.pack(np.zeros((2, n), np.int8), fmt, device="numpy").data.copy()
    if fmt == "bitplane":
        data[1, :, 0] = 1  # trit 0 has both bits
    else:
        data[1, 0] = NON_CANONICAL_BASE3[0] if fmt == "base3" else 0xFF
    packed = tn.PackedTrits(cuda.to_device(data), (2, n), fmt)
    with pytest.raises(tn.InvalidTritsError):
        tn.unpack(packed)
    other = "2bit" if fmt != "2bit" else "base3"
    with pytest.raises(tn.InvalidTritsError):
        packed.to(other)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda a: cuda.to_device(a)[:, ::2], id="strided"),
        pytest.param(lambda a: cuda.to_device(a)[:, 1:-1], id="offset"),
        pytest.param(lambda a: cuda.to_device(a.reshape(3, 5, 9))[:, ::2, 1:], id="strided-3d"),
        pytest.param(lambda a: cuda.to_device(a.astype(np.uint64) * 0 + 1), id="uint64"),
        pytest.param(lambda a: cuda.to_device(a.astype(np.int32)), id="int32"),
        pytest.param(lambda a: cuda.to_device(a[:, :0]), id="empty-rows"),
        pytest.param(lambda a: cuda.to_device(a[:0]), id="no-rows"),
    ],
)
def test_gpu_input_variants(make):
    x = make(random_trits((3, 45), seed=10))
    want = host(x)
    packed = tn.pack(x, "base3")
    assert packed.device == "cuda"
    assert_on_device(packed.data)
    np.testing.assert_array_equal(host(packed.data), tn.pack(want, "base3", device="numpy").data)
    out = tn.unpack(packed)
    assert_on_device(out)
    np.testing.assert_array_equal(host(out), want)


def test_gpu_input_rejects_non_trits():
    a = random_trits((2, 11), seed=11)
    a[1, 10] = 2
    with pytest.raises(tn.InvalidTritsError, match=r"\[1, 10\]"):
        tn.pack(cuda.to_device(a), "2bit")


def test_auto_follows_the_data(resolved):
    a = random_trits((2, 21), seed=12)
    with tn.use_device("auto"):
        assert tn.pack(a, "2bit").device == "cpu"
        assert resolved == ["cpu"]
        resolved.clear()
        assert tn.pack(cuda.to_device(a), "2bit").device == "cuda"
        assert resolved == ["cuda"]


def test_default_cuda_runs_host_data_on_cuda(resolved):
    a = random_trits((2, 21), seed=13)
    with tn.use_device("cuda"):
        packed = tn.pack(a, "bitplane")
        out = tn.unpack(packed)
    assert resolved == ["cuda", "cuda"]
    assert packed.device == "cpu"  # the result goes back where the input lived
    assert_on_host(out)
    np.testing.assert_array_equal(out, a)


def test_explicit_device_beats_the_data(resolved):
    a = random_trits((2, 21), seed=14)
    packed = tn.pack(cuda.to_device(a), "2bit", device="numpy")
    assert resolved == ["numpy"]
    assert packed.device == "cuda"  # still placed where the input lived
    np.testing.assert_array_equal(host(packed.data), tn.pack(a, "2bit", device="numpy").data)


def test_known_good_codes_never_wait_for_the_flag(monkeypatch):
    """unpack and convert of encoder-written codes launch only; a wrapped buffer is checked."""
    from tritnum._kernels.cuda import _launch

    trits = np.array([[1, 0, -1, 1, 1], [0, 0, 1, -1, -1]], np.int8)
    packed = tn.pack(cuda.to_device(trits))
    reads = []
    real = _launch.is_set
    monkeypatch.setattr(_launch, "is_set", lambda bad: reads.append(1) or real(bad))
    np.testing.assert_array_equal(tn.unpack(packed).copy_to_host(), trits)
    np.testing.assert_array_equal(tn.unpack(packed.to("base3")).copy_to_host(), trits)
    assert reads == []
    wrapped = tn.PackedTrits(packed.data, trits.shape, "2bit")
    np.testing.assert_array_equal(tn.unpack(wrapped).copy_to_host(), trits)
    assert reads
