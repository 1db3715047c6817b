"""Matmul cases: tn.linear (GEMV and GEMM) against BLAS, with bandwidth and memory notes.

Also its q8_k activations (llama.cpp) against its int8 ones (bitnet.cpp); the GEMV's
rate per core and its scaling from 1 to 2 threads; weights with one scale per 32, 64,
128 and 256 inputs against one scale per tensor.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .gpu import Work, gpu_torch, put
from .harness import Case, time_call


def copy_bandwidth() -> float:
    """Bytes per second read plus written by a 256 MiB ``np.copyto`` (median of 5)."""
    src = np.ones(1 << 26, np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    return 2 * src.nbytes / statistics.median(time_call(lambda: np.copyto(dst, src))
                                              for _ in range(5))


def peak_extra_bytes(fn: Callable[[], Any]) -> int:
    """Peak bytes that ``fn`` allocates through Python and NumPy while it runs (tracemalloc)."""
    import tracemalloc

    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _gemv_note(w: Any, threads: int, bandwidth: float | None,
               memory: str) -> Callable[[float], str]:
    """Effective GB/s of packed weights (vs copy bandwidth) and multiply-adds per core.

    Without ``bandwidth`` (on the GPU) only the GB/s.
    """
    def note(seconds: float) -> str:
        rate = w.packed.nbytes / seconds
        if bandwidth is None:
            return f"{rate / 1e9:.1f} GB/s packed"
        return (f"{rate / 1e9:.1f} GB/s packed ({rate / bandwidth:.0%} of copy), "
                f"{w.packed.size / seconds / threads / 1e9:.1f} G MAC/s/core{memory}")
    return note


MODES = ("float", "int8", "q8_k")  # linear's activation modes, each against BLAS
GEMV_SWEEP = ((1024, 1024), (2048, 2048), (4096, 4096), (8192, 4096), (16384, 8192))
GEMV_SWEEP_QUICK = ((1024, 1024), (2048, 2048))
GEMV_BARS = {(4096, 4096): {"float": 3.0, "int8": 5.0}, (16384, 8192): {"int8": 6.0}}


def _params(op: str, rows: int, out: int, n: int, mode: str, threads: int | None,
            packed_bytes: int, vs: str) -> dict[str, Any]:
    """A matmul row's ``params`` (see ``report``): ``threads`` None = the process's count."""
    return {"op": op, "rows": rows, "out": out, "in": n, "mode": mode, "threads": threads,
            "macs": rows * out * n, "weight_bytes": packed_bytes, "vs": vs}


def _int8_gemm_bar() -> float:
    """The CPU's int8 GEMM bar against float32 BLAS, by SIMD level.

    2x with VNNI, 1x with AVX2's integer kernel, 0.85x where the int8 GEMM is BLAS
    itself (the portable level).
    """
    from .._isa import ISA

    return {"avxvnni": 2.0, "avx512vnni": 2.0, "avx2": 1.0}.get(ISA, 0.85)


def matmul_cases(quick: bool, device: str) -> list[Case]:
    """tn.linear against float32 ``x @ W.T`` with the dense matrix.

    The baseline is NumPy's (OpenBLAS); with ``device="cuda"`` it is torch's on the GPU
    (cuBLAS) where torch sees one, and both sides' data live on the GPU.
    """
    from .._threads import threads as cpu_threads
    from ..matmul import linear
    from ..packing import pack
    from ..quantize import TernaryTensor

    rng = np.random.default_rng(2)
    threads = 1 if device == "cuda" else cpu_threads()
    gpu = device == "cuda"
    torch = gpu_torch() if gpu else None
    bandwidth = None if gpu else copy_bandwidth()
    # the bars hold for the sizes; --quick only checks that everything runs. The
    # GEMV sweep (out x in) runs each activation mode against BLAS: the performance
    # page plots its rate against the matrix size
    sweep = GEMV_SWEEP_QUICK if quick else GEMV_SWEEP
    sizes = [(1, out, n, GEMV_BARS.get((out, n), {})) for out, n in sweep]
    sizes += [(64, 2048, 2048, {})] if quick else [
        (256, 4096, 4096, {"float": 0.85, "int8": 0.85 if gpu else _int8_gemm_bar()})]
    cases = []
    for rows, out, n, bars in sizes:
        trits = rng.integers(-1, 2, (out, n), dtype=np.int8)
        w = TernaryTensor(pack(put(trits, device)), np.float32(0.05))
        dense = trits * np.float32(0.05)
        del trits
        x = rng.standard_normal((rows, n), dtype=np.float32)
        x = x[0] if rows == 1 else x
        base_name, base = "x @ W.T (BLAS)", lambda x=x, d=dense: x @ d.T
        if torch is not None:
            tx, td = torch.from_numpy(x).cuda(), torch.from_numpy(dense).cuda()
            base_name, base = "x @ W.T (torch, cuBLAS)", lambda x=tx, d=td: x @ d.T
        xd = put(x, device)
        kind = "GEMV" if rows == 1 else f"GEMM {rows} rows"
        for act in MODES:
            memory = ""
            if (rows == 1 and out * n >= 1 << 27 and not gpu
                    and act != "q8_k"):  # peak-memory bar: <= 10% of W
                linear(x, w, activations=act, device=device)  # compiled, weights checked
                peak = peak_extra_bytes(lambda x=x, w=w, a=act: linear(x, w, activations=a,
                                                                          device=device))
                memory = f", peak extra {peak / 2**20:.2f} MiB ({peak / dense.nbytes:.3%} of W)"
            note = _gemv_note(w, threads, bandwidth, memory) if rows == 1 else None
            cases.append(Case(
                "matmul", f"linear {kind} {out}x{n} {act}",
                lambda x=xd, w=w, a=act: linear(x, w, activations=a, device=device),
                base_name, base, bars.get(act), 5 if rows > 1 else None, note,
                Work(w.packed.nbytes + x.nbytes + 4 * rows * out, 2 * rows * n * out,
                     "int8" if act == "int8" else "fp16"),
                _params("gemv" if rows == 1 else "gemm", rows, out, n, act, None,
                        w.packed.nbytes, "blas")))
    cases += thread_cases(quick, rng) if not gpu else []
    return cases + group_cases(quick, device, rng) + q8k_cases(quick, device, rng)


# the int8 GEMV's rate per core at 1 thread (issue 18), by SIMD level: 1.5x bitnet.cpp's
# best (99-103 GMAC/s) with VNNI, on par with it on AVX2
PER_CORE_BARS = {"avxvnni": 150e9, "avx512vnni": 150e9, "avx2": 100e9}
SCALING_BAR = 1.8  # 2 threads against 1 (on a quiet machine)
# weights with a scale per group of inputs against one per tensor (issue 29): a scale per
# 256 within 10 %, per 64 or 128 within 1.3x the time, per 32 within 1.6x
GROUP_BARS = {256: 0.9, 128: 1 / 1.3, 64: 1 / 1.3, 32: 1 / 1.6}


def _spin_for(seconds: float) -> Callable[[], None]:
    """A baseline that takes ``seconds``: what tritnum's time is held against for a rate bar."""
    def wait() -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
    return wait


