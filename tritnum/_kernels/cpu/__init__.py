"""CPU kernels compiled with ``numba.njit`` (imported on first use)."""

from . import packing  # noqa: F401  (registers the packing kernels)
