"""CPU kernels of the HDC classifiers (:mod:`tritnum.vsa.estimators`): int8 hypervectors.

The nonlinear encoder's phases become trits here, and the norms and class sums of
encoded rows are taken without a float copy of them. (The products of mini-batches
with the class vectors are BLAS's: a compiled loop here was five times slower.)
"""

from __future__ import annotations

import math

import numpy as np

from ..._dispatch import register
from ._jit import jit

FAST = {"reassoc", "contract", "nsz"}


@register("hdc.row_norms", "cpu")
@jit()
def row_norms(H):
    """The Euclidean norm of each int8 trit row: the square root of its non-zero count."""
    out = np.empty(H.shape[0])
    for i in range(H.shape[0]):
        n = 0
        for j in range(H.shape[1]):
            n += H[i, j] != 0
        out[i] = math.sqrt(n)
    return out


@register("hdc.add_rows", "cpu")
@jit()
def add_rows(W, H, t):
    """``W[t[i]] += H[i]`` for every row (class sums of int8 rows, any ``W`` dtype)."""
    for i in range(H.shape[0]):
        k = t[i]
        for j in range(H.shape[1]):
            W[k, j] += H[i, j]


@register("hdc.phase_trits", "cpu")
@jit(fastmath=FAST)
def phase_trits(turns, phase, edge, out):
    """``out``: the trits of ``cos(2 pi (turns + phase))`` against ``cos(2 pi edge)``.

    +1 above it, -1 below its negative, 0 between (``edge`` in (0, 1/4]; at 1/4
    only exact ties are 0). Without a cosine: the distance ``m`` of the phase to the
    nearest whole turn gives +1 for ``m < edge`` and -1 for ``m > 1/2 - edge``.
    """
    for i in range(turns.shape[0]):
        for j in range(turns.shape[1]):
            u = turns[i, j] + phase[j]
            f = u - np.floor(u)
            m = min(f, np.float32(1) - f)
            out[i, j] = np.int8(m < edge) - np.int8(m > np.float32(0.5) - edge)
