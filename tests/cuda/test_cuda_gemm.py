"""``linear``'s decoded-weights GEMM (``tritnum/_kernels/cuda/gemm.py``) without a GPU.

Under the simulator, CPU torch tensors stand in for CUDA ones (a :class:`gemm.Bridge`
that copies where the GPU's hands over zero-copy): the decode, the per-group matmuls,
the epilogue kernel and the cache run as they would on a GPU. The int8 path must equal
the NumPy reference bit for bit; the float path differs by float32 rounding only.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from numba import cuda

import tritnum as tn
from tritnum._kernels.cuda import gemm

torch = pytest.importorskip("torch")


def _host(a):
    return a.copy_to_host() if hasattr(a, "copy_to_host") else np.asarray(a)


CPU = gemm.Bridge(torch, lambda a: torch.from_numpy(_host(a)),
                  lambda t: cuda.to_device(t.numpy()))


@pytest.fixture
def cpu_torch(monkeypatch):
    """The GEMM branch routed through the decoded weights and CPU torch."""
    monkeypatch.setattr(gemm, "cuda_bridge", lambda: CPU)
    monkeypatch.setattr(gemm, "use_torch", lambda *args: True)


def weights(out, n, fmt, group_size, seed=0):
    w = np.random.default_rng(seed).standard_normal((out, n)).astype(np.float32)
    kwargs = {"group_size": group_size} if group_size else {"axis": -1}
    return tn.quantize(w, format=fmt, device="numpy", **kwargs)


@pytest.mark.usefixtures("cpu_torch")
@pytest.mark.parametrize(("fmt", "group_size"), [("2bit", None), ("base3", 16), ("bitplane", 8)])
def test_int8_path_is_exact(fmt, group_size):
    m, out, n = 20, 8, 32  # torch._int_mm: m > 16, multiples of 8
    w = weights(out, n, fmt, group_size)
    x = np.random.default_rng(1).standard_normal((m, n)).astype(np.float32) * 3
    bias = np.linspace(-1, 1, out, dtype=np.float32)
    got = tn.linear(x, w, bias, activations="int8", device="cuda")
    np.testing.assert_array_equal(got, tn.linear(x, w, bias, activations="int8",
                                                 device="numpy"))


@pytest.mark.usefixtures("cpu_torch")
@pytest.mark.parametrize("group_size", [None, 8])
def test_float_path_to_float32_rounding(group_size):
    m, out, n = 6, 5, 24
    w = weights(out, n, "2bit", group_size)
    x = np.random.default_rng(2).standard_normal((m, n)).astype(np.float32)
    got = tn.linear(x, w, device="cuda")
    want = tn.linear(x, w, device="numpy")
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())


@pytest.mark.parametrize("groups", [1, 3])
def test_scale_group_epilogue(groups):
    """Group sums times scales in float64, then x scale and bias, one float32 rounding."""
    rng = np.random.default_rng(groups)
    m, out = 3, 5
    parts = rng.integers(-500, 500, (groups, m, out)).astype(np.int32)
    scales = rng.random((out, groups)).astype(np.float32)
    xscale = rng.random(m).astype(np.float32)
    bias = rng.standard_normal(out).astype(np.float32)
    acc = cuda.device_array((m, out) if groups > 1 else (0, 0), np.float64)
    y = cuda.device_array((m, out), np.float32)
    for gi in range(groups):
        gemm.scale_group[1, 32](parts[gi], scales, gi, xscale, bias, acc, y)
    want = sum(parts[g].astype(np.float64) * scales[:, g].astype(np.float64)
               for g in range(groups))
    want = (want * xscale[:, None].astype(np.float64) + bias.astype(np.float64))
    np.testing.assert_array_equal(y.copy_to_host(), want.astype(np.float32))


def test_decoded_once_per_device_array(monkeypatch):
    calls = []
    real = gemm.unpack
    monkeypatch.setattr(gemm, "unpack", lambda *a: calls.append(1) or real(*a))
    w = weights(8, 32, "2bit", None)
    data = cuda.to_device(w.packed.data)
    for _ in range(2):
        gemm._weights(CPU, data, w.packed._format, 32, 1, True)
    blocks = gemm._weights(CPU, data, w.packed._format, 32, 4, False)  # float32: again
    assert blocks.shape == (4, 8, 8) and blocks.is_contiguous()  # a block per scale group
    np.testing.assert_array_equal(blocks[1].numpy(), w.packed.unpack()[:, 8:16])
    assert len(calls) == 2 and len(gemm._decoded[id(data)]) == 2
    del data
    gc.collect()
    assert len(gemm._decoded) == 0  # the decoded copy goes with the packed weights


def test_rule():
    use = gemm.use_torch
    assert not use(64, 64, 64, 1, True, backend="numba", bridge=CPU)  # opt-in only
    assert use(64, 64, 64, 1, True, backend="torch", bridge=CPU)
    assert use(64, 64, 64, 8, False, backend="torch", bridge=CPU)  # groups of 8
    assert not use(64, 64, 64, 16, False, backend="torch", bridge=CPU)  # groups of 4
    assert not use(16, 64, 64, 1, True, backend="torch", bridge=CPU)  # _int_mm: m > 16
    assert use(16, 64, 64, 1, False, backend="torch", bridge=CPU)  # matmul: any m
    assert not use(64, 64, 60, 1, True, backend="torch", bridge=CPU)  # _int_mm: out % 8
    if gemm.cuda_bridge() is None:  # no GPU torch here: never chosen by default
        assert not use(64, 64, 64, 1, True, backend="torch")
