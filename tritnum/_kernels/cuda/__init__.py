"""CUDA kernels compiled with ``numba.cuda.jit`` (imported on first CUDA use only)."""

from . import gguf, packing, quantize  # noqa: F401  (registers the kernels)
