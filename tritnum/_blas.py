"""The BLAS's threads (OpenBLAS, MKL, ... as loaded by NumPy) around tritnum's own BLAS calls.

NumPy's BLAS keeps a pool of its own: one thread per core unless told otherwise, whose
threads spin for a while after each call. tritnum's pool (:mod:`._kernels.cpu._parallel`)
does the same between its calls, so a float GEMM, which decodes tiles on tritnum's
threads and multiplies them with ``sgemm``, ran both pools on the same cores: a 64-row
float ``tn.linear`` took 336-1475 ms on a busy machine against 61-87 ms with
``OPENBLAS_NUM_THREADS=1``. :func:`limit` gives the BLAS at most as many threads as
tritnum's limit for the duration of a call, with threadpoolctl, and leaves every other
pool (torch's OpenMP, see :mod:`._threads`) alone.

``threadpoolctl.threadpool_limits`` finds the loaded libraries afresh on every call (about
0.3 ms here); the controllers are kept instead (:func:`_libraries`), and a call sets and
restores a library's count only when it differs (about 2 µs).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

_libraries_found: list[Any] = []
_modules_seen = -1  # len(sys.modules) when they were found: a new module may load a BLAS
_lock = threading.Lock()
_depth = 0  # calls inside :func:`limit` now, on all threads
_saved: list[tuple[Any, int]] = []  # what the outermost call found, restored by the last out
_set = 0  # the limit of the outermost call


def _libraries() -> list[Any]:
    """The threadpoolctl controllers of the BLAS libraries loaded in this process.

    Found again (about 1 ms) only when modules were imported since: SciPy, for one,
    brings a BLAS of its own.
    """
    global _libraries_found, _modules_seen
    if len(sys.modules) != _modules_seen:
        from threadpoolctl import ThreadpoolController

        _libraries_found = [lib for lib in ThreadpoolController().lib_controllers
                            if lib.user_api == "blas"]
        _modules_seen = len(sys.modules)
    return _libraries_found


@contextlib.contextmanager
def limit(n: int) -> Iterator[None]:
    """At most ``n`` BLAS threads inside the block; the counts found before are restored after.

    A library holding fewer keeps its count: a limit never raises one (a user's
    ``OPENBLAS_NUM_THREADS=1`` stays 1). Raising it cost each call the library's
    thread start and stop: a float ``tn.linear`` of 256 rows at 64 x 64 took 3.8 ms
    against 0.2 ms with the other core busy, 28 µs against 8 on a quiet one.

    The BLAS's count is one for the whole process: calls on several threads at once
    share it, the first sets it and the last to leave restores it (the counts must not
    end up as one call's limit).
    """
    global _depth, _set
    libraries = _libraries()
    with _lock:
        if _depth == 0:
            _set = n
            _saved[:] = [(lib, lib.get_num_threads()) for lib in libraries]
            for lib, before in _saved:
                if before > n:
                    lib.set_num_threads(n)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                for lib, before in _saved:
                    if before > _set:
                        lib.set_num_threads(before)
