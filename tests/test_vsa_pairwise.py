"""similarity(..., pairwise=True): every row of a against every row of b (torchhd's matrix)."""

import numpy as np
import pytest

import tritnum as tn


def trits(shape, seed):
    return np.random.default_rng(seed).integers(-1, 2, shape).astype(np.int8)


@pytest.mark.parametrize("metric", ["dot", "cosine", "hamming"])
@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("shapes", [((3, 70), (4, 70)), ((70,), (4, 70)), ((2, 3, 70), (5, 70)),
                                    ((3, 70), (70,)), ((3, 70), (3, 70))])
def test_all_pairs_against_a_loop(device, metric, packed, shapes):
    a, b = trits(shapes[0], 1), trits(shapes[1], 2)
    want = np.empty(a.shape[:-1] + b.shape[:-1])
    for i in np.ndindex(a.shape[:-1]):
        for j in np.ndindex(b.shape[:-1]):
            want[i + j] = tn.vsa.similarity(a[i], b[j], metric, device="numpy")
    if packed:
        a, b = tn.pack(a, "bitplane"), tn.pack(b, "bitplane")
    got = tn.vsa.similarity(a, b, metric, pairwise=True, device=device)
    assert np.shape(got) == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12)
