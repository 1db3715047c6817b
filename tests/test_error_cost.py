"""The error path costs no more than the work: a corrupt unit in a large buffer is found
with the fast kernel a block of rows at a time, and only that block is decoded to name it.

tracemalloc sees NumPy's allocations; before, naming the bad byte decoded the whole
buffer in NumPy (about 12 bytes of temporaries per packed byte)."""

import tracemalloc

import numpy as np
import pytest

import tritnum as tn

ROWS, N = 1 << 12, 1 << 14  # 64 M trits: 16 MiB as 2bit, 16 blocks of rows


@pytest.fixture(scope="module", params=tn.FORMATS)
def corrupt(request):
    fmt = request.param
    data = tn.pack(np.ones((ROWS, N), np.int8), fmt).data.copy()
    if fmt == "bitplane":
        data[-1, :, -1] = 1  # both bits of the last trit of the last row
    else:
        data[-1, -1] = 0xFF
    return tn.PackedTrits(data, (ROWS, N), fmt)


def peak_of(call):
    tracemalloc.start()
    try:
        with pytest.raises(tn.InvalidTritsError, match=r"\(4095, "):
            call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_converting(corrupt):
    dst = "base3" if corrupt.format != "base3" else "2bit"
    out = tn.nbytes(corrupt.shape, dst)
    assert peak_of(lambda: corrupt.to(dst)) < out + 2 * corrupt.nbytes


def test_first_use_in_linear(corrupt):
    w = tn.TernaryTensor(corrupt, np.float32(1), copy=False)
    x = np.ones((1, N), np.float32)
    assert peak_of(lambda: tn.linear(x, w)) < corrupt.nbytes


def test_unpacking(corrupt):
    assert peak_of(lambda: tn.unpack(corrupt)) < ROWS * N + 2 * corrupt.nbytes
