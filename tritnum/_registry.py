"""The kernel registry: one kernel per ``(operation, device)``, backends imported on first use.

Backend modules register their kernels when imported (:func:`register`);
:func:`kernel` imports a backend the first time one of its kernels is asked for,
so ``import tritnum`` neither imports numba nor touches CUDA.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

# Internal API: the private names other modules use (tests/test_architecture_seams.py):
# _dispatch.py (resolving a kernel).
_INTERNAL_API = ("_BACKENDS", "_REGISTRY")

__all__ = ["kernel", "register"]

_BACKENDS = {
    "numpy": "tritnum._kernels.reference",
    "cpu": "tritnum._kernels.cpu",
    "cuda": "tritnum._kernels.cuda",
}
_REGISTRY: dict[tuple[str, str], Callable[..., Any]] = {}


def register(op: str, device: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``fn`` as the kernel of ``op`` on ``device`` (used by backend modules)."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        _REGISTRY[op, device] = fn
        return fn

    return decorate


def kernel(op: str, device: str) -> Callable[..., Any]:
    """The kernel of ``op`` for a resolved ``device``, importing its backend on first use."""
    key = (op, device)
    if key not in _REGISTRY:
        importlib.import_module(_BACKENDS[device])
    return _REGISTRY[key]
