"""Views shared by the numba backends: packed rows as uint8 bytes."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._formats import Format


def byte_rows(data: Any, fmt: Format) -> tuple[Any, int]:
    """Packed ``(rows, ...)`` data as ``(rows, nbytes)`` uint8 and the minus-plane offset.

    Works on NumPy and numba device arrays alike (both are C-contiguous here).
    """
    if fmt.planes == 2:
        rows, _, nw = data.shape
        return data.reshape(rows, 2 * nw).view(np.uint8), 8 * nw
    return data, 0
