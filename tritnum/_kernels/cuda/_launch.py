"""Launch helpers shared by the CUDA kernels."""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

THREADS = 128
MAX_BLOCKS = 4096  # kernels loop grid-stride over what one launch does not cover


def blocks(work: int) -> int:
    """Blocks for ``work`` items at ``THREADS`` per block (at least one)."""
    return max(1, min(MAX_BLOCKS, -(-work // THREADS)))


def flag() -> Any:
    """A one-element int32 device array, 0, that kernels set to 1 on bad input."""
    return cuda.to_device(np.zeros(1, np.int32))


def is_set(bad: Any) -> bool:
    """Whether a :func:`flag` was set."""
    return bool(bad.copy_to_host()[0])
