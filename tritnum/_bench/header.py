"""The lines around the table: the machine it ran on and the CPU time the hypervisor stole."""

from __future__ import annotations

from typing import Any


def title(env: dict[str, Any]) -> str:
    """The first line: the machine, threads and versions (from ``environment()``)."""
    return (f"tritnum bench: {env['cpu']}, {env['threads']} threads, numpy {env['numpy']}, "
            f"numba {env['numba']}; speedup = baseline time / tritnum time (median)")


def gpu_line() -> str:
    """The line ``--device cuda`` adds: the GPU's name and how its times are taken."""
    from numba import cuda

    name = cuda.get_current_device().name  # bytes in older numba-cuda
    name = name.decode() if isinstance(name, bytes) else name
    return (f"on the GPU: {name}; each side's data lives "
            "where it runs and its time includes waiting for the GPU; no bars (2 CPU cores)")


def cpu_times() -> list[int] | None:
    """The machine's CPU time counters (``/proc/stat``), or None where there are none."""
    try:
        with open("/proc/stat") as f:
            return [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None


def steal_fraction(before: list[int] | None, after: list[int] | None) -> float | None:
    """Share of CPU time a hypervisor gave to other machines between two readings."""
    if not before or not after or len(before) < 8:
        return None
    delta = [b - a for a, b in zip(before, after, strict=False)]
    total = sum(delta[:8])
    return delta[7] / total if total > 0 else None


def steal_line(steal: float) -> str:
    """The last line: the share of CPU time stolen, with a warning above 5 %."""
    return (f"CPU time stolen by the hypervisor during the run: {steal:.0%}"
            + (" (ratios are unreliable: rerun when the host is quieter)" if steal > 0.05
               else ""))
