"""How many threads the CPU kernels use: the process's count and a per-thread limit.

Read without starting numba's own thread pool (see :func:`available`), and set per
calling thread with :func:`limit` rather than ``numba.set_num_threads``.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator

import numba

_local = threading.local()


def threads() -> int:
    """Threads the kernels share their work among: :func:`available`, at most :func:`limit`'s."""
    n = available()
    return min(n, getattr(_local, "limit", n))


def available() -> int:
    """``numba.get_num_threads()``, read without starting numba's own thread pool.

    ``numba.get_num_threads()`` starts that pool on its first call. Its OpenMP
    layer sets the OpenMP thread count of the process, which PyTorch shares (the
    same libgomp): afterwards torch ran small ops on 2 threads, the forward and
    backward of a 32-row batch of a small MLP 200x slower on these busy 2 cores
    (0.2 ms before, 40-70 ms after). Until numba's layer runs (numba ``prange``
    code, or a user calling ``numba.set_num_threads``), the count is
    ``NUMBA_NUM_THREADS``.
    """
    parallel = sys.modules.get("numba.np.ufunc.parallel")  # not imported: not started either
    if parallel is not None and getattr(parallel, "_is_initialized", True):
        return numba.get_num_threads()
    return numba.config.NUMBA_NUM_THREADS


@contextlib.contextmanager
def limit(n: int) -> Iterator[None]:
    """At most ``n`` threads for the calls this thread makes inside the block.

    Unlike ``numba.set_num_threads`` it leaves numba's (and torch's) OpenMP pool alone.
    """
    before = getattr(_local, "limit", None)
    _local.limit = max(1, n)
    try:
        yield
    finally:
        if before is None:
            del _local.limit
        else:
            _local.limit = before
