"""The int8 GEMV of weights in scale groups on their laid-out rows (``group_gemv``).

Its bits are every int8 path's (the oracle of ``test_group_sizes``: exact group sums
rescaled in one order); its layout is made on the first int8 call of few rows only and
kept with the tensor.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_group_sizes import rescaled

import tritnum as tn
from tritnum import _isa as isa
from tritnum._formats import FORMATS
from tritnum._kernels.cpu import group_gemv
from tritnum._kernels.cpu import matmul as cpu_matmul

pytestmark = pytest.mark.skipif(
    group_gemv.ROW_TILE is None,
    reason=f"this CPU ({isa.ISA}) lacks VNNI with GFNI: the packed GEMV takes every group size")

COLS = group_gemv.ROW_COLS


def tensor(rng, out, size, groups):
    trits = rng.integers(-1, 2, (out, size * groups), dtype=np.int8)
    scales = (rng.random((out, groups)) * 3 + 0.01).astype(np.float32)
    return trits, scales, tn.TernaryTensor(tn.pack(trits), scales, size)


@given(out=st.sampled_from([1, 7, COLS - 1, COLS, COLS + 3, 2 * COLS + 1]),
       size=st.sampled_from([16, 32, 48, 64, 96, 128, 256, 1024]), groups=st.integers(2, 9),
       rows=st.integers(1, cpu_matmul.GEMV_MAX_ROWS), seed=st.integers(0, 2**32 - 1))
def test_gemv_gives_the_rescale_bits(out, size, groups, rows, seed):
    """Straight on a panel (every size, small layers too), through ``tn.linear`` and, for
    the same bits, the packed GEMV (the route of CPUs without GFNI) on the same data."""
    rng = np.random.default_rng(seed)
    trits, scales, w = tensor(rng, out, size, groups)
    q = rng.integers(-128, 128, (rows, size * groups), dtype=np.int8)
    q[:, ::5] = -128
    xscale = (rng.random(rows) + 0.1).astype(np.float32)
    panel = group_gemv.GroupPanel(w.packed.data, scales, size * groups)
    expected = rescaled(q, xscale, trits, scales)
    np.testing.assert_array_equal(group_gemv.gemv_int8(q, xscale, panel), expected)
    np.testing.assert_array_equal(tn.linear(q, w, x_scale=xscale, device="cpu"), expected)
    np.testing.assert_array_equal(cpu_matmul.linear_int8(
        q, xscale, w.packed.data, FORMATS["2bit"], size * groups, scales, None), expected)


def test_layout_is_made_on_the_first_int8_gemv_and_kept():
    rng = np.random.default_rng(1)
    trits, scales, w = tensor(rng, 300, 128, 8)  # 307,200 weights: not a small layer
    x = rng.standard_normal((3, 1024)).astype(np.float32)
    tn.linear(x, w, device="cpu")  # float: the packed data as it is
    groups = w._cache["cpu_groups"]
    assert groups._panel is None
    tn.linear(x[:0], w, activations="int8", device="cpu")
    tn.linear(np.repeat(x, 6, axis=0), w, activations="int8", device="cpu")  # 18 rows: GEMM
    assert groups._panel is None
    y = tn.linear(x, w, activations="int8", device="cpu")
    codes, laid = groups.panel()
    assert groups.panel()[0] is codes and not codes.flags.writeable
    assert codes.nbytes == -(-300 // COLS) * COLS * w.packed.data.shape[1]
    assert laid.dtype == np.float32 and laid.shape == (-(-300 // COLS), 8, COLS)
    q, xscale = tn.quantize_activations(x)
    np.testing.assert_array_equal(y, rescaled(q, xscale, trits, scales))
    np.testing.assert_array_equal(tn.linear(x, w, activations="int8", device="cpu"), y)


def test_groups_that_are_not_whole_steps_keep_the_packed_gemv():
    rng = np.random.default_rng(2)
    _, _, w = tensor(rng, 400, 40, 10)  # 40 inputs: not a whole number of 16-input steps
    assert not group_gemv.applies(FORMATS["2bit"], 400, 10)
    tn.linear(rng.standard_normal(400).astype(np.float32), w, activations="int8")
    assert "cpu_groups" not in w._cache


def test_threads_meeting_the_first_call_get_the_same_bits():
    """No lock: threads that make the layout at once each get the oracle's bits."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(4)
    trits, scales, w = tensor(rng, 2 * COLS + 9, 64, 12)
    q = rng.integers(-128, 128, (4, 768), dtype=np.int8)
    xscale = (rng.random(4) + 0.1).astype(np.float32)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: tn.linear(q, w, x_scale=xscale, device="cpu"),
                                range(8)))
    expected = rescaled(q, xscale, trits, scales)
    for y in results:
        np.testing.assert_array_equal(y, expected)
    assert w._cache["cpu_groups"]._panel is not None
