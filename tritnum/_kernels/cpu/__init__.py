"""CPU kernels compiled with ``numba.njit`` (imported on first use)."""

from ..._dispatch import register
from ..shared.layout import contiguous, take_rows
from . import (  # noqa: F401  (registers the kernels)
    compress,
    dequantize,
    gguf,
    hdc,
    matmul,
    packing,
    q8k,
    quantize,
    small_linear,
    vsa,
    vsa_search,
)

register("contiguous", "cpu")(contiguous)
register("take_rows", "cpu")(take_rows)
