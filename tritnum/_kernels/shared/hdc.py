"""The HDC classifiers' helpers in NumPy: the reference of ``cpu/hdc.py``'s kernels.

The classifiers (:mod:`tritnum.vsa.estimators`) hold their arrays on the host, as
scikit-learn's estimators do, so the "numpy" and "cuda" backends both run these.
"""

from __future__ import annotations

import numpy as np


def row_norms(H: np.ndarray) -> np.ndarray:
    """The Euclidean norm of each int8 trit row: the square root of its non-zero count."""
    return np.sqrt(np.count_nonzero(H, axis=1).astype(np.float64))


def add_rows(W: np.ndarray, H: np.ndarray, t: np.ndarray) -> None:
    """``W[t[i]] += H[i]`` for every row (class sums of int8 rows)."""
    np.add.at(W, t, H)


def phase_trits(turns: np.ndarray, phase: np.ndarray, edge: np.float32,
                out: np.ndarray) -> None:
    """``out``: the trits of the phases ``turns + phase`` (float32 arithmetic).

    +1 within ``edge`` of a whole turn, -1 within ``edge`` of a half turn, 0 elsewhere.
    """
    u = turns + phase
    f = u - np.floor(u)
    m = np.minimum(f, np.float32(1) - f)
    out[...] = (m < edge).astype(np.int8) - (m > np.float32(0.5) - edge).astype(np.int8)
