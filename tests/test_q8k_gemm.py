"""The Q8_K GEMM (many rows of ``activations="q8_k"``) on the integer GEMM's tile, every level.

Its panels are checked against ggml's lane partition, its micro-kernel against
a NumPy model of the float32 combine, and the whole GEMM bit for bit against the
transcription of ggml in :mod:`test_q8k` (in this process) and against the NumPy
reference (which that transcription pins) at every other level the CPU has, in a
subprocess (``TRITNUM_ISA``).
"""

import numpy as np
import pytest
from conftest import EVERY_LEVEL
from hypothesis import given
from hypothesis import strategies as st
from numba import njit
from test_dispatch import run_python
from test_int8_gemm import codes_of, needs
from test_q8k import ORDERS, QK_K, gguf_weights, hostile_rows, llama_cpp

import tritnum as tn
from tritnum import _isa as isa
from tritnum._kernels.cpu._llvm import q8k_gemm
from tritnum._kernels.cpu.matmul import GEMV_MAX_ROWS
from tritnum._kernels.shared.q8k import fma32

F32 = np.float32
GEMM_ROWS = GEMV_MAX_ROWS + 1  # the fewest rows that take the GEMM


def _runner(kernel):
    @njit
    def run(ap, bp, sp, xp, wp, c, blocks, fused):
        kernel(ap, 5, bp, 3, blocks, sp, 2, xp, 1, wp, 4, c, fused)

    return run


TILES = {level: (tile, _runner(q8k_gemm.make_q8k_tile(tile)))
         for level, tile in q8k_gemm.TILES.items()}


@njit
def _panel(w, b, stride, lane_stride):
    q8k_gemm.q8k_panel(w, 1, b, 2, stride, lane_stride)


@njit
def _lay_out(q, a, stride, lane_stride):
    q8k_gemm.lay_out_q8k(q, 3, a, 2, stride, lane_stride)


