"""CPU kernels of the HDC classifiers (:mod:`tritnum.vsa.estimators`): int8 hypervectors.

The mistake-driven passes of AdaptHD, OnlineHD, SparseHD and NeuralHD run here whole
(one call an epoch, each mini-batch predicted then updated, as torchhd's loop does), on
the encoded trits without a float copy of them; the nonlinear encoder's phases become
trits here. Dot products of trits with float class vectors are float64 sums in any
order (vectorized, as BLAS): they may differ from NumPy's in the last bits.
"""

from __future__ import annotations

import math

import numpy as np

from ._jit import jit

FAST = {"reassoc", "contract", "nsz"}


# columns a sweep of the rows takes at a time: the class vectors' tile stays in L1
TILE = 512


@jit(fastmath=FAST)
def _dots(h, W, out, j0, j1):
    """``out[k] += h[j0:j1] . W[k, j0:j1]`` for int8 ``h``, four class vectors a sweep."""
    c = W.shape[0]
    k = 0
    while k + 4 <= c:
        a0 = a1 = a2 = a3 = 0.0
        for j in range(j0, j1):
            x = np.float64(h[j])
            a0 += x * W[k, j]
            a1 += x * W[k + 1, j]
            a2 += x * W[k + 2, j]
            a3 += x * W[k + 3, j]
        out[k] += a0
        out[k + 1] += a1
        out[k + 2] += a2
        out[k + 3] += a3
        k += 4
    while k < c:
        a = 0.0
        for j in range(j0, j1):
            a += np.float64(h[j]) * W[k, j]
        out[k] += a
        k += 1


@jit(fastmath=FAST)
def _norms(W, out):
    """The Euclidean norm of each row of ``W``, 1 for a zero row (its cosines are 0)."""
    for k in range(W.shape[0]):
        s = 0.0
        for j in range(W.shape[1]):
            s += np.float64(W[k, j]) * W[k, j]
        out[k] = math.sqrt(s) if s > 0 else 1.0


@jit()
def _cosine_rows(H, r0, r1, W, h_norms, w_norms, S):
    """``S[i - r0]``: the cosines of ``H[i]`` with the rows of ``W``, ``i`` in ``[r0, r1)``."""
    d = W.shape[1]
    S[:r1 - r0] = 0.0
    for j0 in range(0, d, TILE):
        for i in range(r0, r1):
            _dots(H[i], W, S[i - r0], j0, min(j0 + TILE, d))
    for i in range(r0, r1):
        hn = h_norms[i] if h_norms[i] > 0 else 1.0
        for k in range(W.shape[0]):
            S[i - r0, k] /= hn * w_norms[k]


@jit()
def cosines(H, W, h_norms):
    """``(n, n_classes)`` cosines of int8 rows ``H`` (norms ``h_norms``) with ``W``."""
    S = np.empty((H.shape[0], W.shape[0]))
    w_norms = np.empty(W.shape[0])
    _norms(W, w_norms)
    _cosine_rows(H, 0, H.shape[0], W, h_norms, w_norms, S)
    return S


@jit()
def mistake_pass(W, H, t, lr, batch, online, h_norms):
    """One pass over the mini-batches of ``H``; the number of mistakes.

    Each batch is scored by cosine with ``W`` as it stands (first largest wins); then
    each misclassified row ``h`` (target ``c``, predicted ``p``, cosines ``s``) adds
    ``a h`` to ``W[c]`` and ``b h`` to ``W[p]``: ``a = lr``, ``b = -lr`` (AdaptHD,
    torchhd ``add_adapt``) or, with ``online``, ``a = lr (1 - s[c])``,
    ``b = lr (s[p] - 1)`` (OnlineHD, ``add_online``). Targets first, then the
    predicted classes, as torchhd's two ``index_add_``.
    """
    n, d = H.shape
    c = W.shape[0]
    S = np.empty((batch, c))
    w_norms = np.empty(c)
    rows = np.empty(batch, np.int64)
    pred = np.empty(batch, np.int64)
    coef = np.empty((batch, 2))
    wrong = 0
    for r in range(0, n, batch):
        m = min(batch, n - r)
        _norms(W, w_norms)
        _cosine_rows(H, r, r + m, W, h_norms, w_norms, S)
        n_wrong = 0
        for i in range(m):
            p = 0
            for k in range(1, c):
                if S[i, k] > S[i, p]:
                    p = k
            target = t[r + i]
            if p != target:
                rows[n_wrong], pred[n_wrong] = r + i, p
                coef[n_wrong, 0] = lr * (1.0 - S[i, target]) if online else lr
                coef[n_wrong, 1] = lr * (S[i, p] - 1.0) if online else -lr
                n_wrong += 1
        for side in range(2):
            for u in range(n_wrong):
                i = rows[u]
                k = t[i] if side == 0 else pred[u]
                a = coef[u, side]
                for j in range(d):
                    W[k, j] += a * H[i, j]
        wrong += n_wrong
    return wrong


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


@jit()
def add_rows(W, H, t):
    """``W[t[i]] += H[i]`` for every row (class sums of int8 rows, any ``W`` dtype)."""
    for i in range(H.shape[0]):
        k = t[i]
        for j in range(H.shape[1]):
            W[k, j] += H[i, j]


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
