"""CUDA kernels compiled with ``numba.cuda.jit`` (imported on first CUDA use only)."""

from ..._dispatch import register
from ..shared.threads import warm_threads
from . import compress, gguf, matmul, packing, q8k, quantize, vsa  # noqa: F401  (registers the kernels)
from ._launch import contiguous, take_rows

register("warm_threads", "cuda")(warm_threads)  # no thread pool to warm
register("contiguous", "cuda")(contiguous)
register("take_rows", "cuda")(take_rows)
