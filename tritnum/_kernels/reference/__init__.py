"""NumPy reference kernels: the obvious vectorized code, and the test oracle."""

from ..._dispatch import register
from ..shared import hdc
from ..shared.layout import contiguous, take_rows
from ..shared.threads import warm_threads
from . import compress, gguf, matmul, packing, q8k, quantize, vsa  # noqa: F401  (registers the reference kernels)

register("warm_threads", "numpy")(warm_threads)  # no thread pool to warm
register("contiguous", "numpy")(contiguous)
register("take_rows", "numpy")(take_rows)
for _op in hdc.OPS:  # the HDC classifiers' host arrays
    register(f"hdc.{_op}", "numpy")(getattr(hdc, _op))
