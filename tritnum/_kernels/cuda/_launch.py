"""Launch helpers shared by the CUDA kernels: grid sizes, flags, scratch buffers, bound launches.

Steady-state calls (``tn.linear`` on weights already on the GPU) allocate nothing and
look nothing up by argument types: :func:`scratch` hands back the same device buffer
for the same (thread, device, name, shape, dtype), and :func:`launch` keeps the
configured launch of a kernel specialized to its argument types (numba's
``Dispatcher.specialize``) under a key the caller vouches for. Buffers are reused in
stream order: every tritnum kernel runs on the default stream, and a thread's buffers
are its own (two threads' launches interleave on that stream).
"""

from __future__ import annotations

import threading
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

_local = threading.local()
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


def scratch(name: str, shape: tuple[int, ...], dtype: Any) -> Any:
    """A device array of ``shape`` kept for this thread and device, reused call after call.

    Its contents are whatever the last user left: kernels overwrite all of it.
    """
    pool = getattr(_local, "pool", None)
    if pool is None:
        pool = _local.pool = {}
    key = (_device(), name, shape, np.dtype(dtype).str)
    buf = pool.get(key)
    if buf is None:
        if len(pool) >= SCRATCH_ENTRIES:
            pool.pop(next(iter(pool)))
        buf = pool[key] = cuda.device_array(shape, dtype)
    return buf


def none() -> Any:
    """The empty float32 array that stands for a missing ``xscale`` or ``bias``."""
    return scratch("none", (0,), np.float32)


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
