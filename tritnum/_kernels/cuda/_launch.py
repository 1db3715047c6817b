"""Launch helpers shared by the CUDA kernels: grid sizes, flags, scratch, layout copies.

:func:`contiguous` copies strided GPU arrays C-contiguous (and :func:`take_rows`
gathers rows) on the GPU, never through the host.

Steady-state calls (``tn.linear`` on weights already on the GPU) allocate nothing and
look nothing up by argument types: :func:`scratch` hands back the same device buffer
for the same (thread, device, name, shape, dtype), and :func:`launch` keeps the
configured launch of a kernel specialized to its argument types (numba's
``Dispatcher.specialize``) under a key the caller vouches for. Buffers are reused in
stream order: every tritnum kernel runs on the default stream, and a thread's buffers
are its own (two threads' launches interleave on that stream).

Re-entrancy, as the CPU's kept buffers: a call takes this thread's kept buffers
inside :func:`held`, which marks them busy until its last launch is queued; a call
nested in it on the same thread (a signal handler's, a callback's) gets fresh
buffers instead of writing, in stream order before the outer call's kernels run,
the ones the outer call has filled. A kept buffer that leaves with a result (the
int8 row scales) is not handed out again while anything outside the pool still
holds it (its reference count): the caller never sees it change.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from numba import cuda

try:  # numba-cuda decides simulator or driver from this config when it is imported
    from numba.cuda.core import config as _config
except ImportError:  # older numba-cuda
    from numba.core import config as _config

THREADS = 128
MAX_BLOCKS = 4096  # kernels loop grid-stride over what one launch does not cover
SIMULATOR = bool(getattr(_config, "ENABLE_CUDASIM", 0))
SCRATCH_ENTRIES = 16  # buffers kept per thread (oldest dropped first)

class _Pool(threading.local):
    def __init__(self) -> None:
        self.buffers: dict[tuple[Any, ...], Any] = {}  # kept, oldest first
        self.busy = False  # a call on this thread uses them (a nested call may not)


_POOL = _Pool()
_EMPTY: dict[int, Any] = {}  # per device: the empty array of none(), never written
_BOUND: dict[tuple[Any, ...], Any] = {}


def blocks(work: int) -> int:
    """Blocks for ``work`` items at ``THREADS`` per block (at least one)."""
    return max(1, min(MAX_BLOCKS, -(-work // THREADS)))


@cuda.jit
def _clear(bad):
    bad[0] = 0


def flag() -> Any:
    """A one-element int32 device array, 0, that kernels set to 1 on bad input.

    Cleared by a launch, not a copy from the host: nothing waits for the GPU.
    """
    bad = cuda.device_array(1, np.int32)
    _clear[1, 1](bad)
    return bad


def is_set(bad: Any) -> bool:
    """Whether a :func:`flag` was set (waits for the kernels before it)."""
    return bool(bad.copy_to_host()[0])


class Checked:
    """Whether a kernel found its input good: ``bool()`` reads the :func:`flag` then, once.

    A caller that knows the input good never asks, and never waits for the GPU.
    """

    __slots__ = ("_bad", "_ok")

    def __init__(self, bad: Any) -> None:
        self._bad = bad
        self._ok: bool | None = None

    def __bool__(self) -> bool:
        if self._ok is None:
            self._ok = not is_set(self._bad)
        return self._ok


def _device() -> int:
    return getattr(cuda.get_current_device(), "id", 0)  # the simulator's device has no id


@contextmanager
def held() -> Iterator[bool]:
    """Whether the calls to :func:`scratch` inside may take this thread's kept buffers.

    True for the outermost call on this thread, which marks them busy until the
    block ends (put the launches that read them inside it); False for a call nested
    in it, whose :func:`scratch` then allocates.
    """
    pool = _POOL
    if pool.busy:
        yield False
        return
    pool.busy = True  # a handler running before this line ends before the outer call goes on
    try:
        yield True
    finally:
        pool.busy = False


def scratch(name: str, shape: tuple[int, ...], dtype: Any, kept: bool) -> Any:
    """A device array of ``shape``, kept for this thread and device or fresh.

    With ``kept`` (from :func:`held`) the thread's own, reused call after call: its
    contents are whatever the last user left (kernels overwrite all of it), and one
    still held outside the pool (returned with an earlier result) is replaced by a
    fresh one, which is kept instead.
    """
    if not kept:
        return cuda.device_array(shape, dtype)
    buffers = _POOL.buffers
    key = (_device(), name, shape, np.dtype(dtype).str)
    buf = buffers.get(key)
    # references: the pool's, ``buf`` and getrefcount's argument; more are a holder's
    if buf is None or sys.getrefcount(buf) > 3:
        if buf is None and len(buffers) >= SCRATCH_ENTRIES:
            buffers.pop(next(iter(buffers)))
        buf = buffers[key] = cuda.device_array(shape, dtype)
    return buf


def none() -> Any:
    """The empty float32 array that stands for a missing ``xscale`` or ``bias``.

    One per device, shared: it has no element to write.
    """
    device = _device()
    empty = _EMPTY.get(device)
    if empty is None:
        empty = _EMPTY[device] = cuda.device_array(0, np.float32)
    return empty


def launch(kernel: Any, tag: str, grid: int, block: int, *args: Any) -> None:
    """``kernel[grid, block](*args)``, specialized once per ``tag``.

    ``tag`` is the caller's name for the argument types: the same tag must always
    come with the same types.
    """
    key = (kernel, tag, grid, block, _device())
    bound = _BOUND.get(key)
    if bound is None:
        fn = kernel if SIMULATOR else kernel.specialize(*args)
        bound = _BOUND[key] = fn[grid, block]
    bound(*args)


def aligned(a: Any, size: int = 16) -> bool:
    """Whether device array ``a`` starts on a ``size``-byte boundary."""
    if SIMULATOR:  # its arrays are NumPy arrays inside
        return a._ary.ctypes.data % size == 0
    return a.__cuda_array_interface__["data"][0] % size == 0


def current_device() -> int:
    """The id of the current CUDA device (0 in the simulator)."""
    return _device()


@cuda.jit
def copy_1d(src, dst):
    """``dst[i] = src[i]``, cast to ``dst``'s dtype (``src`` of any strides)."""
    for i in range(cuda.grid(1), dst.shape[0], cuda.gridsize(1)):
        dst[i] = src[i]


