"""The plain arrays tritnum's files hold next to ternary tensors: which dtypes, from which inputs.

A plain array is a NumPy array or scalar, a PyTorch tensor, or a GPU array
(``__cuda_array_interface__``) of bool, signed or unsigned integers of 8 to 64
bits, or float16/32/64; it is written from the host, in little-endian order.
NumPy has no bfloat16: a bfloat16 tensor comes in as the uint16 bits of its
values, and :func:`bfloat16_to_float32` widens such bits exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._interop import is_cuda_array, is_torch, to_host_exact

__all__ = ["PLAIN_DTYPES", "bfloat16_to_float32", "float32_to_bfloat16", "is_array",
           "plain_array"]

#: The dtypes of plain arrays, in native byte order (either order is accepted).
PLAIN_DTYPES = tuple(np.dtype(c) for c in "?bhilqBHILQefd")
_NAMES = ", ".join(dict.fromkeys(str(d) for d in PLAIN_DTYPES))


def is_array(value: Any) -> bool:
    """Whether ``value`` is an array a file can hold as it is (not a list, not a PackedTrits)."""
    return isinstance(value, (np.ndarray, np.generic)) or is_torch(value) or is_cuda_array(value)


def plain_array(value: Any, where: str) -> tuple[np.ndarray, bool]:
    """``value`` as a little-endian NumPy array, and whether it holds bfloat16 bits.

    TypeError, naming ``where``, for a dtype that is not a plain one.
    """
    a, bfloat16 = to_host_exact(value)
    if not bfloat16 and a.dtype.newbyteorder("=") not in PLAIN_DTYPES:
        raise TypeError(f"{where} is an array of {a.dtype}; files hold arrays of {_NAMES}, "
                        "bfloat16 tensors, PackedTrits and TernaryTensors")
    return np.asarray(a, a.dtype.newbyteorder("<"), order="C"), bfloat16


def bfloat16_to_float32(bits: np.ndarray) -> np.ndarray:
    """float32 values of bfloat16 ``bits`` (uint16 of either byte order), exactly."""
    return (bits.astype("<u4") << 16).view("<f4")


def float32_to_bfloat16(a: np.ndarray) -> np.ndarray:
    """The bfloat16 bits (uint16) of float32 ``a``, truncated: exact where ``a`` is bfloat16."""
    return (np.asarray(a, np.float32).view(np.uint32) >> 16).astype(np.uint16)
