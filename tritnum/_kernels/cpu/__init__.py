"""CPU kernels compiled with ``numba.njit`` (imported on first use)."""

from . import gguf, matmul, packing, quantize, vsa, vsa_search  # noqa: F401  (registers the kernels)