@cuda.jit
def copy_2d(src, dst):
    """``dst[i, j] = src[i, j]``, cast to ``dst``'s dtype (``src`` of any strides)."""
    cols = dst.shape[1]
    for f in range(cuda.grid(1), dst.shape[0] * cols, cuda.gridsize(1)):
        i = f // cols
        dst[i, f - i * cols] = src[i, f - i * cols]


@cuda.jit
def copy_3d(src, dst):
    """``dst[i, j, k] = src[i, j, k]``, cast to ``dst``'s dtype (``src`` of any strides)."""
    cols = dst.shape[2]
    plane = dst.shape[1] * cols
    for f in range(cuda.grid(1), dst.shape[0] * plane, cuda.gridsize(1)):
        i = f // plane
        j = (f - i * plane) // cols
        k = f - i * plane - j * cols
        dst[i, j, k] = src[i, j, k]


@cuda.jit
def take_2d(src, index, dst):
    """``dst[i, j] = src[index[i], j]``: rows gathered (``index`` in range)."""
    cols = dst.shape[1]
    for f in range(cuda.grid(1), dst.shape[0] * cols, cuda.gridsize(1)):
        i = f // cols
        dst[i, f - i * cols] = src[index[i], f - i * cols]


_COPIES = (None, copy_1d, copy_2d, copy_3d)


def _copy(src: Any, dst: Any) -> None:
    """Copy ``src`` into the C-contiguous ``dst`` of its shape, on the GPU."""
    if src.ndim > 3:  # one launch per leading index (rare: strided arrays of rank 4+)
        for i in range(src.shape[0]):
            _copy(src[i], dst[i])
    elif src.ndim == 0:  # always contiguous: a cast only
        _copy(src.reshape(1), dst.reshape(1))
    else:
        _COPIES[src.ndim][blocks(dst.size), THREADS](src, dst)


def contiguous(a: Any, dtype: Any = None) -> Any:
    """``a`` C-contiguous and of ``dtype`` on the GPU (a copy only when it is not already)."""
    dtype = a.dtype if dtype is None else np.dtype(dtype)
    if a.is_c_contiguous() and a.dtype == dtype:
        return a
    out = cuda.device_array(tuple(a.shape), dtype)
    if out.size:
        _copy(a, out)
    return out


def take_rows(rows: Any, index: Any) -> Any:
    """The 2-D GPU ``rows`` at the (in-range, non-negative) int64 ``index``, gathered there."""
    out = cuda.device_array((index.shape[0], rows.shape[1]), rows.dtype)
    if out.size:
        take_2d[blocks(out.size), THREADS](rows, index, out)
    return out
