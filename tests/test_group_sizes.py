"""Every scale-group size through the CPU kernels (issue 29 item 1, issue 28 item 5).

int8 ``linear`` sums integers exactly and then rescales in one order on every path
(group ``g``'s exact product into float64 slot ``g % 8``, the slots summed by halves,
times the row's scale, plus the bias in float32): the oracle below computes that order
from exact NumPy integer sums, so every path (GEMV, integer GEMM, segment fallback, fused
quantizer) must give its bits, and a row's bits cannot depend on the batch it came in.
Float ``linear`` is checked against the NumPy reference within float32 rounding.
"""

import numpy as np
import pytest
from conftest import EVERY_LEVEL
from hypothesis import given
from hypothesis import strategies as st
from test_dispatch import run_python

import tritnum as tn
from tritnum import _isa as isa
from tritnum import _threads

SIZES = (32, 64, 96, 128, 160, 256, 512, "tensor", "row")
BATCHES = (1, 3, 16, 17, 33)  # across the GEMV's 16 rows


def weights(rng, out, n, size):
    """Random trits, their ``(out, groups)`` float32 scales and the TernaryTensor."""
    trits = rng.integers(-1, 2, (out, n), dtype=np.int8)
    g = n if size in ("tensor", "row") else size
    scales = (rng.random((out, n // g)) * 3 + 0.01).astype(np.float32)
    if size == "tensor":
        scales[:] = scales[0, 0]
        return trits, scales, tn.TernaryTensor(tn.pack(trits), scales[0, 0])
    return trits, scales, tn.TernaryTensor(tn.pack(trits), scales, g)


def rescaled(q, xscale, trits, scales, bias=None):
    """The int8 result in the kernels' rescale order, from exact int64 group sums."""
    rows, out, groups = q.shape[0], trits.shape[0], scales.shape[1]
    sums = np.einsum("rgj,ogj->rog", q.astype(np.int64).reshape(rows, groups, -1),
                     trits.astype(np.int64).reshape(out, groups, -1))
    slots = np.zeros((rows, out, 8))
    for g in range(groups):  # exact products, added in group order into slot g % 8
        slots[..., g % 8] += sums[..., g] * scales[:, g].astype(np.float64)
    s = slots
    total = ((s[..., 0] + s[..., 4]) + (s[..., 2] + s[..., 6])) + (
        (s[..., 1] + s[..., 5]) + (s[..., 3] + s[..., 7]))
    y = (total * xscale.astype(np.float64)[:, None]).astype(np.float32)
    return y if bias is None else y + bias


def shape(size, groups):
    return groups * (300 if size in ("tensor", "row") else size)


@given(size=st.sampled_from(SIZES), groups=st.integers(1, 17), out=st.integers(1, 20),
       rows=st.sampled_from(BATCHES), with_bias=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_int8_paths_give_the_rescale_bits(size, groups, out, rows, with_bias, seed):
    """int8 q and the fused float x: the oracle's bits for every group size and batch."""
    rng = np.random.default_rng(seed)
    n = shape(size, groups)
    trits, scales, w = weights(rng, out, n, size)
    bias = rng.standard_normal(out).astype(np.float32) if with_bias else None
    q = rng.integers(-128, 128, (rows, n), dtype=np.int8)
    xscale = (rng.random(rows) + 0.1).astype(np.float32)
    y = tn.linear(q, w, bias, x_scale=xscale, device="cpu")
    np.testing.assert_array_equal(y, rescaled(q, xscale, trits, scales, bias))
    x = rng.standard_normal((rows, n)).astype(np.float32)
    fused = tn.linear(x, w, bias, activations="int8", device="cpu")
    q, xscale = tn.quantize_activations(x)
    np.testing.assert_array_equal(fused, rescaled(q, xscale, trits, scales, bias))


@pytest.mark.parametrize("size", SIZES)
def test_int8_row_bits_whatever_the_batch(size):
    """A row alone, in a batch of 16 (GEMV), of 17 and of 300 (GEMM): the same bits."""
    rng = np.random.default_rng(7)
    n = shape(size, 8 if size in ("tensor", "row") or size < 256 else 3)
    _, _, w = weights(rng, 24, n, size)
    x = rng.standard_normal((300, n)).astype(np.float32)
    q, xscale = tn.quantize_activations(x)
    whole = tn.linear(q, w, x_scale=xscale, device="cpu")
    for rows in (1, 16, 17):
        np.testing.assert_array_equal(
            tn.linear(q[:rows], w, x_scale=xscale[:rows], device="cpu"), whole[:rows])
        np.testing.assert_array_equal(
            tn.linear(x[:rows], w, activations="int8", device="cpu"), whole[:rows])


@pytest.mark.parametrize("size", (32, 64, 128, 256, 512))
def test_int8_group_sums_at_their_bounds(size):
    """Groups whose sums of ``code * q`` reach the ends of int16 (the GEMV merges lane sums
    of up to 128 inputs as int16): every trit 1 (code 2) against q = -128 or 127, 16 rows
    (the GEMV, its steps of 4 rows) and 17 (the GEMM); rows of whole 256-input blocks (the
    GEMV's group dots), steps of groups and a masked tail."""
    rng = np.random.default_rng(3)
    groups = 16 + max(1, 256 // size)
    trits = np.ones((9, groups * size), np.int8)
    trits[4:, ::7] = -1  # other rows: sums inside the bounds
    scales = (rng.random((9, groups)) * 3 + 0.01).astype(np.float32)
    w = tn.TernaryTensor(tn.pack(trits), scales, size)
    for value in (-128, 127):
        for rows in (16, 17):
            q = np.full((rows, groups * size), value, np.int8)
            q[1::2, ::3] = -value if value > 0 else 127  # other rows: mixed signs
            xscale = (rng.random(rows) + 0.1).astype(np.float32)
            np.testing.assert_array_equal(tn.linear(q, w, x_scale=xscale, device="cpu"),
                                          rescaled(q, xscale, trits, scales))


@pytest.mark.parametrize("size", (32, 64, 128, 96, 256))
@pytest.mark.parametrize("threads", (1, 2))
def test_threads(size, threads):
    """Weights large enough for the thread pool, on 1 and 2 threads: the oracle's bits."""
    rng = np.random.default_rng(size)
    trits, scales, w = weights(rng, 768, shape(size, 1536 // size), size)
    x = rng.standard_normal((20, trits.shape[1])).astype(np.float32)
    q, xscale = tn.quantize_activations(x)
    expected = rescaled(q, xscale, trits, scales)
    reference = tn.linear(x, w, device="numpy")
    with _threads.limit(threads):
        for rows in (1, 5, 20):
            np.testing.assert_array_equal(
                tn.linear(q[:rows], w, x_scale=xscale[:rows], device="cpu"), expected[:rows])
            y = tn.linear(x[:rows], w, device="cpu")
            np.testing.assert_allclose(y, reference[:rows], rtol=1e-4, atol=1e-3)


@given(size=st.sampled_from(SIZES), groups=st.integers(1, 17), out=st.integers(1, 20),
       rows=st.sampled_from(BATCHES), seed=st.integers(0, 2**32 - 1))
def test_float_paths_match_the_reference(size, groups, out, rows, seed):
    """Float x (GEMV and decode + sgemm GEMM): the float64 reference within float32 sums."""
    rng = np.random.default_rng(seed)
    n = shape(size, groups)
    trits, scales, w = weights(rng, out, n, size)
    x = rng.standard_normal((rows, n)).astype(np.float32)
    y = tn.linear(x, w, device="cpu")
    dense = trits.reshape(out, scales.shape[1], -1) * scales[..., None].astype(np.float64)
    reference = x.astype(np.float64) @ dense.reshape(out, n).T
    bound = np.abs(x).astype(np.float64) @ np.abs(dense.reshape(out, n)).T
    assert (np.abs(y - reference) <= 1e-6 * n ** 0.5 * bound + 1e-30).all()


@pytest.mark.parametrize("level", EVERY_LEVEL)
def test_every_level(level):
    """The int8 oracle and the float reference in a process forced to each level."""
    if level not in isa.available():
        pytest.skip(f"this CPU lacks {level}")
    if level == isa.ISA:
        pytest.skip("the tests above run the native level in this process")
    out = run_python("""
        import numpy as np, tritnum as tn
        from test_group_sizes import SIZES, rescaled, shape, weights
        rng = np.random.default_rng(1)
        for size in SIZES:
            for groups in (1, 4, 8, 12):
                n = shape(size, groups)
                trits, scales, w = weights(rng, 9, n, size)
                for rows in (1, 5, 17):
                    x = rng.standard_normal((rows, n)).astype(np.float32)
                    q, xscale = tn.quantize_activations(x)
                    exact = rescaled(q, xscale, trits, scales)
                    assert (tn.linear(q, w, x_scale=xscale) == exact).all(), (size, groups, rows)
                    assert (tn.linear(x, w, activations="int8") == exact).all(), (size, rows)
                    ref = tn.linear(x, w, device="numpy")
                    assert np.allclose(tn.linear(x, w), ref, rtol=1e-4, atol=1e-4), (size, rows)
        print("ok")
    """, TRITNUM_ISA=level, PYTHONPATH=str(__import__("pathlib").Path(__file__).parent))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


@pytest.mark.parametrize("fmt", ("base3", "bitplane"))
def test_other_formats(fmt):
    """"base3" and "bitplane" weights (re-packed for the integer GEMM): the oracle's bits."""
    rng = np.random.default_rng(3)
    for size in (32, 96, 256):
        trits, scales, w = weights(rng, 12, shape(size, 8), size)
        w = tn.TernaryTensor(tn.pack(trits, fmt), scales, size)
        x = rng.standard_normal((20, trits.shape[1])).astype(np.float32)
        q, xscale = tn.quantize_activations(x)
        for rows in (1, 20):
            np.testing.assert_array_equal(
                tn.linear(x[:rows], w, activations="int8", device="cpu"),
                rescaled(q[:rows], xscale[:rows], trits, scales))
