"""GEMV of "base3" weights (5 trits a byte) without unpacking them to memory.

Byte ``j`` of a row holds elements ``5j .. 5j + 4`` as digits (DESIGN: digit ``d`` of a
byte ``b`` is ``((b * 3**d) mod 256) * 3 >> 8``, the code ``t + 1``). With ``x`` laid
out once per call as five planes, ``xp[d * nb + j] = x[5j + d]`` (:func:`planes`), a
row's dot is ``sum_d sum_j t_d(b_j) * xp[d * nb + j]``: each weight row is decoded
once into a cache-resident row of trits in that order (a multiply, a mask and a shift
per digit, vectorized), then dotted with every row of ``x``, plane by plane. Before
this kernel a batch-1 call decoded the whole matrix to float32 (float activations) or
repacked it to "2bit" (int8 activations) every call. Its dots run a scale group and digit
plane at a time, so it pays for a few rows of long groups only (``cpu/matmul.py`` routes
by ``_BASE3_GEMV``): 4096 x 4096 per tensor, 1 row, 1 thread, 0.8-0.95 ms against 2.1-3.2
ms for the other routes and 1.9 ms for BLAS on the dense float matrix.

A scale group ``[e0, e1)`` is, in digit plane ``d``, the bytes ``ceil((e0 - d) / 5)``
up to ``ceil((e1 - d) / 5)``; the rescale is the int8 kernels' own (group ``k``'s sum
times its scale into float64 slot ``k % 8``, the slots summed by halves, times the row's
activation scale): int8 activations, summed in int32 lanes, give the same bits as every
other int8 path; float activations are summed in float32 in any order (vectorized), and
like every float path may differ from another in the last bits.
"""

from __future__ import annotations

import numpy as np

from ._jit import jit
from ._parallel import run
from .rescale import slot_total

_POWERS = (1, 3, 9, 27, 81)
RUN = 1 << 16  # trits a dot run: its int8 sum stays far inside int32


def planes(x: np.ndarray, nb: int) -> np.ndarray:
    """Rows of ``x`` as five digit planes of ``nb`` values each (zeros past the row)."""
    rows, n = x.shape
    padded = np.zeros((rows, nb, 5), x.dtype)
    padded.reshape(rows, -1)[:, :n] = x
    return np.ascontiguousarray(padded.transpose(0, 2, 1)).reshape(rows, 5 * nb)


@jit(inline="always")
def _decode(w, o, trits):
    """Row ``o``'s trits in digit-plane order: ``trits[d * nb + j]`` is byte j's digit d - 1."""
    nb = w.shape[1]
    for d in range(5):
        p = np.uint8(_POWERS[d])
        for j in range(nb):
            v = np.uint8(w[o, j] * p)  # mod 256
            trits[d * nb + j] = np.int8((np.uint16(v) * np.uint16(3)) >> np.uint16(8)) - 1


@jit(inline="always")
def _int_run(tj, xj):
    """``sum tj * xj`` of int8 trits and int8 ``x``, in int32 lanes (exact: a ``RUN`` at most)."""
    run = np.int32(0)
    for j in range(tj.shape[0]):
        run = np.int32(run + np.int32(tj[j]) * np.int32(xj[j]))
    return run


@jit(inline="always")
def _float_run(tj, xj):
    """``sum tj * xj`` of int8 trits and float32 ``x``, in float32."""
    run = np.float32(0)
    for j in range(tj.shape[0]):
        run += np.float32(tj[j]) * xj[j]
    return run


@jit(inline="always")
def _rows(xp, xscale, w, scales, n, y, t0, t1, dot):
    """Rows ``t0..t1`` of ``y``, each group's digit runs summed by ``dot`` in runs of ``RUN``."""
    nb = w.shape[1]
    groups = scales.shape[1]
    size = n // groups
    trits = np.empty(5 * nb, np.int8)
    slots = np.zeros(8)
    for o in range(t0, t1):
        _decode(w, o, trits)
        for r in range(xp.shape[0]):
            slots[:] = 0.0
            for k in range(groups):
                e0 = k * size
                part = 0.0  # float64: exact for int8 runs' sums
                for d in range(5):
                    lo = d * nb + (e0 - d + 4) // 5
                    hi = d * nb + min((e0 + size - d + 4) // 5, nb)
                    for c0 in range(lo, hi, RUN):
                        c1 = min(c0 + RUN, hi)
                        # slices indexed from 0: an index numba cannot prove >= 0 is not
                        # vectorized
                        part += np.float64(dot(trits[c0:c1], xp[r, c0:c1]))
                slots[k % 8] += np.float64(scales[o, k]) * part
            y[r, o] = xscale[r] * slot_total(slots)
    return 0


@jit()
def _rows_int8(xp, xscale, w, scales, n, y, t0, t1):
    return _rows(xp, xscale, w, scales, n, y, t0, t1, _int_run)


# float sums in any order, vectorized: as BLAS, the float path may differ in the last bits
@jit(fastmath={"reassoc", "nsz"})
def _rows_float(xp, xscale, w, scales, n, y, t0, t1):
    return _rows(xp, xscale, w, scales, n, y, t0, t1, _float_run)


def gemv_base3(x: np.ndarray, xscale: np.ndarray, w: np.ndarray, n: int,
               scales: np.ndarray) -> np.ndarray:
    """``(rows, out)`` float32 ``xscale[r] * sum_k scales[o, k] * (group k of w[o] . x[r])``.

    ``x`` int8 (quantized activations) or float32, ``w`` the ``(out, ceil(n / 5))``
    base3 bytes, ``scales`` ``(out, groups)``.
    """
    xp = planes(x, w.shape[1])
    y = np.empty((x.shape[0], w.shape[0]), np.float32)
    run(_rows_int8 if x.dtype == np.int8 else _rows_float, w.shape[0], w.nbytes, xp, xscale,
        w, scales, n, y)
    return y
