"""Moving arrays between host and GPU, and seeing them as rows."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._dispatch import is_cuda_array


def to_host(a: Any) -> np.ndarray:
    """A NumPy array of ``a`` (copied back from the GPU when it lives there)."""
    if is_cuda_array(a):
        return to_gpu(a).copy_to_host()
    return np.asarray(a)


def to_gpu(a: Any) -> Any:
    """A numba device array of ``a`` (no copy when it already lives on the GPU)."""
    from numba import cuda

    if getattr(a, "__cuda_ndarray__", False):  # a numba device array (or the simulator's)
        return a
    if is_cuda_array(a):
        return cuda.as_cuda_array(a)
    return cuda.to_device(np.ascontiguousarray(a))


def for_device(a: Any, device: str) -> Any:
    """``a`` where kernels of ``device`` can read it."""
    return to_gpu(a) if device == "cuda" else to_host(a)


def place(a: Any, on_gpu: bool) -> Any:
    """A result moved to where the caller's input lived."""
    return to_gpu(a) if on_gpu else to_host(a)


def as_rows(a: Any, tail: int = 1) -> Any:
    """``a`` reshaped to ``(rows, *a.shape[-tail:])`` (a view whenever NumPy can make one)."""
    if a.ndim == tail + 1:
        return a
    if is_cuda_array(a) and not a.is_c_contiguous():
        # numba device arrays reshape only when contiguous; copy through the host
        a = to_gpu(np.ascontiguousarray(to_host(a)))
    lead = a.shape[: a.ndim - tail]
    return a.reshape((math.prod(lead), *a.shape[a.ndim - tail:]))
