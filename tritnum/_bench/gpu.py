"""``--device cuda``: data placed on the GPU, GPU work waited for, torch's GPU baselines.

Each CUDA row also says how close it runs to the GPU's limit: a case's :class:`Work`
(the bytes it must move through HBM at least, and the operations it must do on the unit
that would do them best) against the device's :class:`Peak` gives its floor, the time of
the slower of the two at the datasheet rates; the row's note reports ``floor / time``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
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


@dataclass(frozen=True)
class Work:
    """The least a row must do: ``bytes`` through HBM and ``ops`` on the ``unit`` that fits.

    Units: ``"int8"`` and ``"fp16"`` tensor-core operations (a multiply-add is 2),
    ``"popc"`` 64-bit population counts. ``ops`` 0: memory alone bounds the row.
    """

    bytes: float
    ops: float = 0.0
    unit: str = ""


@dataclass(frozen=True)
class Peak:
    """A GPU's datasheet rates (dense, no sparsity): HBM bytes/s and operations/s by unit."""

    hbm: float
    ops: dict[str, float]


def _peak(hbm_tbs: float, fp16_tflops: float, sms: int, boost_ghz: float) -> Peak:
    # int8 tensor cores run at twice fp16; popc: 16 32-bit counts per SM per clock on
    # sm_90 (CUDA C++ Programming Guide, arithmetic instruction throughput), 2 per 64 bits
    return Peak(hbm_tbs * 1e12, {"fp16": fp16_tflops * 1e12, "int8": 2 * fp16_tflops * 1e12,
                                 "popc": sms * 8 * boost_ghz * 1e9})


# by a fragment of the device's name, the most specific first (NVIDIA datasheets)
PEAKS: dict[str, Peak] = {
    "H200 NVL": _peak(4.8, 835.0, 132, 1.785),
    "H200": _peak(4.8, 989.4, 132, 1.98),
    "H100 NVL": _peak(3.9, 835.0, 132, 1.785),
    "H100 PCIe": _peak(2.0, 756.0, 114, 1.755),
    "H100": _peak(3.35, 989.4, 132, 1.98),  # SXM5 (the name says "80GB HBM3")
}


def peak_of(name: str) -> tuple[str, Peak] | None:
    """The entry of :data:`PEAKS` for a device named ``name``, or None for another GPU."""
    return next(((key, p) for key, p in PEAKS.items() if key in name), None)


def limit_note(work: Work, peak: Peak, seconds: float) -> str:
    """``seconds`` against the floor of ``work`` on ``peak``: the fraction and what binds."""
    t_mem = work.bytes / peak.hbm
    t_ops = work.ops / peak.ops[work.unit] if work.ops else 0.0
    floor = max(t_mem, t_ops)
    parts = [f"{work.bytes / seconds / 1e9:.0f} GB/s = {work.bytes / seconds / peak.hbm:.0%} HBM"]
    if work.ops:
        rate = work.ops / seconds
        parts.append(f"{rate / 1e12:.1f} T{work.unit}/s = {rate / peak.ops[work.unit]:.0%}")
    bound = "HBM" if t_mem >= t_ops else work.unit
    return (f"{floor / seconds:.1%} of limit ({bound}-bound, floor {floor * 1e6:.1f} us; "
            f"{', '.join(parts)})")


@functools.cache
def device_peak() -> tuple[str, tuple[str, Peak] | None]:
    """The current GPU's name and its :data:`PEAKS` entry (None where unknown)."""
    from numba import cuda

    name = getattr(cuda.get_current_device(), "name", "the CUDA simulator")
    name = name.decode() if isinstance(name, bytes) else str(name)  # bytes in older numba
    return name, peak_of(name)


def _with_limit(note: Callable[[float], str] | None, work: Work) -> Callable[[float], str]:
    def both(seconds: float) -> str:
        name, found = device_peak()
        limit = (limit_note(work, found[1], seconds) if found
                 else f"no peak figures for {name!r}")
        return f"{note(seconds)}; {limit}" if note else limit
    return both


def on_gpu(case: Case) -> Case:
    """``case`` timed on the GPU: both sides synchronized, no bar (the bars are for 2 cores).

    A case with :attr:`~.harness.Case.work` notes its fraction of the GPU's limit.
    """
    note = case.note if case.work is None else _with_limit(case.note, case.work)
    return replace(case, run=_synced(case.run), baseline=_synced(case.baseline), bar=None,
                   note=note)

