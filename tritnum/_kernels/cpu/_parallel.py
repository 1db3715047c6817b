"""Split a kernel's tasks across threads.

The CPU kernels are serial ``nogil`` loops over a range of tasks, cached on
disk, and run here on a small thread pool. They do not use ``prange``: numba's
parallel kernels loaded from its disk cache run about 1.7x slower than freshly
compiled ones (numba issue #8085; measured on these machines: 2bit unpack of
65 M trits 4.7 ms fresh, 8-10 ms from the cache, 5.3-6.5 ms on this pool), and
a cache that makes every later process slower defeats its purpose.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numba

# Below this many bytes of input per call, handing work to a thread costs more than it saves.
MIN_PARALLEL_BYTES = 1 << 20
# The same for kernels doing a few instructions per byte (elementwise bit-plane ops):
# 2.5 MB of bind output takes 0.15-0.2 ms on one thread and 0.2-0.5 ms on two.
MIN_PARALLEL_BYTES_LIGHT = 1 << 24
CHUNKS_PER_THREAD = 4

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _forget_pool() -> None:
    """In a forked child: the parent's worker threads did not come along."""
    global _pool, _pool_lock
    _pool = None
    _pool_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


def _get_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=max(1, numba.config.NUMBA_NUM_THREADS - 1),
                thread_name_prefix="tritnum",
            )
        return _pool


def threads() -> int:
    """Threads the kernels share their work among (``numba.get_num_threads()``).

    Read without starting numba's own thread pool, which ``numba.get_num_threads()`` does
    on its first call. That pool's OpenMP layer sets the OpenMP thread count of the
    process, which PyTorch shares (the same libgomp): afterwards torch ran small ops on 2
    threads, the forward and backward of a 32-row batch of a small MLP 200x slower on
    these busy 2 cores (0.2 ms before, 40-70 ms after). Until numba's layer runs (numba
    ``prange`` code, or a user calling ``numba.set_num_threads``), the count is
    ``NUMBA_NUM_THREADS``.
    """
    from numba.np.ufunc import parallel

    if getattr(parallel, "_is_initialized", True):
        return numba.get_num_threads()
    return numba.config.NUMBA_NUM_THREADS


def run(kernel: Callable[..., int], tasks: int, nbytes: int, *args: Any,
        light: bool = False) -> int:
    """Call ``kernel(*args, t0, t1)`` over tasks ``[0, tasks)`` and add up what it returns.

    With :func:`threads` threads (``NUMBA_NUM_THREADS``) when the
    input has at least ``MIN_PARALLEL_BYTES`` (``MIN_PARALLEL_BYTES_LIGHT`` for a
    ``light`` kernel). The tasks are cut into ``CHUNKS_PER_THREAD`` chunks per
    thread that the threads (the calling one too) take in turn: when a core is
    busy elsewhere, or a virtual machine's core is stolen by its host, the other
    threads take over its share instead of waiting for it.
    """
    if nbytes < (MIN_PARALLEL_BYTES_LIGHT if light else MIN_PARALLEL_BYTES):
        return kernel(*args, 0, tasks)
    parts = min(threads(), tasks)
    if parts <= 1:
        return kernel(*args, 0, tasks)
    chunks = min(tasks, parts * CHUNKS_PER_THREAD)
    bounds = [tasks * i // chunks for i in range(chunks + 1)]
    order = itertools.count()  # next() on it is atomic under the GIL

    def work() -> int:
        total = 0
        for i in iter(order.__next__, None):
            if i >= chunks:
                return total
            total += kernel(*args, bounds[i], bounds[i + 1])
        return total

    pool = _get_pool()
    futures = [pool.submit(work) for _ in range(parts - 1)]
    total = work()
    return total + sum(f.result() for f in futures)
