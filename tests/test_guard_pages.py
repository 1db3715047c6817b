"""The word-parallel CPU kernels read and write with unaligned loads that numba's
bounds checking does not see. Here every buffer they touch ends right before an
unmapped page, so one byte too far is a segfault rather than a silent read."""

import ctypes
import mmap

import numpy as np
import pytest

import tritnum as tn
from tritnum._formats import FORMATS
from tritnum._kernels.cpu import packing, vsa_search
from tritnum._kernels.shared.packing import byte_rows

PAGE = mmap.PAGESIZE


@pytest.fixture(scope="module")
def tail_of_mapping():
    """A function giving ``nbytes`` of writable memory that end where a PROT_NONE page starts."""
    buf = mmap.mmap(-1, 3 * PAGE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.mprotect(ctypes.c_void_p(base + 2 * PAGE), PAGE, 0) == 0  # PROT_NONE
    region = np.frombuffer(buf, dtype=np.uint8, count=2 * PAGE)

    def at_end(nbytes):
        return region[2 * PAGE - nbytes:]

    return at_end


@pytest.mark.parametrize("fmt", list(tn.FORMATS))
def test_buffers_ending_at_a_guard_page(fmt, tail_of_mapping):
    rng = np.random.default_rng(7)
    spec = FORMATS[fmt]
    for rows in (1, 3):
        for n in [*range(0, 70), 127, 128, 129, 199, 200, 257, 319, 320, 321]:
            trits = rng.integers(-1, 2, size=(rows, n), dtype=np.int8)
            expected = tn.pack(trits, fmt, device="numpy")
            if not trits.size:
                continue
            # trits read by pack
            guarded = tail_of_mapping(trits.size).view(np.int8).reshape(rows, n)
            guarded[...] = trits
            assert tn.pack(guarded, fmt, device="cpu") == expected
            # packed bytes read by unpack (bitplane words keep their 8-byte alignment)
            data = tail_of_mapping(expected.nbytes).view(spec.dtype).reshape(expected.data.shape)
            data[...] = expected.data
            packed = tn.PackedTrits(data, (rows, n), fmt)
            np.testing.assert_array_equal(tn.unpack(packed, device="cpu"), trits)
            # trits written by the unpack kernels
            out = tail_of_mapping(trits.size).view(np.int8).reshape(rows, n)
            out[...] = 0
            src, half = byte_rows(expected.data, spec)
            tasks = rows * -(-(half or src.shape[1]) // packing.CHUNK)
            if fmt == "2bit":
                bad = packing._unpack2(src, half, out, 0, tasks)
            elif fmt == "base3":
                bad = packing._unpack3(src, half, packing._BASE3_WORDS, out, 0, tasks)
            else:
                bad = packing._unpackbp(src, half, out, 0, tasks)
            assert bad == 0
            np.testing.assert_array_equal(out, trits)


@pytest.mark.parametrize("wide", [False, pytest.param(True, marks=pytest.mark.skipif(
    not vsa_search.HAS_VPOPCNTDQ, reason="this CPU lacks AVX-512 VPOPCNTDQ (the wide tile)"))])
def test_search_rows_ending_at_a_guard_page(wide, tail_of_mapping):
    """The tiles read whole vectors past each row's last word: never past the memory's end."""
    rng = np.random.default_rng(3)
    for m, d in ((1, 64), (3, 65), (5, 700), (2, 1000), (7, 9)):
        trits = rng.integers(-1, 2, size=(m, d), dtype=np.int8)
        planes = tn.pack(trits, "bitplane").data
        want = tn.vsa.search(trits[:3], trits, 1, "dot", device="numpy")
        for rows in (trits, planes):
            guarded = tail_of_mapping(rows.nbytes).view(rows.dtype).reshape(rows.shape)
            guarded[...] = rows
            idx, _ = vsa_search.search_tiles(guarded[:3], guarded, 1, 0, d, wide)
            np.testing.assert_array_equal(idx, want[0])
