"""``--device cuda``: data placed on the GPU, GPU work waited for, torch's GPU baselines."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from .harness import Case


def put(a: np.ndarray, device: str) -> Any:
    """``a`` where ``device``'s kernels read it: on the GPU for ``"cuda"`` (no copy is timed)."""
    from .._interop import to_gpu

    return to_gpu(a) if device == "cuda" else a


def gpu_torch() -> Any:
    """The torch module where it runs on a GPU (the baselines of ``--device cuda``), or None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _synced(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` followed by waiting for the GPU, so that its time is the GPU's work."""
    from numba import cuda

    def run() -> Any:
        result = fn()
        cuda.synchronize()  # numba and torch share the device's primary context
        return result
    return run


def on_gpu(case: Case) -> Case:
    """``case`` timed on the GPU: both sides synchronized, no bar (the bars are for 2 cores)."""
    return replace(case, run=_synced(case.run), baseline=_synced(case.baseline), bar=None)

