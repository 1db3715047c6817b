"""Settings read once from the environment when tritnum is imported.

``TRITNUM_DEVICE``  default device: ``auto`` (the default), ``cpu``, ``cuda`` or ``numpy``.
``TRITNUM_CACHE``   ``0`` turns off numba's on-disk kernel cache (on by default).
``TRITNUM_ISA``     force a lower SIMD level for the CPU kernels: ``portable``, ``avx2``,
                    ``avxvnni`` (default: the best the CPU has; see ``_kernels/cpu/_isa.py``).
"""

from __future__ import annotations

import os
from typing import get_args

from .typing import Device

DEVICES: tuple[Device, ...] = get_args(Device)

_FALSE = {"0", "false", "no", "off"}


def _read_device() -> str:
    value = os.environ.get("TRITNUM_DEVICE", "auto").strip().lower() or "auto"
    if value not in DEVICES:
        raise ValueError(
            f"TRITNUM_DEVICE={value!r} is not a device; use one of {', '.join(DEVICES)}"
        )
    return value


DEFAULT_DEVICE: str = _read_device()
CACHE: bool = os.environ.get("TRITNUM_CACHE", "1").strip().lower() not in _FALSE
ISA: str | None = os.environ.get("TRITNUM_ISA", "").strip().lower() or None
