"""The plain arrays tritnum's files hold next to ternary tensors: which dtypes, from which inputs.

A plain array is a NumPy array or scalar, a PyTorch tensor, or a GPU array
(``__cuda_array_interface__``) of bool, signed or unsigned integers of 8 to 64
bits, or float16/32/64; it is written from the host, in little-endian order.
NumPy has no bfloat16: a bfloat16 tensor comes in as the uint16 bits of its
values, and :func:`bfloat16_to_float32` widens such bits exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._interop import is_cuda_array, is_torch, to_host_exact

__all__ = ["MAX_DIMS", "PLAIN_DTYPES", "bfloat16_to_float32", "float32_to_bfloat16", "is_array",
           "numpy_shape_problem", "plain_array"]

#: The most dimensions a NumPy array may have (64 in NumPy 2, 32 in NumPy 1).
MAX_DIMS = 64 if int(np.__version__.split(".")[0]) >= 2 else 32
_MAX_BYTES = 2**63 - 1  # NumPy's limit on an array's bytes (zero dimensions left out)


def numpy_shape_problem(shape: Sequence[int]) -> str | None:
    """Why NumPy cannot make an array of ``shape`` (items of up to 8 bytes), or None.

    A file's header may declare such a shape (an empty one, or not, that no
    file's bytes are checked against): readers refuse it as FormatError, not with
    NumPy's ValueError later.

    >>> numpy_shape_problem((0, 2**62, 2**62))
    'its dimensions multiply to more values than NumPy can hold (2**63 bytes)'
    >>> numpy_shape_problem((1,) * 65)[:35]
    '65 dimensions: NumPy holds at most '
    """
    if len(shape) > MAX_DIMS:
        return f"{len(shape)} dimensions: NumPy holds at most {MAX_DIMS} (of this version)"
    n = 8
    for d in shape:
        n *= d or 1  # NumPy checks the product of the other dimensions
        if n > _MAX_BYTES:
            return "its dimensions multiply to more values than NumPy can hold (2**63 bytes)"
    return None

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
