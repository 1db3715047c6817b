"""The process's environment: versions, devices, threads and kernel cache.

Read by ``python -m tritnum info`` and printed above ``python -m tritnum bench``'s table.
"""

from __future__ import annotations

import os
import platform
from importlib import metadata
from typing import Any


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment() -> dict[str, Any]:
    """Versions, devices, threads and cache settings of this process."""
    import numba

    import tritnum

    from . import _config, _isa
    from ._dispatch import cuda_available, get_device

    return {
        "tritnum": tritnum.__version__,
        "python": platform.python_version(),
        "numpy": _version("numpy"),
        "numba": numba.__version__,
        "numba-cuda": _version("numba-cuda"),
        "cpu": _cpu_name(),
        "cores": os.cpu_count(),
        "simd": f"{_isa.ISA}" + (" (TRITNUM_ISA)" if _config.ISA else "")
                + f"; the CPU has {', '.join(_isa.available())}",
        "threads": numba.config.NUMBA_NUM_THREADS,
        "threading layer": numba.config.THREADING_LAYER,
        "cuda available": cuda_available(),
        "cuda simulator": bool(numba.config.ENABLE_CUDASIM),
        "default device": get_device(),
        "kernel cache": ("off (TRITNUM_CACHE=0)" if not _config.CACHE
                         else "off (a forced TRITNUM_ISA)" if not _isa.CACHEABLE else "on"),
        "cache dir": numba.config.CACHE_DIR or os.path.join(
            os.path.dirname(tritnum.__file__), "_kernels", "cpu", "__pycache__"),
    }
