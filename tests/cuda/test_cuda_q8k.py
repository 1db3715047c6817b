"""The CUDA Q8_K kernels against the NumPy reference (itself checked against a transcription
of ggml's C in tests/test_q8k.py) and that transcription itself, in both orders of the lane
update (fused into an FMA, and not), bit for bit, on tiny shapes.

Under the simulator :func:`small_launch` shrinks the thread blocks to 2 outputs (16
threads), so that a few outputs cover several blocks and a grid-stride loop.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda
from test_q8k import ORDERS, gguf_weights, llama_cpp

import tritnum as tn
from tritnum._dispatch import call
from tritnum._kernels.cuda import q8k as kernels

try:  # as tests/cuda/conftest.py
    from numba.cuda.core import config
except ImportError:  # older numba-cuda
    from numba.core import config

SIMULATOR = bool(getattr(config, "ENABLE_CUDASIM", 0))


@pytest.fixture(autouse=True)
def small_launch(monkeypatch, request):
    if SIMULATOR and not request.node.name.startswith("test_real_"):
        monkeypatch.setattr(kernels, "LANE_OUTPUTS", 2)


def activations(m, n, seed):
    """Rows with products at a half, equal |max| of both signs, a subnormal max, zeros."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, n)).astype(np.float32)
    x[0, :256] = np.arange(256) % 254 - np.float32(126.5)  # iscale = -1: all ties
    x[0, 0] = 127.0
    if m > 1:
        x[1, :256] = 0
        x[1, 3], x[1, 9] = -2.0, 2.0
    if m > 2:
        x[2, :256] = 0
        x[2, 5] = 1e-39
    return x


def test_quantize_matches_reference():
    x = activations(3, 512, 0)
    ref = call("quantize_q8k", "numpy", x)
    got = [a.copy_to_host() for a in call("quantize_q8k", "cuda", cuda.to_device(x))]
    for g, r in zip(got, ref, strict=True):
        assert g.dtype == r.dtype
        np.testing.assert_array_equal(g.view(np.uint8), r.view(np.uint8))  # -0.0 too


@pytest.mark.parametrize("fmt", ["2bit", "base3", "bitplane"])
@pytest.mark.parametrize("layout", ["block", "tensor", "group512"])
def test_linear_matches_reference_bit_for_bit(fmt, layout):
    rng = np.random.default_rng(1)
    v = rng.standard_normal((5, 512)).astype(np.float32)
    kwargs = {"block": {"group_size": 256}, "tensor": {}, "group512": {"group_size": 512}}
    w = tn.quantize(v, format=fmt, **kwargs[layout])
    x = activations(3, 512, 2)
    bias = rng.standard_normal(5).astype(np.float32)
    ref = tn.linear(x, w, bias, activations="q8_k", device="numpy")
    got = tn.linear(cuda.to_device(x), w, bias, activations="q8_k", device="cuda")
    assert tn.cuda_available() and got.dtype == np.float32
    np.testing.assert_array_equal(got.copy_to_host(), ref)


@pytest.mark.parametrize("blocks", range(1, 9))
@pytest.mark.parametrize("mode,dot", ORDERS)
def test_both_lane_orders_are_ggml_bit_for_bit(blocks, mode, dot):
    """Rows of 1..8 blocks with scales of several magnitudes, against the transcription of
    ggml's C (GCC's FMA, or no contraction); the orders differ from two blocks on."""
    rng = np.random.default_rng(blocks)
    n = 256 * blocks
    w = gguf_weights(2, n, rng)
    x = (rng.standard_normal((2, n)) * rng.uniform(0.1, 10, (2, blocks)).repeat(256, axis=1)
         ).astype(np.float32)
    got = tn.linear(cuda.to_device(x), w, activations=mode, device="cuda").copy_to_host()
    np.testing.assert_array_equal(got, llama_cpp(x, w, dot=dot))


def test_rejects_non_finite_x_on_the_device():
    w = tn.quantize(np.ones((2, 256)), group_size=256)
    x = np.ones((1, 256), np.float32)
    x[0, 17] = np.nan
    with pytest.raises(ValueError, match=r"x\[0, 17\] = nan"):
        tn.linear(cuda.to_device(x), w, activations="q8_k")


def test_real_launch_size():
    """The real 256-thread blocks (32 outputs x 8 lanes), a partly filled last block."""
    rng = np.random.default_rng(4)
    w = tn.quantize(rng.standard_normal((33, 256)), group_size=256)
    x = activations(1, 256, 5)
    np.testing.assert_array_equal(
        tn.linear(x, w, activations="q8_k", device="cuda"),
        tn.linear(x, w, activations="q8_k", device="numpy"))
