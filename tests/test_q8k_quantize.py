"""The CPU Q8_K row quantizer (vectorized passes) against the shared block quantizer.

:func:`tritnum._kernels.shared.q8k.quantize_q8k_block` (pinned bit for bit to
ggml's ``quantize_row_q8_K_ref`` in ``test_q8k.py``, and run by the CUDA kernels)
is the oracle, block by block; NumPy's reference backend a second one. ``d``
must have the same bytes everywhere (NaN payloads included), ``q`` and ``bsums``
the same values wherever ``d`` is finite (the contract leaves them unspecified
in a block holding NaN or infinity).
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numba import njit

from tritnum._dispatch import call
from tritnum._kernels.shared.q8k import BSUM, QK_K, quantize_q8k_block

F32 = np.float32
_block = njit(quantize_q8k_block)


@njit
def _blockwise(x, q, d, bsums):
    for r in range(x.shape[0]):
        for b in range(d.shape[1]):
            d[r, b] = _block(x[r], QK_K * b, q[r], bsums[r], QK_K // BSUM * b)


def shared_quantize(x):
    """The shared quantizer on every block of ``x``; unwritten quants and bsums left 0."""
    m, k = x.shape
    q = np.zeros((m, k), np.int8)
    d = np.zeros((m, k // QK_K), F32)
    bsums = np.zeros((m, k // BSUM), np.int16)
    _blockwise(x, q, d, bsums)
    return q, d, bsums


def assert_same(x):
    q, d, bsums = call("quantize_q8k", "cpu", x)
    q0, d0, bsums0 = shared_quantize(x)
    finite = np.isfinite(d)
    np.testing.assert_array_equal(np.isnan(d), np.isnan(d0))
    # a NaN's payload is left to the compiler (LLVM may swap the operands of an add)
    assert d[~np.isnan(d)].tobytes() == d0[~np.isnan(d0)].tobytes()
    m = x.shape[0]
    np.testing.assert_array_equal(q.reshape(m, -1, QK_K)[finite], q0.reshape(m, -1, QK_K)[finite])
    np.testing.assert_array_equal(bsums.reshape(m, -1, 16)[finite],
                                  bsums0.reshape(m, -1, 16)[finite])
    # NumPy's reference too, also where -127 / max overflows (quants of either sign: 0)
    qn, dn, bsumsn = call("quantize_q8k", "numpy", x)
    assert d[finite].tobytes() == dn[finite].tobytes()
    np.testing.assert_array_equal(q.reshape(m, -1, QK_K)[finite], qn.reshape(m, -1, QK_K)[finite])
    np.testing.assert_array_equal(bsums.reshape(m, -1, 16)[finite],
                                  bsumsn.reshape(m, -1, 16)[finite])


SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-39, -1e-45, 3.4028235e38, -3.4028235e38,
            1.0, -1.0, 0.5, -0.5, 127.0, -127.0]


@st.composite
def blocks(draw):
    """One block of 256 float32: random, all ties, sparse or special, maybe with specials put in."""
    kind = draw(st.sampled_from(["floats", "ties", "sparse", "normal"]))
    if kind == "floats":
        block = draw(hnp.arrays(F32, QK_K, elements=st.floats(width=32)))
    elif kind == "ties":
        # max 127 * 2^e (iscale = -2^-e exactly) and half-integers times 2^e: every product a tie
        e = draw(st.integers(-20, 20))
        halves = draw(hnp.arrays(np.int32, QK_K, elements=st.integers(-127, 126))) + F32(0.5)
        block = (halves * F32(2.0**e)).astype(F32)
        block[draw(st.integers(0, QK_K - 1))] = F32(draw(st.sampled_from([127, -127])) * 2.0**e)
    elif kind == "sparse":
        block = np.zeros(QK_K, F32)
        nonzero = draw(st.lists(st.integers(0, QK_K - 1), max_size=4))
        block[nonzero] = draw(st.sampled_from([1e-39, -1e-39, 1e-37, -2.5, 7.0, -7.0]))
    else:
        seed = draw(st.integers(0, 2**32 - 1))
        block = np.random.default_rng(seed).standard_normal(QK_K).astype(F32)
    if draw(st.booleans()):  # the largest |x| twice, with either sign, or specials
        at = draw(st.lists(st.integers(0, QK_K - 1), min_size=1, max_size=3))
        top = np.abs(block[np.isfinite(block)]).max(initial=F32(1))
        block[at] = draw(st.sampled_from([top, -top, *SPECIALS]))
    return block.astype(F32)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), m=st.integers(1, 3), per_row=st.integers(1, 3))
def test_matches_the_shared_quantizer_bit_for_bit(data, m, per_row):
    x = np.stack([np.concatenate([data.draw(blocks()) for _ in range(per_row)])
                  for _ in range(m)])
    assert_same(x)


@pytest.mark.parametrize("case", ["zeros", "negative zeros", "subnormal max", "nan", "inf", "-inf",
                                  "tie for max", "tie for max, negative first", "halves",
                                  "largest floats"])
def test_edge_blocks(case):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3 * QK_K)).astype(F32)
    block = x[1, QK_K:2 * QK_K]  # a middle block, between two ordinary ones
    if case == "zeros":
        block[:] = 0
    elif case == "negative zeros":
        block[:] = -0.0
    elif case == "subnormal max":
        block[:] = 0
        block[[3, 200]] = F32(-1e-39), F32(1e-39)  # -127 / max overflows: quants 0, d = 0
    elif case in ("nan", "inf", "-inf"):
        block[100] = F32(case)
    elif case.startswith("tie for max"):
        block[[9, 40]] = (-50, 50) if case.endswith("first") else (50, -50)
    elif case == "halves":
        block[:] = np.arange(QK_K) % 254 - F32(126.5)
        block[17] = 127.0  # iscale = -1: every other product rounds half to even
    else:
        block[:] = rng.choice([-1, 1], QK_K) * F32(3.4028235e38)
    assert_same(x)


def test_many_rows_and_threads():
    """Enough rows that the pool splits them."""
    x = np.random.default_rng(3).standard_normal((300, 1024)).astype(F32)
    x[5, 256:512] = 0
    x[299, 7] = np.nan
    assert_same(x)
