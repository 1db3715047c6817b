"""Counters that outgrow 32 or 63 bits: accumulator widths follow the sizes (issue 15, item 5).

The inputs are made cheap (one stored vector broadcast with a zero stride, or the
counts handed to the arithmetic directly) so that sizes past 2**31 cost no memory.
"""

import numpy as np
import pytest

from tritnum._dispatch import kernel
from tritnum._kernels.cpu import vsa as cpu_vsa
from tritnum._kernels.shared import vsa as hv


@pytest.mark.parametrize("score", [hv.score, cpu_vsa._score], ids=["shared", "cpu"])
def test_cosine_of_vectors_with_billions_of_nonzeros(score):
    na = nb = np.int64(3_500_000_000)  # na * nb overflows int64
    assert score(hv.COSINE, na, na, nb, np.int64(0), na) == pytest.approx(1.0)
    assert score(hv.COSINE, -na, na, nb, np.int64(0), na) == pytest.approx(-1.0)


def test_votes_past_2_31_do_not_wrap():
    assert hv.votes_dtype(2**31 - 1) == np.int32 and hv.votes_dtype(2**31) == np.int64
    n = 2**31 + 64  # +1 votes: an int32 counter wraps to a negative total
    vs = np.broadcast_to(np.ones((1, 1, 1), np.int8), (n, 1, 1))  # one vector, n times
    assert kernel("vsa.bundle", "cpu")(vs, None, False, 1)[0, 0] == 1