def thread_cases(quick: bool, rng: np.random.Generator) -> list[Case]:
    """The CPU GEMV on 1 thread (GMAC/s per core) and on 2 (against 1), int8 and float.

    The thread count is set with ``tritnum._threads.limit``, which leaves numba's OpenMP
    pool alone. The int8 row on 1 thread is held against the time the issue's bar
    rate would take (``PER_CORE_BARS``; on the portable level, and for float
    activations, against BLAS without a bar); with fewer than 2 threads available
    the 2-thread rows are left out.
    """
    from .._isa import ISA
    from .._threads import available, limit
    from ..matmul import linear
    from ..packing import pack
    from ..quantize import TernaryTensor

    n = 2048 if quick else 4096
    trits = rng.integers(-1, 2, (n, n), dtype=np.int8)
    w = TernaryTensor(pack(trits), np.float32(0.05))
    dense = trits * np.float32(0.05)
    x = rng.standard_normal(n, dtype=np.float32)

    def on(threads: int, act: str) -> Callable[[], Any]:
        def call() -> Any:
            with limit(threads):
                return linear(x, w, activations=act, device="cpu")
        return call

    def per_core(seconds: float) -> str:
        return f"{n * n / seconds / 1e9:.1f} GMAC/s per core"

    cases = []
    for act in ("int8", "float", "q8_k"):
        rate = PER_CORE_BARS.get(ISA) if act == "int8" else None
        base_name, base = "x @ W.T (BLAS, its threads)", lambda: x @ dense.T
        if rate is not None:
            base_name, base = f"{rate / 1e9:.0f} GMAC/s/core ({ISA} bar)", _spin_for(n * n / rate)
        cases.append(Case("matmul", f"linear GEMV {n}x{n} {act}, 1 thread", on(1, act),
                          base_name, base, None if rate is None else 1.0, None, per_core,
                          params=_params("gemv", 1, n, n, act, 1, w.packed.nbytes,
                                         "blas" if rate is None else "rate bar")))
        if available() >= 2:
            cases.append(Case("matmul", f"linear GEMV {n}x{n} {act}, 2 threads", on(2, act),
                              "same, 1 thread", on(1, act),
                              SCALING_BAR if act != "q8_k" else None, None,
                              lambda s: f"{n * n / s / 2e9:.1f} GMAC/s per core",
                              params=_params("gemv", 1, n, n, act, 2, w.packed.nbytes,
                                             "1 thread")))
    return cases


