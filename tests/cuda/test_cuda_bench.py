"""``python -m tritnum bench --device cuda``: data on the GPU, synchronized timing, no CPU bars."""

from __future__ import annotations

import numpy as np

from tritnum import _bench
from tritnum._bench.gpu import on_gpu, put
from tritnum._bench.harness import Case, measure
from tritnum._interop import is_cuda_array


def test_gpu_cases_drop_the_cpu_bars_and_still_run_both_sides():
    calls = []
    case = Case("f", "c", lambda: calls.append("ours"), "base",
                lambda: calls.append("theirs"), 5.0, 2)
    result = measure(on_gpu(case), 2, warmup=0.0)
    assert result.bar is None and result.meets_bar is None
    assert calls.count("ours") == 3 and calls.count("theirs") == 3  # warm-up + 2 timed each


def test_packing_rows_run_on_device_data():
    assert is_cuda_array(put(np.zeros(3, np.int8), "cuda"))
    assert isinstance(put(np.zeros(3, np.int8), "cpu"), np.ndarray)
    results = _bench.run(quick=True, device="cuda", rows=2, cols=64, families=("packing",))
    names = {r.name for r in results}
    assert {"pack 2bit", "unpack base3", "bitplane -> 2bit"} <= names
    assert all(r.bar is None and r.seconds > 0 and r.baseline_seconds > 0 for r in results)
