"""CUDA kernels compiled with ``numba.cuda.jit`` (imported on first CUDA use only)."""

from ..._dispatch import register
from ..shared import hdc
from ..shared.threads import warm_threads
from . import (  # noqa: F401  (registers the kernels)
    compress,
    gguf,
    matmul,
    packing,
    q8k,
    quantize,
    vsa,
    vsa_bundle,
    vsa_search,
    vsa_similarity,
)
from ._launch import contiguous, take_rows

register("warm_threads", "cuda")(warm_threads)  # no thread pool to warm
register("contiguous", "cuda")(contiguous)
register("take_rows", "cuda")(take_rows)
for _op in hdc.OPS:  # the HDC classifiers' host arrays
    register(f"hdc.{_op}", "cuda")(getattr(hdc, _op))
