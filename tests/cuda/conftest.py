"""The CUDA lane: tritnum's CUDA kernels under numba's simulator, or on a real GPU.

Run it as its own process, with the simulator switched on before numba is imported::

    NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/cuda -p no:cacheprovider

(the main run skips this folder through ``--ignore=tests/cuda`` in pyproject's addopts;
naming the folder on the command line collects it anyway). On a machine with a GPU the
lane also runs without the simulator, on the GPU.

Without the simulator and without a GPU this conftest stops the run with a usage error
instead of letting every test skip: a lane that silently tests nothing is worse than none.
"""

from __future__ import annotations

import os
import sys

import pytest

_SIM_REQUESTED = os.environ.get("NUMBA_ENABLE_CUDASIM", "").strip() not in ("", "0")
_NUMBA_WAS_IMPORTED = "numba" in sys.modules

# The lane launches deliberately tiny grids; on a real GPU numba would warn about low
# occupancy (a NumbaPerformanceWarning, which pyproject turns into an error). Read by
# numba when it is imported, like NUMBA_ENABLE_CUDASIM.
os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")


def _stop(reason: str) -> None:
    raise pytest.UsageError(
        f"tests/cuda cannot run: {reason}.\n"
        "Run the lane in its own process with the simulator on:\n"
        "    NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/cuda -p no:cacheprovider"
    )


try:
    from numba import cuda
except ImportError as exc:  # numba-cuda missing or broken
    _stop(f"numba.cuda cannot be imported ({exc}); install the 'cuda' extra")

try:  # numba-cuda decides simulator or driver from this config when it is imported
    from numba.cuda.core import config as _cuda_config
except ImportError:  # older numba-cuda
    from numba.core import config as _cuda_config

SIMULATOR = bool(getattr(_cuda_config, "ENABLE_CUDASIM", 0))

if not SIMULATOR:
    try:
        _gpu = bool(cuda.is_available())
    except Exception:  # a broken driver counts as no GPU
        _gpu = False
    if not _gpu:
        if _SIM_REQUESTED and _NUMBA_WAS_IMPORTED:
            _stop(
                "NUMBA_ENABLE_CUDASIM is set but numba was imported before it took effect "
                "(by another conftest or plugin in this process), and there is no GPU"
            )
        _stop("the CUDA simulator is off (NUMBA_ENABLE_CUDASIM is not set) and no GPU is visible")

from hypothesis import HealthCheck, settings  # noqa: E402

# The simulator costs ~150 µs per thread and every launch is at least one 128-thread block:
# a handful of examples per property, no deadline, no example database in the checkout.
settings.register_profile(
    "tritnum-cuda",
    deadline=None,
    max_examples=10,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.load_profile("tritnum-cuda")


def pytest_report_header(config: pytest.Config) -> str:
    where = "numba CUDA simulator" if SIMULATOR else "CUDA GPU"
    return f"tritnum CUDA lane: {where}"
