"""The first call (issue 29, item 4): what a fresh process compiles, against numba's own start.

Each row runs child processes with numba's disk cache off (``TRITNUM_CACHE=0`` and an
empty ``NUMBA_CACHE_DIR``). A child compiles a trivial function first (numba's first
compilation in a process: its typing and code-generation set-up, which the first call of
any numba code pays), then makes the calls a new user makes first: ``tn.quantize`` of an
``n x n`` float32 matrix, then ``tn.linear`` with int8 and float activations on one row
(the GEMV) and on 256 rows (the GEMM). Times are the child's CPU seconds
(``time.process_time``, every thread of it): other processes' turns on the cores, which
wall time counts unevenly on a shared host, are left out. The row's "speedup" is the
trivial function's time over the five calls' (the bar, 0.1: the calls within 10x of it);
its note gives that ratio, each call's seconds and the child's load. The median of
``REPEATS`` children (by ratio).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

from .harness import Result

SIZES, QUICK_SIZES = (256, 1024, 4096), (256,)
REPEATS, QUICK_REPEATS = 3, 1
BAR = 0.1  # the five calls within 10x of numba's trivial function
CALLS = ("quantize", "int8 GEMV", "float GEMV", "int8 GEMM", "float GEMM")

_CHILD = """
import json, os, sys, time
import numba
import numpy as np

cpu = time.process_time
t = cpu()
numba.njit(lambda a: a + 1)(1)
trivial = cpu() - t
import tritnum as tn

n = int(sys.argv[1])
rng = np.random.default_rng(0)
w = rng.standard_normal((n, n)).astype(np.float32)
one, many = (rng.standard_normal((m, n)).astype(np.float32) for m in (1, 256))
seconds = []
t = cpu()
q = tn.quantize(w)
seconds.append(cpu() - t)
for x, mode in ((one, "int8"), (one, "float"), (many, "int8"), (many, "float")):
    t = cpu()
    tn.linear(x, q, activations=mode)
    seconds.append(cpu() - t)
print(json.dumps({"trivial": trivial, "seconds": seconds, "load": os.getloadavg()[0]}))
"""


def _child(n: int) -> dict:
    """One fresh process's report: the trivial function's and each first call's CPU seconds."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TRITNUM_CACHE": "0", "NUMBA_CACHE_DIR": cache}
        out = subprocess.run([sys.executable, "-c", _CHILD, str(n)], env=env,
                             capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _row(n: int, reports: list[dict]) -> Result:
    ratios = [sum(r["seconds"]) / r["trivial"] for r in reports]
    median = reports[ratios.index(statistics.median_low(ratios))]
    total, trivial = sum(median["seconds"]), median["trivial"]
    parts = ", ".join(f"{name} {s:.2f}" for name, s in zip(CALLS, median["seconds"],
                                                           strict=True))
    note = (f"{total / trivial:.1f}x the trivial function (of {len(reports)}: "
            f"{min(ratios):.1f}-{max(ratios):.1f}x); CPU s: {parts}; "
            f"load {median['load']:.1f}")
    return Result("firstcall", f"first quantize + 4 linear calls {n}x{n}, empty cache", total,
                  "numba's first (trivial) function", trivial, trivial / total, BAR,
                  trivial / total >= BAR, note,
                  {"op": "first call", "n": n, "children": len(reports),
                   "calls": dict(zip(CALLS, median["seconds"], strict=True))})


def first_call_results(quick: bool) -> list[Result]:
    """One row a size, each the median of fresh child processes (``quick``: 256, once)."""
    results = []
    for n in QUICK_SIZES if quick else SIZES:
        print(f"firstcall: {n}x{n}", file=sys.stderr, flush=True)
        results.append(_row(n, [_child(n) for _ in range(QUICK_REPEATS if quick else REPEATS)]))
    return results
