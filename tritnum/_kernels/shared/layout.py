"""Host kernels of the layout ops (NumPy and CPU backends): contiguous copies, row gathers."""

from __future__ import annotations

from typing import Any

import numpy as np


def contiguous(a: Any, dtype: Any = None) -> np.ndarray:
    """``a`` C-contiguous and of ``dtype`` (a copy only when it is not already)."""
    return np.ascontiguousarray(a, dtype)


def take_rows(rows: Any, index: np.ndarray) -> np.ndarray:
    """The 2-D ``rows`` at the (in-range, non-negative) int64 ``index``, in that order."""
    return rows[index]
