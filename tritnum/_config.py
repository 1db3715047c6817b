"""Settings read once from the environment when tritnum is imported.

``TRITNUM_DEVICE``  default device: ``auto`` (the default), ``cpu``, ``cuda`` or ``numpy``.
``TRITNUM_CACHE``   ``0`` turns off numba's on-disk kernel cache (on by default).
``TRITNUM_ISA``     force a lower SIMD level for the CPU kernels: ``portable``, ``avx2``,
                    ``avxvnni`` (default: the best the CPU has; see ``_kernels/cpu/_isa.py``).
``TRITNUM_CUDA_GEMM`` ``torch``: ``linear`` with many rows on CUDA decodes the weights once and
                    runs PyTorch's cuBLAS GEMMs (more GPU memory; see
                    ``_kernels/cuda/gemm.py``); ``numba`` (default): tritnum's own kernel.
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
ISA_LEVELS = ("portable", "avx2", "avxvnni", "avx512vnni")  # lowest first


def _read_isa() -> str | None:
    value = os.environ.get("TRITNUM_ISA", "").strip().lower() or None
    if value is not None and value not in ISA_LEVELS:
        raise ValueError(
            f"TRITNUM_ISA={value!r} is not a SIMD level; use one of {', '.join(ISA_LEVELS)}"
        )
    return value


ISA: str | None = _read_isa()  # whether the CPU has it is checked when the kernels load

CUDA_GEMMS = ("numba", "torch")


def _read_cuda_gemm() -> str:
    value = os.environ.get("TRITNUM_CUDA_GEMM", "numba").strip().lower() or "numba"
    if value not in CUDA_GEMMS:
        raise ValueError(
            f"TRITNUM_CUDA_GEMM={value!r} is not a GEMM backend; use one of {', '.join(CUDA_GEMMS)}"
        )
    return value


CUDA_GEMM: str = _read_cuda_gemm()
