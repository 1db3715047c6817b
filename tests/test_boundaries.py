"""Every CPU kernel at sizes around its internal boundaries, against the NumPy reference.

Kernels cut rows into tasks of ``CHUNK`` storage units (a unit is 4, 5 or 8 trits),
into 128-trit SIMD blocks and 64-trit words, and hand tasks to threads from 1 MiB of
input on. An off-by-one at one of those edges writes past a buffer (issue 15:
``quantize(..., format="bitplane")`` counted the tasks of both bit planes and wrote
past the first) or drops the last trits; here each edge is crossed by one trit either
way, on two rows, so that row ends and task ends both fall on it.
"""

import numpy as np
import pytest

import tritnum as tn
from tritnum._kernels.cpu.matmul import INT32_EXACT, K_EXACT
from tritnum._kernels.cpu.packing import CHUNK

TRITS_PER_UNIT = {"2bit": 4, "base3": 5, "bitplane": 8}


def _sizes() -> list[int]:
    edges = {2**k for k in range(21)}
    edges |= {CHUNK * u * m for u in TRITS_PER_UNIT.values() for m in (1, 2)}
    return sorted({e + d for e in edges for d in (-1, 0, 1) if e + d > 0})


SIZES = _sizes()


def _trits(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng([n, seed]).integers(-1, 2, (2, n), dtype=np.int8)


def _weights(n: int) -> np.ndarray:
    return np.random.default_rng(n + 1).standard_normal((2, n)).astype(np.float32)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("fmt", tn.FORMATS)
def test_pack_unpack_convert(fmt, n):
    a = _trits(n)
    p = tn.pack(a, fmt, device="cpu")
    assert p == tn.pack(a, fmt, device="numpy")
    np.testing.assert_array_equal(tn.unpack(p, device="cpu"), a)
    for dst in tn.FORMATS:
        assert p.to(dst, device="cpu") == tn.pack(a, dst, device="numpy")


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("fmt", tn.FORMATS)
def test_quantize_every_scale_mode(fmt, n):
    w = _weights(n)
    modes = [{}, {"axis": -1}] + ([{"group_size": n // 2}] if n % 2 == 0 else [])
    for mode in modes:
        got = tn.quantize(w, format=fmt, device="cpu", **mode)
        want = tn.quantize(w, format=fmt, device="numpy", **mode)
        assert got.packed == want.packed, mode
        np.testing.assert_array_equal(got.scales, want.scales)


@pytest.mark.parametrize("n", [s for s in SIZES if s <= 2**20 + 1])
@pytest.mark.parametrize("fmt", tn.FORMATS)
def test_linear(fmt, n):
    w = tn.quantize(_weights(n), axis=-1, format=fmt, device="numpy")
    x = np.random.default_rng(n + 2).standard_normal((2, n)).astype(np.float32)
    for activations in ("float", "int8"):
        got = tn.linear(x, w, activations=activations, device="cpu")
        want = tn.linear(x, w, activations=activations, device="numpy")
        # float sums of n terms in another order: within n ulps of the largest partial sum
        bound = n * np.finfo(np.float32).eps * np.abs(x).sum(axis=1, keepdims=True) * 2
        np.testing.assert_array_less(np.abs(got - want), np.broadcast_to(bound + 1e-6, got.shape))


@pytest.mark.parametrize("n", SIZES)
def test_vsa_bitplanes(n):
    a, b = (tn.pack(t, "bitplane") for t in (_trits(n), _trits(n, 1)))
    for op in (tn.vsa.bind, tn.vsa.unbind):
        assert op(a, b, device="cpu") == op(a, b, device="numpy")
    assert tn.vsa.bundle(a, device="cpu") == tn.vsa.bundle(a, device="numpy")
    assert tn.vsa.permute(a, 3, device="cpu") == tn.vsa.permute(a, 3, device="numpy")
    for metric in ("dot", "cosine", "hamming"):
        np.testing.assert_array_equal(tn.vsa.similarity(a, b, metric, device="cpu"),
                                      tn.vsa.similarity(a, b, metric, device="numpy"))


def _extreme_trits(n: int) -> np.ndarray:
    """Two rows whose sums against +-127 activations are as large as a row of n allows."""
    t = np.ones((2, n), np.int8)
    t[1, ::7] = -1
    t[1, 1::11] = 0
    return t


@pytest.mark.parametrize("rows", [1, 2])  # one row takes the GEMV, two the tiled GEMM
@pytest.mark.parametrize("n", sorted({e + d for e in (K_EXACT, 2 * K_EXACT, INT32_EXACT)
                                      for d in (-1, 0, 1)}))
def test_int8_sums_stay_exact_past_the_accumulator_limits(n, rows):
    # K_EXACT bounds one float32 sum of trit * q (exact below 2**24), INT32_EXACT one
    # int32 sum of code * q (below 2**31); past them the kernels must split or widen
    t = _extreme_trits(n)
    w = tn.TernaryTensor(tn.pack(t, "2bit"), np.float32(1.0))
    q = np.full((rows, n), 127, np.int8)
    q[-1, 3::5] = -127
    y = tn.linear(q, w, x_scale=np.ones(rows, np.float32), device="cpu")
    exact = q.astype(np.int64) @ t.astype(np.int64).T  # up to 127 * 2**23 in magnitude
    np.testing.assert_allclose(y, exact, rtol=2 * np.finfo(np.float32).eps, atol=0)
