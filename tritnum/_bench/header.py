"""The lines around the table: the machine it ran on, and how busy it was meanwhile."""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from typing import Any


def title(env: dict[str, Any]) -> str:
    """The first line: the machine, threads and versions (from ``environment()``)."""
    return (f"tritnum bench: {env['cpu']} ({env['simd'].split(';')[0]} kernels), "
            f"{env['threads']} threads, numpy {env['numpy']}, "
            f"numba {env['numba']}; speedup = baseline time / tritnum time (median)")


def gpu_line() -> str:
    """The line ``--device cuda`` adds: the GPU's name and how its times are taken."""
    from .._config import CUDA_GEMM
    from .gpu import device_peak

    name = device_peak()[0]
    return (f"on the GPU: {name}; each side's data lives "
            "where it runs and its time includes waiting for the GPU; no bars (2 CPU cores); "
            f"linear's GEMM: {CUDA_GEMM} (TRITNUM_CUDA_GEMM)")


def cpu_times() -> list[int] | None:
    """The machine's CPU time counters (``/proc/stat``), or None where there are none."""
    try:
        with open("/proc/stat") as f:
            return [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None


@dataclass
class Snapshot:
    """What the machine and this process had used at one moment."""

    machine: list[int] | None  # /proc/stat ticks: user nice system idle iowait irq softirq steal
    ours: float  # CPU seconds of this process (all its threads) and of its ended children


def snapshot() -> Snapshot:
    """Read the counters now.

    The children a bench row ran (the fresh processes of the ``firstcall`` and GGUF file
    rows) count as this process, once ended: they are the run's work, not contention.
    """
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return Snapshot(cpu_times(), sum(u.ru_utime + u.ru_stime for u in usage))


@dataclass
class Contention:
    """How much of the machine others had while the bench ran."""

    others: float  # share of the machine's CPU time other processes used
    steal: float  # share the hypervisor gave to other machines
    load: float  # the 1-minute load average at the end
    cores: int

    @property
    def noisy(self) -> bool:
        return self.others > 0.10 or self.steal > 0.05 or self.load > self.cores + 0.5


def contention(before: Snapshot, after: Snapshot) -> Contention | None:
    """Contention between two snapshots (None where /proc/stat is not there)."""
    if not before.machine or not after.machine or len(before.machine) < 8:
        return None
    delta = [b - a for a, b in zip(before.machine, after.machine, strict=False)][:8]
    total = sum(delta)
    if total <= 0:
        return None
    busy_seconds = (total - delta[3] - delta[4] - delta[7]) / os.sysconf("SC_CLK_TCK")
    cores = os.cpu_count() or 1
    wall_cpu = total / os.sysconf("SC_CLK_TCK")  # machine CPU seconds that passed
    others = max(0.0, busy_seconds - (after.ours - before.ours)) / wall_cpu
    return Contention(others, delta[7] / total, os.getloadavg()[0], cores)


def contention_line(c: Contention) -> str:
    """The line above the table: what else ran, and a warning when the run was noisy."""
    line = (f"while measuring: other processes used {c.others:.0%} of the CPU time, the "
            f"hypervisor stole {c.steal:.0%}, load average {c.load:.1f} on {c.cores} cores")
    return line + ("; NOISY RUN: ratios are unreliable, rerun when the machine is quieter"
                   if c.noisy else "")
