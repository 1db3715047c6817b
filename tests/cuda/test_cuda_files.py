"""Files from GPU data: device arrays and GPU ternary tensors are written from the host."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

import tritnum as tn


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_gpu_tensors_are_saved_from_the_host(suffix, tmp_path):
    pytest.importorskip("safetensors")
    w = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    t = tn.quantize(cuda.to_device(w), group_size=4)
    assert t.packed.device == "cuda"
    bias = np.arange(3, dtype=np.float32)
    path = tmp_path / f"m{suffix}"
    tn.save(path, {"w": t, "b": cuda.to_device(bias)})
    with tn.use_device("cuda"):  # the trits of the file are checked on the default device
        back = tn.load(path)
    host = tn.quantize(w, group_size=4)
    assert back["w"].packed == host.packed and back["w"].group_size == 4
    np.testing.assert_array_equal(back["w"].scales, host.scales)
    np.testing.assert_array_equal(back["b"], bias)
