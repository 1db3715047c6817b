"""CPU kernels compiled with ``numba.njit`` (imported on first use)."""

from ..._dispatch import register
from ..shared.layout import contiguous, take_rows
from . import compress, gguf, hdc, matmul, packing, q8k, quantize, vsa, vsa_search  # noqa: F401  (registers the kernels)

register("contiguous", "cpu")(contiguous)
register("take_rows", "cpu")(take_rows)
