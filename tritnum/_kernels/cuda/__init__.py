"""CUDA kernels compiled with ``numba.cuda.jit`` (imported on first CUDA use only)."""

from . import compress, gguf, matmul, packing, q8k, quantize, vsa  # noqa: F401  (registers the kernels)
