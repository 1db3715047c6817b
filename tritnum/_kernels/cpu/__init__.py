"""CPU kernels compiled with ``numba.njit`` (imported on first use)."""

from . import packing, quantize  # noqa: F401  (registers the kernels)