def group_cases(quick: bool, device: str, rng: np.random.Generator) -> list[Case]:
    """Weights with one scale per group of inputs against one per tensor (``GROUP_BARS``).

    The same codes and call, GEMV and GEMM (256 rows; 64 with ``quick``), int8 and
    float activations; groups of 256 (TQ2_0's layout; only these with ``quick``),
    128, 64 and 32 (finer than a SIMD block).
    """
    from ..matmul import linear
    from ..packing import pack
    from ..quantize import TernaryTensor

    n = 2048 if quick else 4096
    packed = pack(put(rng.integers(-1, 2, (n, n), dtype=np.int8), device))
    flat = TernaryTensor(packed, np.float32(0.05))
    cases = []
    for size in (256,) if quick else tuple(GROUP_BARS):
        scales = rng.uniform(0.01, 1, (n, n // size)).astype(np.float32)
        grouped = TernaryTensor(packed, scales, size)
        for rows in (1, 64 if quick else 256):
            x = rng.standard_normal((rows, n), dtype=np.float32)
            x = put(x[0] if rows == 1 else x, device)
            kind = "GEMV" if rows == 1 else f"GEMM {rows} rows"
            for act in ("int8", "float"):
                cases.append(Case(
                    "matmul", f"linear {kind} {n}x{n} {act}, scale per {size}",
                    lambda x=x, a=act, w=grouped: linear(x, w, activations=a, device=device),
                    "same, one scale",
                    lambda x=x, a=act: linear(x, flat, activations=a, device=device),
                    GROUP_BARS[size], 5 if rows > 1 else None,
                    params={**_params("gemv" if rows == 1 else "gemm", rows, n, n, act, None,
                                      packed.nbytes, "one scale"), "scales": f"per {size}"}))
    return cases


Q8K_BAR = 0.87  # q8_k within 15 % of the int8 path: at least 1 / 1.15 of its speed


def q8k_cases(quick: bool, device: str, rng: np.random.Generator) -> list[Case]:
    """``activations="q8_k"`` against ``"int8"`` on the same weights, one row and many.

    Two weights: as read from a TQ2_0 file (one fp16 scale per 256 weights, where
    the bar applies: the layout q8_k is for) and with one scale per tensor (the
    int8 path's best case: one integer sum per row, where q8_k still rescales
    every 256-value block as ggml does).
    """
    from ..matmul import linear
    from ..packing import pack
    from ..quantize import TernaryTensor

    n = 2048 if quick else 4096
    packed = pack(put(rng.integers(-1, 2, (n, n), dtype=np.int8), device))
    blocks = rng.uniform(0.01, 1, (n, n // 256)).astype(np.float16).astype(np.float32)
    weights = {"TQ2_0 blocks": (TernaryTensor(packed, blocks, 256), Q8K_BAR),
               "one scale": (TernaryTensor(packed, np.float32(0.05)), None)}
    cases = []
    for rows in (1, 64 if quick else 256):
        x = rng.standard_normal((rows, n), dtype=np.float32)
        x = put(x[0] if rows == 1 else x, device)
        kind = "GEMV" if rows == 1 else f"GEMM {rows} rows"
        for label, (w, bar) in weights.items():
            cases.append(Case(
                "matmul", f"linear {kind} {n}x{n} q8_k, {label}",
                lambda x=x, w=w: linear(x, w, activations="q8_k", device=device),
                "linear int8 (same w)",
                lambda x=x, w=w: linear(x, w, activations="int8", device=device),
                bar, 5 if rows > 1 else None,
                params={**_params("gemv" if rows == 1 else "gemm", rows, n, n, "q8_k", None,
                                  packed.nbytes, "int8"),
                        "scales": "per 256" if label == "TQ2_0 blocks" else "one"}))
    return cases

