"""The byte-wise SIMD popcount dot of bit-plane rows, across its chunk and tail sizes."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numba import njit

import tritnum as tn
from tritnum import vsa
from tritnum._kernels.cpu._llvm.popcount import dot_planes


@njit
def _dot(a, i, b, j):
    nw = a.shape[2]
    return dot_planes(a, 2 * nw * i, b, 2 * nw * j, nw)


# one word, whole 4-word vectors, 31-vector chunks (7936 trits) and the tails of each
@given(d=st.sampled_from([1, 64, 255, 256, 257, 4000, 7936, 7937, 8192, 20_000]),
       seed=st.integers(0, 2**32 - 1), density=st.floats(0.05, 1.0))
def test_dot_planes_matches_int64_dot(d, seed, density):
    rng = np.random.default_rng(seed)
    rows = rng.choice(np.array([-1, 0, 1], np.int8), size=(3, d),
                      p=[density / 2, 1 - density, density / 2])
    planes = tn.pack(rows, "bitplane").data
    for i, j in ((0, 1), (1, 2), (2, 2)):
        assert _dot(planes, i, planes, j) == int(rows[i].astype(np.int64) @ rows[j])


@pytest.mark.parametrize("metric", ["dot", "cosine"])
def test_search_on_long_bitplanes_matches_reference(metric):
    mem = vsa.random(300, 9000, seed=1, format="bitplane")
    q = vsa.random(4, 9000, seed=2, format="bitplane")
    got = vsa.search(q, mem, 5, metric, device="cpu")
    want = vsa.search(q, mem, 5, metric, device="numpy")
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
