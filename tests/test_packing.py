"""Packing on every CPU-side backend against the NumPy reference (byte-exact)."""

import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numba import njit

import tritnum as tn
from tritnum import _isa as isa
from tritnum._kernels.cpu import packing as cpu_packing
from tritnum._kernels.cpu._llvm import packing as simd
from tritnum.testing import packed_trits, trit_arrays, trit_shapes

FORMATS = list(tn.FORMATS)


def reference_pack(a, fmt):
    """An independent scalar transcription of DESIGN §2 (pure Python, row by row)."""
    a = np.asarray(a).reshape(math.prod(a.shape[:-1]), a.shape[-1])
    out = []
    for row in a.tolist():
        n = len(row)
        if fmt == "2bit":
            codes = [t + 1 for t in row] + [1] * (-n % 4)
            out.append([sum(codes[i + k] << (2 * k) for k in range(4))
                        for i in range(0, len(codes), 4)])
        elif fmt == "base3":
            codes = [t + 1 for t in row] + [1] * (-n % 5)
            qs = [sum(codes[i + k] * 3 ** (4 - k) for k in range(5))
                  for i in range(0, len(codes), 5)]
            out.append([(q * 256 + 242) // 243 for q in qs])
        else:
            nw = -(-n // 64)
            plus = [sum(1 << (j % 64) for j in range(64 * w, min(n, 64 * w + 64)) if row[j] == 1)
                    for w in range(nw)]
            minus = [sum(1 << (j % 64) for j in range(64 * w, min(n, 64 * w + 64)) if row[j] == -1)
                     for w in range(nw)]
            out.append([plus, minus])
    return out


@given(trit_arrays(trit_shapes(max_dims=2, max_side=140)), st.sampled_from(FORMATS))
def test_reference_matches_scalar_transcription(a, fmt):
    packed = tn.pack(a, fmt, device="numpy")
    flat = packed.data.reshape(math.prod(a.shape[:-1]), *packed.data.shape[a.ndim - 1:])
    assert flat.tolist() == reference_pack(a, fmt)


@given(a=trit_arrays(), fmt=st.sampled_from(FORMATS))
def test_round_trip(a, fmt, device):
    packed = tn.pack(a, fmt, device=device)
    assert packed.shape == a.shape and packed.format == fmt
    ref = tn.pack(a, fmt, device="numpy")
    np.testing.assert_array_equal(packed.data, ref.data)
    out = tn.unpack(packed, device=device)
    assert out.dtype == np.int8 and out.shape == a.shape
    np.testing.assert_array_equal(out, a)


@given(
    rows=st.integers(1, 3),
    units=st.integers(1, 4),
    fmt=st.sampled_from(FORMATS),
    data=st.data(),
)
def test_fast_path_lengths(rows, units, fmt, device, data):
    """Contiguous int8 rows filling whole units (4, 5, 64 trits) take the word kernels."""
    n = units * 320
    a = data.draw(trit_arrays((rows, n), dtype=np.int8))
    packed = tn.pack(a, fmt, device=device)
    np.testing.assert_array_equal(packed.data, tn.pack(a, fmt, device="numpy").data)
    np.testing.assert_array_equal(tn.unpack(packed, device=device), a)


@given(p=packed_trits(), dst=st.sampled_from(FORMATS))
def test_convert_round_trip(p, dst, device):
    converted = p.to(dst, device=device)
    assert converted.format == dst and converted.shape == p.shape
    expected = tn.pack(tn.unpack(p, device="numpy"), dst, device="numpy")
    assert converted == expected
    assert converted.to(p.format, device=device) == p


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(
    "dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
              ">i4"]
)
def test_integer_dtypes(dtype, fmt, device):
    rng = np.random.default_rng(1)
    a = rng.integers(-1, 2, size=(3, 67))
    if np.dtype(dtype).kind == "u":
        a = np.abs(a)
    x = a.astype(dtype)
    np.testing.assert_array_equal(tn.unpack(tn.pack(x, fmt, device=device)), a)


@pytest.mark.parametrize("fmt", FORMATS)
def test_non_contiguous_and_read_only(fmt, device):
    rng = np.random.default_rng(2)
    base = rng.integers(-1, 2, size=(6, 2, 330)).astype(np.int8)
    views = [base[:, 0, ::2], base[::2, 1, 3:], base.transpose(2, 0, 1), base[..., ::-1]]
    for v in views:
        ro = v.copy()
        ro.flags.writeable = False
        for x in (v, ro):
            np.testing.assert_array_equal(tn.unpack(tn.pack(x, fmt, device=device)), x)
            assert tn.pack(x, fmt, device=device) == tn.pack(np.ascontiguousarray(x), fmt)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shape", [(0,), (1,), (0, 5), (5, 0), (2, 0, 3), (1, 1, 1)])
def test_empty_and_single(shape, fmt, device):
    a = np.ones(shape, np.int8)
    packed = tn.pack(a, fmt, device=device)
    units = -(-shape[-1] // {"2bit": 4, "base3": 5, "bitplane": 64}[fmt])
    planes = (2,) if fmt == "bitplane" else ()
    assert packed.data.shape == (*shape[:-1], *planes, units)
    np.testing.assert_array_equal(tn.unpack(packed, device=device), a)


@pytest.mark.parametrize("fmt", FORMATS)
def test_wrapping_big_endian_buffers(fmt, device):
    a = np.random.default_rng(4).integers(-1, 2, (3, 70), dtype=np.int8)
    p = tn.pack(a, fmt)
    swapped = tn.PackedTrits(p.data.astype(p.data.dtype.newbyteorder(">")), a.shape, fmt)
    assert swapped == p
    np.testing.assert_array_equal(tn.unpack(swapped, device=device), a)
    t = tn.quantize(a.astype(np.float32), axis=-1, format=fmt)
    big = tn.TernaryTensor(t.packed, t.scales.astype(">f4"), t.group_size)
    np.testing.assert_array_equal(big.dequantize(device=device), t.dequantize(device=device))


def test_list_input_and_properties():
    p = tn.pack([[1, 0, -1], [1, 1, 1]], "base3")
    assert p.shape == (2, 3) and p.ndim == 2 and p.size == 6
    assert p.nbytes == 2 and p.device == "cpu"
    assert repr(p) == "PackedTrits(shape=(2, 3), format='base3', nbytes=2, device='cpu')"
    assert p.to("base3") is p
    assert p != tn.pack([[1, 0, -1], [1, 1, 0]], "base3")
    assert p != tn.pack([[1, 0, -1], [1, 1, 1]], "2bit").to("bitplane")


@pytest.mark.parametrize("fmt", FORMATS)
def test_long_row_split_across_tasks(fmt, monkeypatch):
    """A single row longer than one task (and not a whole number of units), on 2 threads."""
    from tritnum._kernels.cpu import _parallel

    calls = []
    get_pool = _parallel._get_pool
    monkeypatch.setattr(_parallel, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.setattr(_parallel, "_get_pool", lambda: calls.append(1) or get_pool())
    monkeypatch.setattr(_parallel, "threads", lambda: 2)
    rng = np.random.default_rng(3)
    n = 64 * 5 * 1100 + 3
    a = rng.integers(-1, 2, size=n).astype(np.int8)
    for x in (a, a[:-3]):
        packed = tn.pack(x, fmt, device="cpu")
        assert packed == tn.pack(x, fmt, device="numpy")
        np.testing.assert_array_equal(tn.unpack(packed, device="cpu"), x)
        for dst in FORMATS:
            assert packed.to(dst, device="cpu") == tn.pack(x, dst, device="numpy")
    assert calls  # the work really was split across threads


def test_base3_unpack_tasks_write_only_their_own_trits():
    """The base3 unpack kernel stores 8 bytes for 5 trits; the 3 extra bytes must never
    reach the next task's trits, which another thread may have written already: run the
    tasks one by one from the last."""
    from tritnum._kernels.cpu import packing

    rng = np.random.default_rng(4)
    n = 5 * packing.CHUNK * 2 + 5 * 9 + 2
    trits = rng.integers(-1, 2, size=(2, n), dtype=np.int8)
    data = tn.pack(trits, "base3", device="numpy").data
    out = np.zeros_like(trits)
    tasks = 2 * -(-data.shape[1] // packing.CHUNK)
    for t in reversed(range(tasks)):
        assert packing._unpack3(data, 0, packing._BASE3_WORDS, out, t, t + 1) == 0
    np.testing.assert_array_equal(out, trits)


def _blocks_runner(pack2, unpack2, pack3):
    @njit
    def run(a, offset, o2, back, o3, planes, blocks, words):
        top2 = pack2(a, offset, o2, 1, blocks)
        threes = unpack2(o2, 1, back, 2, blocks)
        top3 = pack3(a, offset, o3, 1, blocks)
        return top2, threes, top3, simd.pack_planes(a, offset, planes, 8, 8 * blocks + 16, words)

    return run


# the SIMD blocks of every ISA level (tritnum._isa), made once, and their runner, compiled
# once (the sizes are arguments); a level the CPU lacks skips
SIMD = {level: (t, simd.make_pack_2bit(t), simd.make_unpack_2bit(t), simd.make_pack_base3(t))
        for level, t in simd.TARGETS.items()}
BLOCKS = {level: _blocks_runner(*kernels) for level, (_, *kernels) in SIMD.items()}


@pytest.mark.parametrize("level", isa.LEVELS)
@given(blocks=st.integers(0, 5), offset=st.integers(0, 9), seed=st.integers(0, 2**32 - 1),
       bad=st.sampled_from([None, 2, -2, 127, -128]), where=st.floats(0, 1))
def test_simd_blocks_match_numpy(level, blocks, offset, seed, bad, where):
    """Each level's 2bit pack/unpack and base3 pack blocks (and the bit-plane words, the
    same IR at every level) against the format's formulas, from any byte offset, writing
    nothing outside their blocks and flagging bad input."""
    if level not in isa.available():
        pytest.skip(f"this CPU lacks {level}: {', '.join(sorted(isa.REQUIRES[level]))}")
    target, run = SIMD[level][0], BLOCKS[level]
    lanes = units = target.lanes
    n2, n3 = blocks * lanes, blocks * units * 5
    rng = np.random.default_rng(seed)
    a = rng.integers(-1, 2, offset + max(n2, n3), dtype=np.int8)
    span = max(n2, n3)
    if bad is not None and span:
        a[offset + int(where * (span - 1))] = bad
    words = min(n2, n3) // 64
    o2 = np.full(n2 // 4 + 2, 0xEE, np.uint8)
    back = np.full(n2 + 3, 7, np.int8)
    o3 = np.full(blocks * units + 2, 0xEE, np.uint8)
    # plus words from byte 8, minus words from 8 blocks + 16 (words <= blocks), a byte after
    planes = np.full(16 * blocks + 24, 0xEE, np.uint8)
    top2, threes, top3, topp = run(a, offset, o2, back, o3, planes, blocks, words)
    trits = a[offset:offset + 64 * words]
    if (np.abs(trits.astype(np.int64)) > 1).any():
        assert topp > 2
    else:
        assert topp <= 2
        for plane, value in ((planes[8:], 1), (planes[8 * blocks + 16:], -1)):
            bits = np.packbits(trits == value, bitorder="little")
            np.testing.assert_array_equal(plane[:8 * words], bits)
        untouched = np.r_[planes[:8], planes[8 + 8 * words:8 * blocks + 16],
                          planes[8 * blocks + 16 + 8 * words:]]
        assert (untouched == 0xEE).all()
    codes = a[offset:].astype(np.int64) + 1
    if (codes[:n2] > 2).any() or (codes[:n2] < 0).any():
        assert top2 > 2
    else:
        assert top2 <= 2
        c = codes[:n2].reshape(-1, 4)
        np.testing.assert_array_equal(o2[1:-1], c @ [1, 4, 16, 64])
        np.testing.assert_array_equal(back[2:-1], a[offset:offset + n2])
        assert threes & 1 == 0
    if (codes[:n3] > 2).any() or (codes[:n3] < 0).any():
        assert top3 > 2
    else:
        assert top3 <= 2
        np.testing.assert_array_equal(o3[1:-1], (codes[:n3].reshape(-1, 5) @ [81, 27, 9, 3, 1]
                                                  * 256 + 242) // 243)
    assert o2[0] == o2[-1] == o3[0] == o3[-1] == 0xEE and back[:2].tolist() == [7, 7]
    assert back[-1] == 7


@pytest.mark.parametrize("level", isa.LEVELS)
def test_simd_unpack_flags_code_3(level):
    if level not in isa.available():
        pytest.skip(f"this CPU lacks {level}: {', '.join(sorted(isa.REQUIRES[level]))}")
    target, _, unpack2, _ = SIMD[level]

    @njit
    def run(data, out, blocks):
        return unpack2(data, 0, out, 0, blocks)

    for k in range(0, 8 * target.lanes // 4, 7):
        data = np.full(2 * target.lanes // 4, 0b01010101, np.uint8)
        data[k % data.size] |= 3 << (2 * (k % 4))
        out = np.empty(2 * target.lanes, np.int8)
        assert run(data, out, 2) & 1
        assert run(data, out, 0) == 0


def _one_long_corrupt_row(fmt):
    """A one-row buffer (16 MiB; bitplane 4 MiB) of trit 0 with one corrupt unit."""
    if fmt == "2bit":
        data = np.full((1, 16 << 20), 0x55, np.uint8)
        data[0, 3_000_001] = 0xD5
        return data, 4 * data.shape[1], "byte (0, 3000001) = 0xd5"
    if fmt == "base3":
        data = np.full((1, 16 << 20), 128, np.uint8)
        data[0, 3_000_001] = 20  # not a canonical base-3 byte
        return data, 5 * data.shape[1], "byte (0, 3000001) = 0x14"
    data = np.zeros((1, 2, 1 << 18), np.uint64)
    data[0, :, 100_001] = 1 << 5
    return data, 64 * data.shape[2], ("word (0, 100001) has plus=0x0000000000000020, "
                                      "minus=0x0000000000000020")


@pytest.mark.parametrize("fmt", ["2bit", "base3", "bitplane"])
def test_error_path_memory_is_bounded_by_the_work(fmt):
    """Naming the first corrupt unit of one long row decodes windows of it, not the
    whole row in NumPy (base3 took 71x the input, 1.1 GB for 16 MiB): unpacking
    (whose int8 output is the work) and checking (as a .safetensors load does) stay
    within a small multiple of the input, with the same message."""
    import tracemalloc

    from tritnum.packing import ensure_valid

    data, n, where = _one_long_corrupt_row(fmt)
    for run in (lambda p: p.unpack(device="cpu"), lambda p: ensure_valid(p, "cpu")):
        run(tn.pack(np.zeros((1, 64), np.int8), fmt))  # compiled before measuring
        tracemalloc.start()
        try:
            with pytest.raises(tn.errors.InvalidTritsError, match=re.escape(where)):
                run(tn.PackedTrits(data, (1, n), fmt))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        output = n  # the unpacked int8 trits
        assert peak < output + 3 * data.nbytes, (fmt, peak / data.nbytes)


@pytest.mark.parametrize("fmt", ["2bit", "base3", "bitplane"])
@pytest.mark.parametrize("seed", range(6))
def test_bad_unit_by_windows_names_the_unit_a_whole_decode_names(fmt, seed, monkeypatch):
    """Windows of a few units (padding included) find the first bad unit of each row
    as one decode of the whole rows does."""
    from tritnum._formats import FORMATS
    from tritnum._kernels.shared import packing as shared

    rng = np.random.default_rng(seed)
    f = FORMATS[fmt]
    rows, n = int(rng.integers(1, 4)), int(rng.integers(1, 700))
    data = tn.pack(rng.integers(-1, 2, (rows, n)).astype(np.int8), fmt).data.copy()
    raw = data.view(np.uint8).reshape(rows, -1)
    for _ in range(int(rng.integers(0, 3))):
        raw[rng.integers(rows), rng.integers(raw.shape[1])] = rng.integers(256)
    _, ok = shared.decode(data, f, n)
    bad = np.argwhere(~ok)
    expected = (int(bad[0, 0]), int(bad[0, 1])) if bad.size else None
    monkeypatch.setattr(shared, "BAD_UNIT_WINDOW_TRITS", f.per_unit * int(rng.integers(1, 4)))
    assert shared.bad_unit(data, f, n) == expected


def _decode_runner(unpack3, copy):
    @njit
    def run(data, soff, out, doff, blocks, planes, plus, minus, words, wout, a, aoff, c, coff, n):
        return (unpack3(data, soff, out, doff, blocks),
                simd.unpack_planes(planes, plus, minus, wout, 1, words),
                copy(a, aoff, c, coff, n))

    return run


DECODE = {level: (t, _decode_runner(simd.make_unpack_base3(t), simd.make_copy_trits(t)))
          for level, t in simd.TARGETS.items()}
_DIGITS = np.array([[((b * 3**n) % 256 * 3) >> 8 for n in range(5)] for b in range(256)]) - 1
_CANONICAL = np.isin(np.arange(256), (np.arange(243) * 256 + 242) // 243)


@pytest.mark.parametrize("level", isa.LEVELS)
@given(blocks=st.integers(0, 4), offset=st.integers(0, 9), seed=st.integers(0, 2**32 - 1),
       odd=st.booleans(), n=st.integers(0, 200))
def test_simd_decoders_and_copy_match_numpy(level, blocks, offset, seed, odd, n):
    """Each level's base3 unpack blocks, the bit-plane unpack words and the checked copy
    of int8 trits (dense permute) against the formulas, from any offset, writing nothing
    outside their output and flagging bad input: a non-canonical base3 byte (every byte
    value occurs), a bit set in both planes, a value outside {-1, 0, 1}."""
    if level not in isa.available():
        pytest.skip(f"this CPU lacks {level}: {', '.join(sorted(isa.REQUIRES[level]))}")
    target, run = DECODE[level]
    lanes = target.lanes
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, offset + blocks * lanes, dtype=np.uint8)
    if not odd:
        data = np.where(_CANONICAL[data], data, 0).astype(np.uint8)
    out = np.full(5 * blocks * lanes + 4, 9, np.int8)
    words = blocks
    plus, minus = rng.integers(0, 2**63, (2, words), dtype=np.uint64)
    if not odd:
        minus &= ~plus
    planes = np.concatenate([np.zeros(1, np.uint64), plus, minus]).view(np.uint8)
    wout = np.full(64 * words + 2, 9, np.int8)
    a = rng.integers(-1, 2, offset + n, dtype=np.int8)
    if odd and n:
        a[offset + rng.integers(n)] = rng.choice([2, -2, 127, -128])
    c = np.full(n + 7, 9, np.int8)
    flag3, both, top = run(data, offset, out, 3, blocks, planes, 8, 8 + 8 * words, words, wout,
                           a, offset, c, 3, n)
    body = data[offset:]
    assert bool(flag3) == (not _CANONICAL[body].all())
    np.testing.assert_array_equal(out[3:-1], _DIGITS[body].reshape(-1))
    assert (out[:3] == 9).all() and out[-1] == 9
    assert bool(both) == bool((plus & minus).any())
    bits = np.unpackbits(np.stack([plus, minus]).view(np.uint8), bitorder="little")
    np.testing.assert_array_equal(wout[1:-1], bits[:64 * words].astype(np.int8) - bits[64 * words:])
    assert wout[0] == wout[-1] == 9
    codes = a[offset:].astype(np.int64) + 1
    assert (top > 2) == bool(((codes < 0) | (codes > 2)).any())
    np.testing.assert_array_equal(c[3:3 + n], a[offset:])
    assert (c[:3] == 9).all() and (c[3 + n:] == 9).all()


@pytest.mark.parametrize("fmt", tn.FORMATS)
def test_large_packed_buffers_start_on_a_cache_line(fmt):
    """pack, quantize and .to() hand the GEMV weight rows whose 64-byte loads split no line."""
    trits = np.random.default_rng(0).integers(-1, 2, (64, 4096)).astype(np.int8)
    for packed in (tn.pack(trits, format=fmt, device="cpu"),
                   tn.quantize(trits.astype(np.float32), format=fmt, device="cpu").packed,
                   tn.pack(trits, device="cpu").to(fmt)):
        assert packed.nbytes >= cpu_packing.ALIGN_FROM
        assert packed.data.ctypes.data % cpu_packing.ALIGN == 0
        np.testing.assert_array_equal(packed.unpack(), trits)


@pytest.mark.parametrize("fmt", ["2bit", "base3", "bitplane"])
def test_the_host_route_of_pack_and_unpack_equals_the_general_route(fmt):
    """int8 NumPy arrays on the CPU skip the general route: same bytes, trits and errors."""
    rng = np.random.default_rng(5)
    for shape in [(1,), (7,), (3, 65), (2, 3, 300)]:
        a = rng.integers(-1, 2, shape).astype(np.int8)
        fast, general = tn.pack(a, fmt), tn.pack(a.astype(np.int16), fmt)  # int16: general
        assert fast.shape == general.shape and fast.format == general.format == fmt
        np.testing.assert_array_equal(fast.data, general.data)
        assert not fast.data.flags.writeable
        for device in ("auto", "numpy"):
            got = tn.unpack(fast, device=device)
            assert type(got) is np.ndarray and got.dtype == np.int8
            np.testing.assert_array_equal(got, a)
        bad = a.copy()
        bad.flat[len(bad.flat) // 2] = -2
        with pytest.raises(tn.errors.InvalidTritsError) as fast_error:
            tn.pack(bad, fmt)
        with pytest.raises(tn.errors.InvalidTritsError) as general_error:
            tn.pack(bad.astype(np.int16), fmt)
        assert str(fast_error.value) == str(general_error.value)
    corrupt = tn.pack(np.zeros(300, np.int8), fmt).data.copy()
    # a unit no encoder writes: code 3, a non-canonical base3 byte, set padding bits
    corrupt.reshape(-1)[-1] = 1 if fmt == "base3" else np.iinfo(corrupt.dtype).max
    wrapped = tn.PackedTrits(corrupt, (300,), fmt)
    with pytest.raises(tn.errors.InvalidTritsError) as fast_error:
        tn.unpack(wrapped)
    with pytest.raises(tn.errors.InvalidTritsError) as general_error:
        tn.unpack(wrapped, device="numpy")
    assert str(fast_error.value) == str(general_error.value)


@pytest.mark.parametrize("src", FORMATS)
@pytest.mark.parametrize("dst", FORMATS)
def test_cpu_convert_in_blocks_with_a_partial_last_one(monkeypatch, src, dst):
    """Blocks of 3 rows through one kept buffer (7 rows: 3, 3, 1): the NumPy backend's bytes;
    a corrupt last unit (codes past the row's end) in the last block says so."""
    from tritnum._formats import FORMATS as SPECS
    from tritnum._kernels.cpu import packing as cpu_packing

    n = 333
    monkeypatch.setattr(cpu_packing, "CONVERT_BLOCK_BYTES", 3 * n)
    a = np.random.default_rng(5).integers(-1, 2, (7, n), dtype=np.int8)
    p = tn.pack(a, src, device="numpy")
    out, ok = cpu_packing.convert(p.data, SPECS[src], SPECS[dst], n)
    assert ok
    np.testing.assert_array_equal(out, tn.pack(a, dst, device="numpy").data)
    bad = p.data.copy()
    bad.view(np.uint8)[6, -1] = 0xFF  # nonzero trits past n = 333 in every format
    assert not cpu_packing.convert(bad, SPECS[src], SPECS[dst], n)[1]
