"""What a backend keeps warm beside its kernels: nothing, for backends without a thread pool."""

from __future__ import annotations


def warm_threads() -> None:
    """Nothing to compile: the backend has no threads of its own to hand work to."""
