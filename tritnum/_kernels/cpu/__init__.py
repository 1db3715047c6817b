"""CPU kernels compiled with ``numba.njit`` (imported on first use)."""

from . import compress, gguf, matmul, packing, q8k, quantize, vsa, vsa_search  # noqa: F401  (registers the kernels)
