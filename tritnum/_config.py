"""Settings read once from the environment when tritnum is imported.

``TRITNUM_DEVICE``  default device: ``auto`` (the default), ``cpu``, ``cuda`` or ``numpy``.
``TRITNUM_CACHE``   ``0`` turns off numba's on-disk kernel cache (on by default).
``TRITNUM_ISA``     force a lower SIMD level for the CPU kernels: ``portable``, ``avx2``,
                    ``avxvnni`` (default: the best the CPU has; see ``tritnum/_isa.py``).
``TRITNUM_CUDA_GEMM`` ``torch``: ``linear`` with many rows on CUDA decodes the weights once and
                    runs PyTorch's cuBLAS GEMMs (more GPU memory; see
                    ``_kernels/cuda/gemm.py``); ``numba`` (default): tritnum's own kernel.
"""

from __future__ import annotations

import os
from typing import get_args

from ._validate import choice
from .typing import Device

DEVICES: tuple[Device, ...] = get_args(Device)

_FALSE = {"0", "false", "no", "off"}


def _read_choice(name: str, default: str | None, allowed: tuple[str, ...]) -> str | None:
    """Environment variable ``name``, lower-cased (``default`` when unset or empty).

    ValueError (raised when tritnum is imported) when the value is not in ``allowed``.
    """
    value = os.environ.get(name, "").strip().lower() or default
    return value if value is None else choice(value, name, allowed)


DEFAULT_DEVICE: str = _read_choice("TRITNUM_DEVICE", "auto", DEVICES)
CACHE: bool = os.environ.get("TRITNUM_CACHE", "1").strip().lower() not in _FALSE
ISA_LEVELS = ("portable", "avx2", "avxvnni", "avx512vnni")  # lowest first
# whether the CPU has it is checked when the kernels load
ISA: str | None = _read_choice("TRITNUM_ISA", None, ISA_LEVELS)
CUDA_GEMMS = ("numba", "torch")
CUDA_GEMM: str = _read_choice("TRITNUM_CUDA_GEMM", "numba", CUDA_GEMMS)
