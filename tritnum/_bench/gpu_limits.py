"""``--family gpu`` (with ``--device cuda``): the rows issue 32's bars are set on.

The ``matmul`` and ``vsa`` families already time every op on the GPU against torch and
torchhd, with each row's fraction of the GPU's limit (:mod:`.gpu`). These rows add what
they cannot show:

- ``linear`` batch 1 on weights larger than the L2 cache (32768 x 16384: 128 MiB of
  "2bit", twice the H200's 60 MB L2), float and int8 activations, each call on the next
  of three copies of the weights so that every call reads them from HBM; against torch's
  fp16 GEMV (cuBLAS) on the dense weights, rotated the same way. The note's HBM fraction
  counts the packed bytes (the bar: 60 %).
- The host's share of a steady call: a 1024 x 1024 layer with ``out=`` and
  ``check_finite=False``, called :data:`STEADY_CALLS` times without waiting, then once
  waited for: the time a call, which the GPU's few microseconds of work hide behind the
  host's (the bar: 20 µs), against the same loop of ``torch.mv(..., out=)``.
- ``linear`` with 4096 rows of int8 activations on 4096 x 4096 weights, activation
  quantization and epilogue included, by the route ``TRITNUM_CUDA_GEMM`` picks (run the
  family once per route), against ``torch._int_mm`` on the decoded int8 weights (cuBLAS
  int8) and torch's fp16 ``x @ W.T`` (cuBLAS fp16).
- ``search`` of 1 query in 10,000 hypervectors of 10,000 trits end to end: the index and
  score on the host, against torch's dot product and argmax brought to the host (what
  torchhd's ``dot_similarity`` computes for MAP hypervectors).

Under numba's CUDA simulator (tests) the sizes are tiny and the baselines NumPy's.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from .gpu import Work, gpu_torch, put
from .harness import Case

GEMV_SHAPE, GEMV_SHAPE_QUICK = (32768, 16384), (64, 128)
COPIES = 3  # weight copies the GEMV rows rotate through
STEADY_CALLS, STEADY_CALLS_QUICK = 200, 3
STEADY_SHAPE, STEADY_SHAPE_QUICK = (1024, 1024), (32, 64)
GEMM_SHAPE, GEMM_SHAPE_QUICK = (4096, 4096, 4096), (17, 32, 64)  # rows, out, in
SEARCH_SHAPE, SEARCH_SHAPE_QUICK = (10_000, 10_000), (50, 128)  # stored vectors, d


def gpu_limit_cases(quick: bool, device: str) -> list[Case]:
    """The rows of this module (none unless ``device`` is ``"cuda"``)."""
    if device != "cuda":
        return []
    rng = np.random.default_rng(7)
    return [*_gemv_cases(quick, rng), _steady_case(quick, rng), *_gemm_cases(quick, rng),
            _search_case(quick, rng)]


def _rotating(items: list[Any]) -> Callable[[], Any]:
    """The next of ``items`` at each call, round and round."""
    return itertools.cycle(items).__next__


def _gemv_cases(quick: bool, rng: np.random.Generator) -> list[Case]:
    from ..matmul import linear
    from ..packing import pack
    from ..quantize import TernaryTensor

    torch = gpu_torch()
    out, n = GEMV_SHAPE_QUICK if quick else GEMV_SHAPE
    weights, dense = [], []
    for _ in range(COPIES):
        trits = rng.integers(-1, 2, (out, n), dtype=np.int8)
        weights.append(TernaryTensor(pack(put(trits, "cuda")), np.float32(0.05)))
        dense.append(torch.from_numpy(trits).cuda().half() if torch else trits)
        del trits
    x = rng.standard_normal(n, dtype=np.float32)
    xd = put(x, "cuda")
    next_w, next_dense = _rotating(weights), _rotating(dense)
    if torch is not None:
        xh = torch.from_numpy(x).cuda().half()
        base_name, base = "fp16 W @ x (torch, cuBLAS), rotated", lambda: next_dense() @ xh
    else:
        base_name, base = "int8 W @ x (NumPy), rotated", lambda: next_dense() @ x
    packed = weights[0].packed.nbytes
    return [Case("gpu", f"linear GEMV {out}x{n} {act}, {COPIES} copies of W rotated",
                 lambda a=act: linear(xd, next_w(), activations=a, device="cuda"),
                 base_name, base, work=Work(packed),
                 params={"op": "gemv", "rows": 1, "out": out, "in": n, "mode": act,
                         "macs": out * n, "weight_bytes": packed, "vs": "cublas fp16"})
            for act in ("float", "int8")]


def _steady_case(quick: bool, rng: np.random.Generator) -> Case:
    from numba import cuda

    from ..matmul import linear
    from ..packing import pack
    from ..quantize import TernaryTensor

    torch = gpu_torch()
    out, n = STEADY_SHAPE_QUICK if quick else STEADY_SHAPE
    calls = STEADY_CALLS_QUICK if quick else STEADY_CALLS
    trits = rng.integers(-1, 2, (out, n), dtype=np.int8)
    w = TernaryTensor(pack(put(trits, "cuda")), np.float32(0.05))
    x = rng.standard_normal(n, dtype=np.float32)
    xd, y = put(x, "cuda"), cuda.device_array(out, np.float32)
    linear(xd, w, out=y, check_finite=False, device="cuda")  # the resident copies made

    def steady() -> None:
        for _ in range(calls):
            linear(xd, w, out=y, check_finite=False, device="cuda")

    if torch is not None:
        td, tx = torch.from_numpy(trits).cuda().float() * 0.05, torch.from_numpy(x).cuda()
        ty = torch.empty(out, device="cuda")
        base_name = f"{calls} x torch.mv(out=)"

        def base() -> None:
            for _ in range(calls):
                torch.mv(td, tx, out=ty)
    else:
        dense = trits * np.float32(0.05)
        base_name = f"{calls} x NumPy W @ x"

        def base() -> None:
            for _ in range(calls):
                dense @ x

    return Case("gpu", f"{calls} steady linear calls {out}x{n} float (out=, "
                       "check_finite=False)", steady, base_name, base,
                note=lambda s: f"{s / calls * 1e6:.1f} us a call (bar: <= 20 us)",
                params={"op": "gemv", "rows": 1, "out": out, "in": n, "mode": "float",
                        "calls": calls, "vs": "torch"})


def _gemm_cases(quick: bool, rng: np.random.Generator) -> list[Case]:
    from .._config import CUDA_GEMM
    from ..matmul import linear
    from ..packing import pack
    from ..quantize import TernaryTensor

    torch = gpu_torch()
    rows, out, n = GEMM_SHAPE_QUICK if quick else GEMM_SHAPE
    trits = rng.integers(-1, 2, (out, n), dtype=np.int8)
    w = TernaryTensor(pack(put(trits, "cuda")), np.float32(0.05))
    x = rng.standard_normal((rows, n), dtype=np.float32)
    xd = put(x, "cuda")
    work = Work(w.packed.nbytes + x.nbytes + 4 * rows * out, 2 * rows * out * n, "int8")
    params = {"op": "gemm", "rows": rows, "out": out, "in": n, "mode": "int8",
              "macs": rows * out * n, "weight_bytes": w.packed.nbytes, "route": CUDA_GEMM}
    if torch is not None:
        q = torch.from_numpy(np.clip(np.round(x * 40), -127, 127).astype(np.int8)).cuda()
        wq = torch.from_numpy(trits).cuda()
        xh, wh = torch.from_numpy(x).cuda().half(), wq.half()
        baselines = [("torch._int_mm(x8, W8.T) (cuBLAS int8)", lambda: torch._int_mm(q, wq.t()),
                      "cublas int8"),
                     ("fp16 x @ W.T (torch, cuBLAS)", lambda: xh @ wh.t(), "cublas fp16")]
    else:
        q8 = np.clip(np.round(x * 40), -127, 127).astype(np.int8)
        baselines = [("int8 x @ W.T (NumPy)", lambda: q8.astype(np.int32) @ trits.T.astype(
            np.int32), "numpy")]
    return [Case("gpu", f"linear GEMM {rows} rows {out}x{n} int8 ({CUDA_GEMM} route)",
                 lambda: linear(xd, w, activations="int8", device="cuda"), name, base,
                 repeats=5, work=work, params={**params, "vs": vs})
            for name, base, vs in baselines]


def _search_case(quick: bool, rng: np.random.Generator) -> Case:
    from .._interop import to_host
    from ..packing import pack
    from ..vsa import search

    torch = gpu_torch()
    m, d = SEARCH_SHAPE_QUICK if quick else SEARCH_SHAPE
    mem = rng.integers(-1, 2, (m, d), dtype=np.int8)
    q = rng.integers(-1, 2, (1, d), dtype=np.int8)
    pmem, pq = pack(put(mem, "cuda"), "bitplane"), pack(put(q, "cuda"), "bitplane")

    def ours() -> Any:
        idx, scores = search(pq, pmem, 1, "dot", device="cuda")
        return to_host(idx), to_host(scores)

    if torch is not None:
        tmem, tq = torch.from_numpy(mem).cuda().float(), torch.from_numpy(q[0]).cuda().float()
        base_name = "torch W @ q, max, on the host (torchhd dot_similarity)"

        def base() -> Any:
            return torch.max(tmem @ tq, 0)[1].item()
    else:
        base_name = "NumPy int8 W @ q, argmax"

        def base() -> Any:
            return int(np.argmax(mem @ q[0]))

    return Case("gpu", f"search 1 x {m} (d={d}, dot) bitplane, result on the host", ours,
                base_name, base, work=Work(pmem.nbytes + pq.nbytes, m * pq.nbytes // 8, "popc"),
                params={"op": "search", "format": "bitplane", "d": d, "n": m, "queries": 1,
                        "vs": "torch"})
