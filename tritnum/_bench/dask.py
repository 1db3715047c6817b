"""Dask case: the sharded search on 2 worker processes against one process on the same cores.

The memory is generated on the workers (``random(..., chunks=...)``) and kept there
(``persist``), so the time is the search's: the tasks, the tree of merges and the
scheduler. The baseline is the in-memory search of the same bit planes in this
process (its kernels on both cores). Needs the ``dask`` extra; without it the row
is skipped with a line saying so.
"""

from __future__ import annotations

import contextlib
import sys

from .harness import Case


def dask_cases(quick: bool, stack: contextlib.ExitStack) -> list[Case]:
    """The sharded search case, its LocalCluster closed by ``stack``."""
    try:
        import dask
        from distributed import Client, LocalCluster
    except ImportError:
        print("dask: skipped (pip install tritnum[dask])", file=sys.stderr)
        return []
    from ..packing import PackedTrits
    from ..vsa import random, search

    queries, n, d, rows = (10, 20_000, 1000, 2500) if quick else (100, 200_000, 10_000, 12_500)
    # the workers' sampling profiler slows the search kernels 2-3x here (measured): off
    stack.enter_context(dask.config.set({"distributed.worker.profile.enabled": False}))
    cluster = stack.enter_context(LocalCluster(
        processes=True, n_workers=2, threads_per_worker=1, dashboard_address=None,
        env={"NUMBA_NUM_THREADS": "1"}))  # one thread a worker: the two cores, not four threads
    client = stack.enter_context(Client(cluster))
    memory = random(n, d, seed=1, format="bitplane", chunks=rows)
    memory = PackedTrits(client.persist(memory.data), memory.shape, "bitplane")
    local = random(n, d, seed=1, format="bitplane")
    q = random(queries, d, seed=2, format="bitplane")

    def sharded() -> object:
        return client.compute(search(q, memory, 10, "dot")[0]).result()

    tasks = len(search(q, memory, 10, "dot")[0].__dask_graph__())

    def note(seconds: float) -> str:
        return (f"{n // rows} chunks, {tasks} tasks in the graph, "
                f"{seconds / tasks * 1e3:.2f} ms a task")

    name = f"search {queries} x {n // 1000}k (dot) on 2 worker processes"
    return [Case("dask", name, sharded, "one process", lambda: search(q, local, 10, "dot"),
                 None, 3, note)]