def steps_of(v, first, size, stride, lane_stride):
    """The 16 steps of ``size`` bytes that a block's layout put at ``first``, in order 2 L + h."""
    at = [first + s // 2 * lane_stride + s % 2 * stride for s in range(16)]
    return np.stack([v[i:i + size] for i in at]), max(at) + size


def ggml_lanes(codes, q):
    """``(..., 8)``: ggml's lane L of one block, the products of values with (e % 32) // 4 == L."""
    e = np.arange(QK_K)
    return np.stack([(codes * q)[..., (e % 32) // 4 == lane].sum(-1) for lane in range(8)], -1)


@given(seed=st.integers(0, 2**32 - 1))
def test_panels_meet_in_ggml_lanes(seed):
    """Step 2 L + h of the weight panel against the same step of the activations: lane L."""
    rng = np.random.default_rng(seed)
    w = rng.integers(0, 256, 64 + 5, dtype=np.uint8)
    q = rng.integers(-128, 128, QK_K + 7, dtype=np.int8)
    stride = 4 + int(rng.integers(0, 3))
    lane_stride = 2 * stride + 4 * int(rng.integers(0, 3))
    b = np.full(2 + 16 * lane_stride + 3, 0xAB, np.uint8)
    a = np.full(2 + 16 * (lane_stride + 24) + 3, 99, np.int8)
    _panel(w, b, stride, lane_stride)
    _lay_out(q, a, stride + 12, lane_stride + 24)
    steps_w, end_w = steps_of(b, 2, 4, stride, lane_stride)  # (s, byte)
    steps_q, end_q = steps_of(a, 2, 16, stride + 12, lane_stride + 24)
    steps_q = steps_q.reshape(16, 4, 4)  # (s, n, byte)
    assert (b[:2] == 0xAB).all() and (b[end_w:] == 0xAB).all()
    assert (a[:2] == 99).all() and (a[end_q:] == 99).all()
    # the weight bytes of step s are PANEL_ORDER's, the activations their values 4 byte + n
    np.testing.assert_array_equal(steps_w.reshape(-1), w[1:65][list(q8k_gemm.PANEL_ORDER)])
    step_sums = np.einsum("sbn,snb->s", codes_of(steps_w).astype(np.int64),
                          steps_q.astype(np.int64))
    codes = codes_of(w[1:65]).reshape(-1).astype(np.int64)  # value 4 byte + n
    np.testing.assert_array_equal(step_sums.reshape(8, 2).sum(-1),
                                  ggml_lanes(codes, q[3:3 + QK_K].astype(np.int64)))


@pytest.mark.parametrize("level", sorted(q8k_gemm.TILES))
@given(blocks=st.integers(0, 3), fused=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_micro_kernel_matches_the_float32_combine(level, blocks, fused, seed):
    """c[r, j]: per block and lane (steps (lane, block, half)), the int32 sum minus the
    chunk sum, times dx * dw, added in float32 lane by lane (one FMA if ``fused``), then
    hsum_float_8."""
    needs(level)
    tile, run = TILES[level]
    rows, cols, steps = tile.rows, tile.cols, 16 * blocks
    rng = np.random.default_rng(seed)
    b = rng.integers(0, 256, (steps, cols, 4), dtype=np.uint8)
    a = rng.integers(-127, 128, (steps, rows, 16), dtype=np.int8)
    chunk = rng.integers(-4064, 4065, (blocks, 8, rows)).astype(np.int32)
    dx = (rng.standard_normal((blocks, rows)) * 1e-2).astype(F32)
    dw = rng.uniform(0.01, 2, (blocks, cols)).astype(F32)
    bp = np.concatenate([np.zeros(3, np.uint8), b.reshape(-1)])
    ap = np.concatenate([np.zeros(5, np.int8), a.reshape(-1)])
    sp = np.concatenate([np.zeros(2, np.int32), (q8k_gemm.MAGIC - chunk).reshape(-1)])
    xp = np.concatenate([np.full(1, np.nan, F32), dx.reshape(-1)])
    wp = np.concatenate([np.full(4, np.nan, F32), dw.reshape(-1)])
    c = np.full((8 + blocks) * rows * cols + 3, 7.0, F32)
    run(ap, bp, sp, xp, wp, c, blocks, fused)
    codes = codes_of(b).astype(np.int64)  # (t, j, byte, n)
    q = a.reshape(steps, rows, 4, 4).astype(np.int64)  # (t, r, n, byte)
    sums = np.einsum("tjbn,trnb->trj", codes, q).reshape(8, blocks, 2, rows, cols).sum(2)
    lanes = (sums.swapaxes(0, 1) - chunk[..., None]).astype(F32)  # (block, lane, r, j)
    acc = np.zeros((8, rows, cols), F32)
    for blk in range(blocks):
        scale = dx[blk][:, None] * dw[blk][None, :]
        acc = fma32(lanes[blk], scale, acc) if fused else acc + lanes[blk] * scale
    expected = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
    np.testing.assert_array_equal(c[:rows * cols].reshape(rows, cols), expected)
    assert (c[-3:] == 7.0).all()


@pytest.mark.skipif(not q8k_gemm.TILE, reason=f"the {isa.ISA} level keeps the dot products")
@pytest.mark.parametrize("qtype", ["TQ2_0", "TQ1_0"])
@pytest.mark.parametrize("mode,dot", ORDERS)
def test_gemm_is_llama_cpp_bit_for_bit(qtype, mode, dot):
    rng = np.random.default_rng(1)
    w = gguf_weights(35, 768, rng, qtype)
    x = hostile_rows(GEMM_ROWS, 768, rng)
    bias = rng.standard_normal(35).astype(F32)
    y = tn.linear(x, w, bias, activations=mode, device="cpu")
    np.testing.assert_array_equal(y, llama_cpp(x, w, qtype, dot=dot, bias=bias))


@pytest.mark.parametrize("level", EVERY_LEVEL)
def test_every_level_end_to_end(level):
    """The GEMM in a process forced to each level, threaded too, against the reference."""
    needs(level)
    out = run_python("""
        import sys
        sys.path.insert(0, "tests")
        import numpy as np, tritnum as tn
        from test_q8k import gguf_weights, hostile_rows
        from tritnum._kernels.cpu._llvm import q8k_gemm
        rng = np.random.default_rng(0)
        cases = [(gguf_weights(4100, 1024, rng), 40),  # > 1 MiB: the thread pool
                 (gguf_weights(33, 512, rng, "TQ1_0", "base3"), 17),
                 (tn.quantize(rng.standard_normal((20, 1024)), group_size=512), 61),
                 (tn.quantize(rng.standard_normal((7, 256)), axis=-1), 300)]
        for (w, m), mode in zip(cases, ["q8_k", "q8_k_unfused"] * 2):
            x = hostile_rows(m, w.shape[1], rng)
            y = tn.linear(x, w, activations=mode, device="cpu")
            assert np.array_equal(y, tn.linear(x, w, activations=mode, device="numpy"),
                                  equal_nan=True), (w.shape, m, mode)
        print(q8k_gemm.TILE is not None)
    """, TRITNUM_ISA=level)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(level != "portable")
