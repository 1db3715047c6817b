"""Dask case: the sharded search on 2 worker processes against one process on the same cores.

The memory is generated on the workers (``random(..., chunks=...)``) and kept there
(``client.persist``, which keeps the knowledge that tritnum's encoder wrote its
codes, so tasks do not check them again), so the time is the search's: the
tasks, the tree of merges and the scheduler. The baseline is the in-memory
search of the same bit planes in this process (its kernels on both cores).
Without ``--quick`` the size is issue 19's: 1,000 queries against 1,000,000
vectors of d = 10,000 (2.5 GB of bit planes on the workers and as much here).
Needs the ``dask`` extra; without it the row is skipped with a line saying so.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any

from .harness import Case

BAR = 1 / 1.3  # issue 19: the sharded search within 1.3x of one process's time


def dask_cases(quick: bool, stack: contextlib.ExitStack) -> list[Case]:
    """The sharded search case, its LocalCluster closed by ``stack``."""
    try:
        import dask
        from distributed import Client, LocalCluster, wait
    except ImportError:
        print("dask: skipped (pip install tritnum[dask])", file=sys.stderr)
        return []
    from ..vsa import random, search

    queries, n, d, rows = (10, 20_000, 1000, 2500) if quick else (1000, 1_000_000, 10_000, 31_250)
    # the workers' sampling profiler slows the search kernels 2-3x here (measured): off
    stack.enter_context(dask.config.set({"distributed.worker.profile.enabled": False}))
    cluster = stack.enter_context(LocalCluster(
        processes=True, n_workers=2, threads_per_worker=1, dashboard_address=None,
        env={"NUMBA_NUM_THREADS": "1"}))  # one thread a worker: the two cores, not four threads
    client = stack.enter_context(Client(cluster))
    memory = client.persist(random(n, d, seed=1, format="bitplane", chunks=rows))
    wait(memory.data)
    local = random(n, d, seed=1, format="bitplane")
    q = random(queries, d, seed=2, format="bitplane")

    def sharded() -> object:
        return client.compute(search(q, memory, 10, "dot")[0]).result()

    tasks = len(search(q, memory, 10, "dot")[0].__dask_graph__())

    def note(seconds: float) -> str:
        idle = _idle_per_task(client, sharded, len(client.scheduler_info()["workers"]))
        return (f"{n // rows} chunks, {tasks} tasks in the graph; workers not computing "
                f"{idle * 1e3:.2f} ms a task (scheduler, transfers, wait)")

    name = f"search {queries} x {n // 1000}k (dot) on 2 worker processes"
    return [Case("dask", name, sharded, "one process", lambda: search(q, local, 10, "dot"),
                 BAR, 3, note)]


def _idle_per_task(client: Any, run: Any, workers: int) -> float:
    """The scheduler's overhead per task in one more ``run``, from the task stream.

    The workers' time not spent in a task's function (waiting to be handed tasks,
    fetching inputs, idle at the end): ``(wall x workers - compute) / tasks``.
    """
    from distributed import get_task_stream

    with get_task_stream(client) as stream:
        start = time.perf_counter()
        run()
        wall = time.perf_counter() - start
    spans = [s for task in stream.data for s in task["startstops"] if s["action"] == "compute"]
    busy = sum(s["stop"] - s["start"] for s in spans)
    return (wall * workers - busy) / max(len(spans), 1)
