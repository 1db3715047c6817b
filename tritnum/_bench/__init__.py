"""``python -m tritnum bench``: each kernel family against its baseline, in one run.

Every row times tritnum and its baseline in the same process and reports the
median of each and the speedup (baseline time / tritnum time).
``bar`` is the speedup the project's issues ask for on 2 CPU cores.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import asdict, replace
from typing import Any

import numpy as np

from .._environment import environment
from . import header, report
from .compress import compression_cases
from .dask import dask_cases
from .first_call import first_call_results
from .gguf_files import gguf_file_cases
from .gpu import on_gpu
from .gpu_limits import gpu_limit_cases
from .harness import ROUNDS, WARMUP_SECONDS, Result, measure, table
from .hdc import hdc_results
from .matmul import matmul_cases
from .packing import packing_cases
from .quantize import quantization_cases
from .sweep import QUICK_TIMING, summary, sweep_cases
from .torch_layers import torch_cases
from .vsa import vsa_cases
from .vsa_torch import batch_search_cases, fit_and_bind_cases

FAMILIES = ("packing", "quantize", "gguf", "matmul", "vsa", "dask", "compress", "torch")


def run(*, quick: bool = False, device: str = "auto", cols: int = 16000,
        rows: int | None = None, families: tuple[str, ...] = FAMILIES) -> list[Result]:
    """Measure the cases of ``families``; ``quick``: less data, 3 repeats, one warm-up call."""
    with contextlib.ExitStack() as stack:  # closes what cases hold (a Dask cluster)
        return _run(quick, device, cols, rows, families, stack)


def _run(quick: bool, device: str, cols: int, rows: int | None, families: tuple[str, ...],
         stack: contextlib.ExitStack) -> list[Result]:
    rows = rows or (1024 if quick else 4096)
    repeats = 3 if quick else 15
    builders = {
        "packing": lambda: packing_cases(rows, cols, device),
        "quantize": lambda: quantization_cases(
            max(256, 256 * round(np.sqrt(rows * cols / 4) / 256)), device),
        "gguf": lambda: gguf_file_cases(quick, device, stack),
        "matmul": lambda: matmul_cases(quick, device),
        "vsa": lambda: (vsa_cases(10_000, device) + fit_and_bind_cases(device)
                        + batch_search_cases(quick, device)),
        "dask": lambda: dask_cases(quick, stack) if device != "cuda" else [],
        "compress": lambda: compression_cases(quick, device),
        "torch": lambda: torch_cases(quick, device),
        "sweep": lambda: sweep_cases(quick, device),
        "gpu": lambda: gpu_limit_cases(quick, device),
    }
    wanted = set(families)
    if "gguf" in wanted:  # the block codecs' cases are built with the quantization ones
        wanted.add("quantize")
    cases = [case for name, build in builders.items() if name in wanted for case in build()]
    if device == "cuda":
        cases = [on_gpu(case) for case in cases]
    warmup = 0.0 if quick else WARMUP_SECONDS
    cases = [case for case in cases if case.family in families]
    if quick:  # the bars are set for the full sizes: they do not apply to quick ones
        # (the sweep's floors are ratios at every size)
        cases = [case if case.family == "sweep" else replace(case, bar=None) for case in cases]
    results = []
    for i, case in enumerate(cases, 1):
        print(f"[{i}/{len(cases)}] {case.family}: {case.name}", file=sys.stderr, flush=True)
        timing = ((repeats, warmup, 1 if quick else ROUNDS)
                  if not quick or case.family != "sweep" else QUICK_TIMING)
        results.append(measure(case, *timing))
    if "hdc" in families:  # minutes of torchhd per row: timed once each, run only when named
        results += hdc_results(quick)
    if "firstcall" in families:  # fresh processes, an empty cache: run only when named
        results += first_call_results(quick)
    return results


def main(args: Any) -> int:
    """Entry point of ``python -m tritnum bench``.

    ``--json PATH`` writes the rows with the machine, the versions and the load the run
    saw, in the schema of :mod:`tritnum._bench.report`.
    """
    env = environment()
    print(header.title(env))
    gpu = None
    if args.device == "cuda":
        gpu = header.gpu_line()
        print(gpu)
    load_before = list(os.getloadavg()) if hasattr(os, "getloadavg") else [0.0, 0.0, 0.0]
    before = header.snapshot()
    families = tuple(args.family or FAMILIES)
    results = run(quick=args.quick, device=args.device, cols=args.cols, rows=args.rows,
                  families=families)
    busy = header.contention(before, header.snapshot())
    if busy is not None:
        env["contention"] = asdict(busy)
        print(header.contention_line(busy))
    print(table(results))
    if "sweep" in families:
        print(summary(results))
    if args.json:
        load = {"before": load_before,
                "after": list(os.getloadavg()) if hasattr(os, "getloadavg") else [0.0] * 3,
                "contention": None if busy is None else {**asdict(busy), "noisy": busy.noisy}}
        options = {"quick": bool(args.quick), "device": args.device, "rows": args.rows,
                   "cols": args.cols, "families": list(families)}
        report.write(args.json, report.build(results, env, load, options, gpu))
    return 0
