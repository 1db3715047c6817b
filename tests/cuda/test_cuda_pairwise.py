"""similarity(pairwise=True) on the CUDA kernels: the same matrix as the NumPy reference."""

import numpy as np
import pytest

import tritnum as tn


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("metric", ["dot", "cosine", "hamming"])
def test_pairwise_matches_the_reference(packed, metric):
    rng = np.random.default_rng(5)
    a, b = (rng.integers(-1, 2, (n, 70)).astype(np.int8) for n in (3, 4))
    if packed:
        a, b = tn.pack(a, "bitplane"), tn.pack(b, "bitplane")
    want = tn.vsa.similarity(a, b, metric, pairwise=True, device="numpy")
    got = tn.vsa.similarity(a, b, metric, pairwise=True, device="cuda")
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)
