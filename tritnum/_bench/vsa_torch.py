"""VSA at batch sizes against torch's own kernels and NumPy (issue 18, item 7; no torchhd needed).

- Search: ``q`` queries among ``m`` stored hypervectors is, in torch, one matrix
  product of the scores. Its fastest form is picked per row from float32,
  bfloat16 (oneDNN) and int8 (``torch._int_mm``, oneDNN's VNNI kernel where the
  CPU has it), each timed on the first 10,000 stored vectors with the same
  thread count; the winner is then the baseline on the whole memory. tritnum's
  side is the whole search: scores and the top-1 selection.
- ``Centroid.fit`` against ``index_add_`` of the samples into 10 class sums
  (what torchhd's Centroid does), on digits-sized data (1797 x 10,000).
- Dense int8 ``bind`` against NumPy's ``a * b``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .._extras import install_hint
from .harness import Case

BATCH_BAR = 10.0  # bitplane search >= 10x torch's fastest matmul (issue 18)
BIND_BAR = 1.0  # dense int8 bind no slower than NumPy's a * b
TRIAL_ROWS = 10_000  # stored vectors the torch candidates are timed on


DTYPES = ("int8 _int_mm", "bfloat16 matmul", "float32 matmul")


def _scores(torch: Any, q: np.ndarray, mem: np.ndarray, dtype: str) -> Callable[[], Any]:
    """The call computing the score matrix of ``q`` against ``mem`` (int8 trits) in ``dtype``."""
    tq, tm = torch.from_numpy(q), torch.from_numpy(mem)
    if dtype.startswith("int8"):  # int32 sums; needs more than 16 queries, d % 8 == 0
        return lambda: torch._int_mm(tq, tm.T)
    t = torch.bfloat16 if dtype.startswith("bfloat16") else torch.float32
    tq, tm = tq.to(t), tm.to(t)
    return lambda: tq @ tm.T


def _fastest(torch: Any, q: np.ndarray, mem: np.ndarray, threads: int
             ) -> tuple[str, Callable[[], Any], str]:
    """Torch's fastest score matrix at ``threads`` threads: its name, its call, and a note.

    Each candidate is timed (best of three) on the first ``TRIAL_ROWS`` rows; the
    note gives those times.
    """
    torch.set_num_threads(threads)
    trial = {}
    for dtype in DTYPES:
        fn = _scores(torch, q, mem[:TRIAL_ROWS], dtype)
        fn()
        times = []
        for _ in range(3):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        trial[dtype] = min(times)
    best = min(trial, key=trial.__getitem__)
    fn = _scores(torch, q, mem, best)

    def run() -> Any:
        torch.set_num_threads(threads)
        return fn()

    trials = ", ".join(f"{name.split()[0]} {seconds * 1e3:.1f} ms" for name, seconds in
                       trial.items())
    return (f"torch {best}, {threads} thread{'s' * (threads > 1)}", run,
            f"torch on {min(len(mem), TRIAL_ROWS):,} rows: {trials}")


def batch_search_cases(quick: bool, device: str) -> list[Case]:
    """Batched search against torch's fastest score matrix at the same thread count.

    100 x 10,000 and 1,000 x 100,000 at d = 10,000 (100 x 2,000 with ``quick``),
    bitplane and dense, at 1 and 2 threads.
    """
    if device == "cuda":
        return []
    import numba

    from ..packing import pack
    from ..vsa import random, search

    d = 10_000
    sizes = ((100, 2_000),) if quick else ((100, 10_000), (1_000, 100_000))
    try:
        import torch
    except ImportError:
        torch = None
    cases = []
    for nq, m in sizes:
        mem, q = random(m, d, seed=11), random(nq, d, seed=12)
        pmem, pq = pack(mem, "bitplane"), pack(q, "bitplane")
        for threads in (1, 2):
            if torch is None:  # a visible row that says so
                cases.append(Case("vsa", f"search {nq} x {m // 1000}k, {threads} thread(s)",
                                  lambda: None, "torch", lambda: None, None, 1,
                                  lambda s: f"torch not installed ({install_hint('torch')}): "
                                            "skipped"))
                continue
            base_name, base, trials = _fastest(torch, q, mem, threads)
            for kind, (qs, ms) in (("bitplane", (pq, pmem)), ("dense", (q, mem))):
                def ours(qs=qs, ms=ms, threads=threads) -> Any:
                    numba.set_num_threads(threads)
                    try:
                        return search(qs, ms, 1, "dot", device="cpu")
                    finally:
                        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)

                cases.append(Case("vsa", f"search {nq} x {m // 1000}k (dot) {kind}, "
                                  f"{threads} thread{'s' * (threads > 1)}", ours, base_name, base,
                                  BATCH_BAR if kind == "bitplane" else None,
                                  3 if m > 10_000 else 7, lambda s, trials=trials: trials,
                                  params={"op": "search", "format": kind, "d": d, "n": m,
                                          "queries": nq, "threads": threads, "vs": "torch"}))
    return cases


def fit_and_bind_cases(device: str) -> list[Case]:
    """``Centroid.fit`` against torch's ``index_add_``, dense ``bind`` against ``a * b``."""
    if device == "cuda":
        return []
    from ..vsa import Centroid, bind, random

    d = 10_000
    a, b = random(1000, d, seed=13), random(1000, d, seed=14)
    cases = [Case("vsa", "bind 1000 pairs dense", lambda: bind(a, b, device="cpu"),
                  "numpy a * b", lambda: a * b, BIND_BAR, 15,
                  params={"op": "bind", "format": "dense", "d": d, "n": 1000, "queries": None,
                          "threads": None, "vs": "numpy"})]
    X, y = random(1797, d, seed=15), np.arange(1797) % 10  # the digits' size
    try:
        import torch
    except ImportError:
        return [*cases, Case("vsa", "centroid fit 1797 x 10k", lambda: None, "torch",
                             lambda: None, None, 1, lambda s: "torch not installed: skipped")]
    tx, ty = torch.from_numpy(X.astype(np.float32)), torch.from_numpy(y)

    def index_add() -> Any:
        return torch.zeros(10, d).index_add_(0, ty, tx)

    cases.append(Case("vsa", "centroid fit 1797 x 10k", lambda: Centroid(device="cpu").fit(X, y),
                      "torch index_add_ f32", index_add, None, 7,
                      params={"op": "centroid fit", "format": "dense", "d": d, "n": 1797,
                              "queries": None, "threads": None, "vs": "torch"}))
    return cases
