"""How many threads the CPU kernels use: the process's count and a per-thread limit.

Read without starting numba's own thread pool (see :func:`available`), and set for the
process with :func:`set_num_threads` or per calling thread with :func:`limit_threads`
rather than ``numba.set_num_threads``. numba is imported on first use: ``import tritnum``
does not import it.
"""

from __future__ import annotations

import contextlib
import operator
import sys
import threading
from collections.abc import Iterator

_local = threading.local()
_process_limit: int | None = None  # set_num_threads's, None: every thread available


def threads() -> int:
    """Threads the kernels share their work among.

    :func:`available`, at most :func:`set_num_threads`'s and :func:`limit_threads`'s.
    """
    n = available() if _process_limit is None else min(available(), _process_limit)
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
    import numba

    parallel = sys.modules.get("numba.np.ufunc.parallel")  # not imported: not started either
    if parallel is not None and getattr(parallel, "_is_initialized", True):
        return numba.get_num_threads()
    return numba.config.NUMBA_NUM_THREADS


def _count(n: object) -> int:
    """``n`` as a thread count: TypeError unless an integer, ValueError unless 1..available."""
    if isinstance(n, bool):
        raise TypeError(f"the number of threads must be an integer, not {type(n).__name__}")
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError(f"the number of threads must be an integer, not {type(n).__name__}") \
            from None
    most = available()
    if not 1 <= n <= most:
        raise ValueError(f"the number of threads must be between 1 and {most} "
                         f"(NUMBA_NUM_THREADS), got {n}")
    return n


def get_num_threads() -> int:
    """The number of threads tritnum's CPU kernels run on, for calls made on this thread.

    Returns
    -------
    int
        The threads available (``NUMBA_NUM_THREADS``, one per core by default), at most
        the limit of :func:`set_num_threads` and of an enclosing :func:`limit_threads`.

    See Also
    --------
    set_num_threads : Set the limit for the whole process.
    limit_threads : Set it for a block of code on the calling thread.

    Examples
    --------
    >>> import tritnum as tn
    >>> tn.get_num_threads() >= 1
    True
    >>> with tn.limit_threads(1):
    ...     tn.get_num_threads()
    1
    """
    return threads()


def set_num_threads(n: int) -> None:
    """Run tritnum's CPU kernels on at most ``n`` threads, from now on, in this process.

    The kernels' own pool takes ``n`` threads (the calling one included) and NumPy's
    BLAS, which the float GEMM calls, gets the same count for the duration of each
    tritnum call, so that the two pools never share the cores between more threads
    than there are. Other thread pools keep theirs: neither numba's OpenMP pool nor
    PyTorch's (``torch.get_num_threads()``) is touched.

    Parameters
    ----------
    n : int
        Between 1 and the threads available (``NUMBA_NUM_THREADS``, set before numba
        is imported; one per core by default).

    Raises
    ------
    TypeError
        If ``n`` is not an integer.
    ValueError
        If ``n`` is below 1 or above ``NUMBA_NUM_THREADS``.

    See Also
    --------
    get_num_threads : The threads a call made now runs on.
    limit_threads : A limit for a block of code on the calling thread only.

    Examples
    --------
    >>> import tritnum as tn
    >>> before = tn.get_num_threads()
    >>> tn.set_num_threads(1)
    >>> tn.get_num_threads()
    1
    >>> tn.set_num_threads(before)
    """
    global _process_limit
    _process_limit = _count(n)


@contextlib.contextmanager
def limit_threads(n: int) -> Iterator[None]:
    """At most ``n`` threads for the tritnum calls this thread makes inside the block.

    The limit holds for the calling thread only (other threads keep theirs), on top
    of :func:`set_num_threads`'s, and the BLAS gets the same count during each call.
    Unlike ``numba.set_num_threads`` it leaves numba's (and torch's) OpenMP pool
    alone.

    Parameters
    ----------
    n : int
        Between 1 and the threads available (``NUMBA_NUM_THREADS``).

    Yields
    ------
    None

    Raises
    ------
    TypeError
        If ``n`` is not an integer.
    ValueError
        If ``n`` is below 1 or above ``NUMBA_NUM_THREADS``.

    See Also
    --------
    set_num_threads : The same limit for the whole process.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> w = tn.quantize(np.ones((4, 8), np.float32))
    >>> with tn.limit_threads(1):
    ...     y = tn.linear(np.ones((2, 8), np.float32), w)
    >>> y.shape
    (2, 4)
    """
    n = _count(n)
    with limit(n):
        yield


@contextlib.contextmanager
def limit(n: int) -> Iterator[None]:
    """At most ``n`` threads for the calls this thread makes inside the block (unchecked)."""
    before = getattr(_local, "limit", None)
    _local.limit = max(1, n)
    try:
        yield
    finally:
        if before is None:
            del _local.limit
        else:
            _local.limit = before
