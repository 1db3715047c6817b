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

from .._extras import install_hint
from .harness import Case

# The workers' sampling profiler slowed the search kernels 2-3x here: off. The event
# loops' watchdog tick (every 20 ms), system monitor (500 ms) and the workers' memory
# monitor (100 ms) cost 3% of a core idle, workers and scheduler alike (measured: 0.6 s
# each in 20 s, 0.1 s with these), taken from the same two cores as the tasks.
QUIET = {"distributed.worker.profile.enabled": False, "distributed.admin.tick.interval": "1s",
         "distributed.admin.system-monitor.interval": "2s",
         "distributed.worker.memory.monitor-interval": "1s"}
BAR = 0.77  # issue 19: the sharded search within 1.3x of one process's time (1 / 1.3)


def dask_cases(quick: bool, stack: contextlib.ExitStack) -> list[Case]:
    """The sharded search case, its LocalCluster closed by ``stack``."""
    try:
        import dask
        from distributed import Client, LocalCluster, wait
    except ImportError:
        print(f"dask: skipped ({install_hint('dask')})", file=sys.stderr)
        return []
    from ..vsa import random, search

    queries, n, d, rows = (10, 20_000, 1000, 2500) if quick else (1000, 1_000_000, 10_000, 31_250)
    stack.enter_context(dask.config.set(QUIET))
    client = stack.enter_context(Client(stack.enter_context(_cluster(LocalCluster))))
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


def _cluster(local_cluster: Any, **kw: Any) -> Any:
    """2 worker processes of one thread, numba on one thread in each: the two cores."""
    return local_cluster(processes=True, n_workers=2, threads_per_worker=1,
                         dashboard_address=None, env={"NUMBA_NUM_THREADS": "1"}, **kw)


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


PLANTED = (0, 49_999, 50_000, 1_234_567, 2_000_001, 3_999_999)  # rows that 6 queries copy


def beyond_one_worker(n: int = 4_000_000, d: int = 10_000, rows: int = 50_000,
                      limit: str = "6GB") -> bool:
    """Issue 19's memory larger than a worker: ``n`` vectors searched by 2 workers of ``limit``.

    The memory (10 GB of bit planes at the defaults) is never held whole: each task
    generates its chunk from the seed and searches it. 10 queries (6 noisy copies of
    :data:`PLANTED` rows, 4 random) are checked against an exact reference computed
    here, one chunk at a time: the in-memory search of each chunk's rows, merged by
    score, then lower index. Prints the time, the task graph's size, each worker's
    peak resident memory against its limit, and whether all matched; returns that.
    Run it alone: ``python -m tritnum._bench.dask`` (a few minutes on 2 cores).
    """
    import os
    import threading

    import dask
    import numpy as np
    import psutil
    from distributed import Client, LocalCluster

    from ..packing import PackedTrits, pack, unpack
    from ..vsa import random, search

    memory = random(n, d, seed=1, format="bitplane", chunks=rows)  # lazy
    planted = [r for r in PLANTED if r < n]
    copies = dask.compute(*[memory.data[r:r + 1] for r in planted], scheduler="sync")
    noisy = unpack(PackedTrits(np.concatenate(copies), (len(planted), d), "bitplane"))
    noisy[:, ::3] = 0  # a third of each copy wiped
    queries = pack(np.concatenate([noisy, random(10 - len(planted), d, seed=9)]), "bitplane")
    with dask.config.set(QUIET), _cluster(LocalCluster, memory_limit=limit) as cluster, \
            Client(cluster) as client:
        procs = {w: psutil.Process(pid) for w, pid in client.run(os.getpid).items()}
        peak = dict.fromkeys(procs, 0)
        done = threading.Event()

        def watch() -> None:
            while not done.wait(0.2):
                for w, proc in procs.items():
                    peak[w] = max(peak[w], proc.memory_info().rss)

        threading.Thread(target=watch, daemon=True).start()
        warm = random(1000, d, seed=3, format="bitplane", chunks=500)  # kernels into the workers
        client.compute(search(queries, warm, 10, "dot")[0]).result()
        idx, scores = search(queries, memory, 10, "dot")
        tasks = len(idx.__dask_graph__())
        start = time.perf_counter()
        idx, scores = client.compute([idx, scores], sync=True)
        seconds = time.perf_counter() - start
        done.set()
        limits = {w: info["memory_limit"] for w, info in client.scheduler_info()["workers"].items()}
    print(f"search of 10 queries x {n:,} vectors (d = {d:,}; {memory.nbytes / 1e9:.1f} GB in "
          f"{n // rows} chunks) on 2 worker processes: {seconds:.1f} s, {tasks} tasks in the "
          f"graph, load average {os.getloadavg()[0]:.1f}")
    for w in procs:
        print(f"  worker {w}: peak resident {peak[w] / 1e9:.2f} GB, limit {limits[w] / 1e9:.2f} GB")
    best_s, best_i = np.zeros((10, 0), np.int64), np.zeros((10, 0), np.int64)
    for r0 in range(0, n, rows):  # the reference, here, one chunk at a time
        (chunk,) = dask.compute(memory[r0:r0 + rows], scheduler="sync")
        i, s = search(queries, chunk, 10, "dot")
        cand_s, cand_i = np.concatenate([best_s, s], 1), np.concatenate([best_i, i + r0], 1)
        order = np.lexsort((cand_i, -cand_s), axis=1)[:, :10]
        best_s, best_i = np.take_along_axis(cand_s, order, 1), np.take_along_axis(cand_i, order, 1)
    exact = bool(np.array_equal(idx, best_i) and np.array_equal(scores, best_s))
    found = [int(r) for r in idx[:len(planted), 0]] == planted
    under = all(peak[w] < limits[w] for w in procs)
    print(f"  equal to the reference (indices and scores): {exact}; the planted rows first: "
          f"{found}; every worker under its limit: {under}")
    return exact and found and under


if __name__ == "__main__":
    sys.exit(0 if beyond_one_worker() else 1)
