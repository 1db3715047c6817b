"""The HDC classifiers' helpers in NumPy: the reference of ``cpu/hdc.py``'s kernels.

The classifiers (:mod:`tritnum.vsa.estimators`) hold their arrays on the host, as
scikit-learn's estimators do, so the "numpy" and "cuda" backends both run these.
"""

from __future__ import annotations

import math

import numpy as np

# registered as hdc.* on every backend
OPS = ("row_norms", "add_rows", "phase_trits", "project_trits", "cosines", "mistake_pass",
       "near_normal")
NEAR_NORMAL_SCALE = np.float32(1 / math.sqrt(12 + 1 / 12))  # of near_normal_value's sum


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


def project_trits(z: np.ndarray, proj: np.ndarray, phase: np.ndarray, edge: np.float32,
                  out: np.ndarray) -> None:
    """``out``: :func:`phase_trits` of the float32 product ``z @ proj`` (the nonlinear encoder)."""
    phase_trits(z @ proj, phase, edge, out)


def cosines(H: np.ndarray, W: np.ndarray, h_norms: np.ndarray) -> np.ndarray:
    """Float32 cosines ``(n, n_classes)`` of int8 rows ``H`` (norms ``h_norms``) with ``W``.

    0 for a zero row or class vector: a float32 product, the norms' scales in float32.
    """
    w_norms = np.sqrt(np.einsum("ij,ij->i", W, W, dtype=np.float64))
    scale = (1.0 / np.where(w_norms > 0, w_norms, 1.0)).astype(np.float32)
    dots = H.astype(np.float32) @ W.astype(np.float32).T
    return (dots / np.where(h_norms > 0, h_norms, 1.0)[:, None]).astype(np.float32) * scale


def mistake_pass(W: np.ndarray, H: np.ndarray, t: np.ndarray, lr: float, batch: int,
                 online: bool, h_norms: np.ndarray, dims: np.ndarray, fresh: np.ndarray) -> int:
    """One pass of AdaptHD's (or, ``online``, OnlineHD's) rule over int8 ``H``; the mistakes.

    Per mini-batch: float32 cosines with ``W`` as it stands (the first largest wins);
    each misclassified row ``h`` (target ``c``, predicted ``p``, cosines ``s``) adds
    ``a h`` to ``W[c]`` and ``b h`` to ``W[p]``: ``a = lr``, ``b = -lr``, or with
    ``online`` ``a = lr (1 - s[c])``, ``b = lr (s[p] - 1)``. Columns ``dims`` of ``H``
    become ``fresh`` first, and ``h_norms`` are taken again.
    """
    if len(dims):
        H[:, dims] = fresh
        h_norms[...] = row_norms(H)
    wrong_total = 0
    for r in range(0, len(H), batch):
        tb = t[r:r + batch]
        s = cosines(H[r:r + batch], W, h_norms[r:r + batch]).astype(np.float64)
        pred = s.argmax(axis=1)
        for i in np.flatnonzero(pred != tb):
            c, p = tb[i], pred[i]
            a, b = (lr * (1.0 - s[i, c]), lr * (s[i, p] - 1.0)) if online else (lr, -lr)
            W[c] += (a * H[r + i]).astype(W.dtype)
            W[p] += (b * H[r + i]).astype(W.dtype)
            wrong_total += 1
    return wrong_total


def near_normal_value(w):
    """A near-Gaussian float32 from a random 64-bit word ``w`` (a NumPy array of them too).

    The popcount ``c`` of its 48 high bits (a binomial: mean 24, variance 12) plus its
    16 low bits as a uniform ``u`` in [0, 1), which spreads the 49 values of ``c`` into
    a density: ``(c - 24 + u - 1/2) / sqrt(12 + 1/12)``, mean 0, variance 1, in float32
    steps. Its characteristic function is within 0.004 of the Gaussian's
    ``exp(-t^2 / 2)``: as projection entries, nearly the Gaussian kernel's random
    Fourier features. Plain Python, compiled by the CPU backend.
    """
    x = w >> np.uint64(16)
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    c = (x * np.uint64(0x0101010101010101)) >> np.uint64(56)
    u = np.float32(w & np.uint64(0xFFFF)) * np.float32(1 / 65536)
    return (np.float32(c) - np.float32(24) + u - np.float32(0.5)) * NEAR_NORMAL_SCALE


def near_normal(bits: np.ndarray, out: np.ndarray) -> None:
    """``out``: :func:`near_normal_value` of each random 64-bit word of ``bits``."""
    out[...] = near_normal_value(bits)
