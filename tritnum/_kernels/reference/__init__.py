"""NumPy reference kernels: the obvious vectorized code, and the test oracle."""

from . import compress, gguf, matmul, packing, q8k, quantize, vsa  # noqa: F401  (registers the reference kernels)
