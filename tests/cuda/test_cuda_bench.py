"""``python -m tritnum bench --device cuda``: data on the GPU, synchronized timing, no CPU bars."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tritnum import _bench
from tritnum._bench import gpu
from tritnum._bench.gpu import PEAKS, Peak, Work, device_peak, limit_note, on_gpu, peak_of, put
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


def test_peaks_by_device_name():
    assert peak_of("NVIDIA H100 80GB HBM3")[0] == "H100"
    assert peak_of("NVIDIA H100 PCIe")[0] == "H100 PCIe"
    assert peak_of("NVIDIA H200")[0] == "H200"
    assert peak_of("NVIDIA H200 NVL")[0] == "H200 NVL"
    assert peak_of("NVIDIA A100-SXM4-80GB") is None
    h100 = PEAKS["H100"]
    assert h100.hbm == 3.35e12 and h100.ops["int8"] == 2 * h100.ops["fp16"]
    assert abs(h100.ops["popc"] - 2.09e12) < 0.01e12  # 132 SMs x 16 / 2 per clock, 1.98 GHz


def test_limit_note_names_the_binding_floor():
    peak = Peak(1e12, {"int8": 1e15})
    mem = limit_note(Work(1e9), peak, 2e-3)  # 1 ms floor at 1 TB/s, ran 2 ms
    assert mem.startswith("50.0% of limit (HBM-bound, floor 1000.0 us") and "50% HBM" in mem
    ops = limit_note(Work(1e9, 4e12, "int8"), peak, 8e-3)  # 4 ms of int8 beats 1 ms of HBM
    assert ops.startswith("50.0% of limit (int8-bound, floor 4000.0 us")
    assert "500.0 Tint8/s = 50%" in ops and "12% HBM" in ops


def test_gpu_rows_note_their_limit(monkeypatch):
    device_peak.cache_clear()
    monkeypatch.setattr(gpu, "device_peak", lambda: ("NVIDIA H100 80GB HBM3",
                                                      peak_of("NVIDIA H100 80GB HBM3")))
    case = Case("f", "c", lambda: None, "base", lambda: None, note=lambda s: "mine",
                work=Work(3.35e9))
    assert on_gpu(case).note(2e-3).startswith("mine; 50.0% of limit (HBM-bound")
    monkeypatch.setattr(gpu, "device_peak", lambda: ("SIMULATOR", None))
    assert on_gpu(replace(case, note=None)).note(1.0) == "no peak figures for 'SIMULATOR'"
    results = _bench.run(quick=True, device="cuda", rows=2, cols=64, families=("packing",))
    assert all("no peak figures" in r.note for r in results)  # every packing row has a floor


def test_gpu_family_rows_run_on_device_data():
    """``--family gpu``'s rows (tiny under the simulator): each side runs and is right."""
    from tritnum._bench.gpu_limits import gpu_limit_cases

    assert gpu_limit_cases(True, "cpu") == []  # GPU rows only
    cases = {case.name: case for case in gpu_limit_cases(True, "cuda")}
    gemm_baselines = 1 if gpu.gpu_torch() is None else 2  # NumPy; cuBLAS int8 and fp16
    assert len(cases) == 4 + gemm_baselines
    assert all(case.family == "gpu" for case in cases.values())
    for case in cases.values():
        case.baseline()
    gemv = [c for name, c in cases.items() if name.startswith("linear GEMV")]
    assert [c.params["mode"] for c in gemv] == ["float", "int8"]
    for case in gemv:
        assert case.run().shape == (case.params["out"],)
        assert case.work.bytes == case.params["weight_bytes"]  # the packed bytes alone
    gemm = next(c for name, c in cases.items() if name.startswith("linear GEMM"))
    assert gemm.run().shape == (gemm.params["rows"], gemm.params["out"])
    steady = next(c for name, c in cases.items() if "steady" in name)
    steady.run()
    assert steady.note(steady.params["calls"] * 1e-5) == "10.0 us a call (bar: <= 20 us)"
    search = next(c for name, c in cases.items() if name.startswith("search"))
    index, score = search.run()  # on the host: the best of n stored vectors, its dot product
    assert isinstance(index, np.ndarray) and index.shape == (1, 1)
    assert 0 <= index[0, 0] < search.params["n"] and abs(score[0, 0]) <= search.params["d"]
