"""tritnum: ternary numerics for NumPy.

{-1, 0, +1} data packed at 1.6-2 bits per value, with NumPy reference,
numba CPU and numba CUDA kernels behind one API.

>>> import numpy as np, tritnum as tn
>>> p = tn.pack(np.array([[1, 0, -1], [0, 0, 1]]), "base3")
>>> tn.unpack(p)
array([[ 1,  0, -1],
       [ 0,  0,  1]], dtype=int8)
"""

from __future__ import annotations

from . import errors, io, vsa
from ._dispatch import cuda_available, get_device, set_device, use_device
from ._threads import get_num_threads, limit_threads, set_num_threads
from ._warmup import warmup
from .compress import ErrorFeedback, Sketch, compress, decompress
from .errors import (
    DeviceUnavailableError,
    FormatError,
    InvalidTritsError,
    ShapeMismatchError,
    TritnumError,
)
from .io.files import load, save
from .matmul import BitLinear, linear
from .packing import FORMATS, PackedTrits, nbytes, pack, unpack
from .quantize import TernaryTensor, dequantize, quantize, quantize_activations

__version__ = "0.1.0"

__all__ = [
    "FORMATS",
    "BitLinear",
    "DeviceUnavailableError",
    "ErrorFeedback",
    "FormatError",
    "InvalidTritsError",
    "PackedTrits",
    "ShapeMismatchError",
    "Sketch",
    "TernaryTensor",
    "TritnumError",
    "__version__",
    "compress",
    "cuda_available",
    "decompress",
    "dequantize",
    "errors",
    "get_device",
    "get_num_threads",
    "io",
    "limit_threads",
    "linear",
    "load",
    "nbytes",
    "pack",
    "quantize",
    "quantize_activations",
    "save",
    "set_device",
    "set_num_threads",
    "unpack",
    "use_device",
    "vsa",
    "warmup",
]
