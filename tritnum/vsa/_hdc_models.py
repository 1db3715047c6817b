"""The encoders and update rules behind :mod:`tritnum.vsa.estimators` (NumPy and tritnum ops).

Encoders map raw feature rows to ternary hypervectors ``(n, d)`` int8; the update
rules change class vectors ``(n_classes, d)`` in place, one mini-batch at a time,
as the papers (and torchhd 5.8's ``torchhd.models.Centroid``) write them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._dispatch import kernel
from .encoders import encode_features
from .generation import level, random

# |h| below this share of a projected value's RMS becomes 0: a Gaussian's |z| < 0.43 with
# probability 1/3, so projected rows hold about tn.vsa.random's 2/3 non-zero trits
PROJECTION_ZERO = 0.43
DENSITY = 2 / 3  # of the projection's random trits
# the nonlinear encoder: its random projection's standard deviation times sqrt(features)
# (the kernel's bandwidth on standardized features), and its trits' zero band: +1 within
# EDGE turns of a whole turn, -1 within EDGE of a half turn, 0 between (1/4: none). 0.15
# (40 % zeros) had the best mean accuracy of 0.1, 0.125, 0.15, 0.2 and 0.25 for OnlineHD
# and NeuralHD in 5-fold cross-validation on the training rows of the four bundled sets
# (OnlineHD 95.5 % against 94.9 % bipolar, NeuralHD 95.8 % against 95.4 %)
BANDWIDTH = 1.5
EDGE = 0.15
DRAWN = 1 << 15  # random words drawn at a time: a reused 256 KiB, not fresh pages


def thermometer(n_levels: int, d: int) -> np.ndarray:
    """``n_levels`` thermometer codes ``(n_levels, d)``: level ``l``'s first trits +1.

    ``round(l d / (n_levels - 1))`` of them; the rest are -1. Consecutive levels differ
    in about ``d / (n_levels - 1)`` positions, the first and the last are opposite
    (density, or thermometer, encoding of a scalar).
    """
    ends = np.rint(np.arange(n_levels) * d / max(n_levels - 1, 1)).astype(np.int64)
    return np.where(np.arange(d) < ends[:, None], 1, -1).astype(np.int8)


class Encoder:
    """A fitted encoder of raw rows ``(n, features)``: ``transform`` gives int8 ``(n, d)``."""

    def __init__(self, kind: str, d: int, n_levels: int, seed: int) -> None:
        self.kind, self.d, self.n_levels, self.seed = kind, d, n_levels, seed
        self.low = self.high = self.keys = self.levels = self.proj = None

    def fit(self, X: np.ndarray) -> Encoder:
        """Feature bounds (record, thermometer) or scales (projection) from ``X``; the vectors."""
        features = X.shape[1]
        if self.kind == "nonlinear":
            self.low, self.high = X.mean(axis=0), _spread(X)
            self.proj, self.phase = self._gaussian(features, self.d, self.seed)
            return self
        if self.kind == "projection":
            self.low = X.mean(axis=0)
            self.high = _spread(X)
            self.proj = random(features, self.d, density=DENSITY, seed=self.seed).astype(np.float32)
            return self
        self.low = X.min(axis=0)
        self.high = np.where(X.max(axis=0) > self.low, X.max(axis=0), self.low + 1.0)
        self.keys = random(features, self.d, seed=self.seed)
        self.levels = (level(self.n_levels, self.d, seed=self.seed + 1)
                       if self.kind == "record" else thermometer(self.n_levels, self.d))
        return self

    @staticmethod
    def _gaussian(features: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """``d`` near-Gaussian projection columns (in turns) and phases, float32, from ``seed``.

        The entries' standard deviation is ``BANDWIDTH / sqrt(features)`` (in radians);
        each is drawn from 64 random bits by ``hdc.near_normal`` (NumPy's Gaussian took
        2.4 ms of a 7 ms breast cancer fit).
        """
        rng = np.random.default_rng(seed)
        proj = np.empty((features, d), np.float32)
        flat = proj.reshape(-1)
        for r in range(0, flat.size, DRAWN):  # the same words as one draw of them all
            part = flat[r:r + DRAWN]
            kernel("hdc.near_normal", "cpu")(rng.integers(0, 2**64, part.size, np.uint64), part)
        proj *= np.float32(BANDWIDTH / (2 * math.pi * math.sqrt(features)))
        return proj, rng.random(d, dtype=np.float32)

    def transform(self, X: np.ndarray, dims: Any = slice(None)) -> np.ndarray:
        """Rows ``X`` encoded, int8 ``(n, d)``; only the columns ``dims`` when given."""
        if self.kind == "nonlinear":
            z = ((X - self.low) / self.high).astype(np.float32)
            proj, phase = self.proj[:, dims], self.phase[dims]
            out = np.empty((len(X), proj.shape[1]), np.int8)
            kernel("hdc.project_trits", "cpu")(z, proj, phase, np.float32(EDGE), out)
            return out
        if self.kind == "projection":
            z = ((X - self.low) / self.high).astype(np.float32)
            h = z @ self.proj[:, dims]
            # the RMS a column of x @ P has over P's draws (2/3 of P's trits non-zero): a
            # threshold per row that no column's draw changes (NeuralHD redraws columns)
            rms = np.sqrt(DENSITY * np.sum(z * z, axis=1, keepdims=True))
            return (np.sign(h) * (np.abs(h) >= PROJECTION_ZERO * rms)).astype(np.int8)
        return encode_features(X, np.ascontiguousarray(self.levels[:, dims]),
                               np.ascontiguousarray(self.keys[:, dims]), low=self.low,
                               high=self.high)

    def regenerate(self, dims: np.ndarray, seed: int) -> None:
        """New random columns ``dims`` of the keys (or of the projection) from ``seed``."""
        if self.kind == "nonlinear":
            self.proj[:, dims], self.phase[dims] = self._gaussian(len(self.low), len(dims), seed)
            return
        fresh = random(len(self.low), len(dims), seed=seed)
        if self.kind == "projection":
            self.proj[:, dims] = fresh
        else:
            self.keys[:, dims] = fresh


def _spread(X: np.ndarray) -> np.ndarray:
    """The standard deviation of each feature of ``X``, 1 where it is 0."""
    spread = X.std(axis=0)
    return np.where(spread > 0, spread, 1.0)


def batches(n: int, size: int) -> range:
    """Start rows of the mini-batches of ``size`` over ``n`` rows."""
    return range(0, n, size)


def move(W: np.ndarray, H: np.ndarray, toward: np.ndarray, away: np.ndarray,
         a: Any, b: Any) -> None:
    """``W[toward[i]] += a_i H[i]`` and ``W[away[i]] += b_i H[i]`` for every row (a GEMM)."""
    n_classes = W.shape[0]
    rows = np.arange(len(H))
    coef = np.zeros((n_classes, len(H)))
    np.add.at(coef, (toward, rows), a)
    np.add.at(coef, (away, rows), b)
    delta = coef @ H
    W += delta.astype(W.dtype) if W.dtype.kind == "i" else delta


def norms(H: np.ndarray) -> np.ndarray:
    """The Euclidean norms of trit rows ``H``: the square roots of their non-zero counts."""
    return kernel("hdc.row_norms", "cpu")(H)


def cosines(H: np.ndarray, W: np.ndarray, h_norms: np.ndarray) -> np.ndarray:
    """``(n, n_classes)`` float32 cosines of int8 rows ``H`` (norms ``h_norms``) with ``W``.

    0 for a zero row or class vector; float32 products, as the update passes score.
    """
    return kernel("hdc.cosines", "cpu")(H, W, h_norms)


def mistake_pass(W: np.ndarray, H: np.ndarray, t: np.ndarray, lr: float, batch: int,
                 online: bool, h_norms: np.ndarray, fresh: Any = None) -> int:
    """One pass over the mini-batches of int8 ``H``; the number of mistakes.

    Each batch is scored by cosine with ``W`` as it stands (the first largest wins);
    then each misclassified row ``h`` (target ``c``, predicted ``p``, cosines ``s``)
    adds ``a h`` to ``W[c]`` and ``b h`` to ``W[p]``: ``a = lr``, ``b = -lr`` (AdaptHD,
    torchhd ``add_adapt``) or, with ``online``, ``a = lr (1 - s[c])``,
    ``b = lr (s[p] - 1)`` (OnlineHD, ``add_online``). ``W`` keeps its dtype; the
    scores are float32, as torchhd's (its default dtype). One compiled call a pass.
    ``fresh``, ``(dims, columns)``: the rows' columns ``dims`` become ``columns`` first
    (``h_norms`` follow), written a batch at a time as the pass reads the rows.
    """
    dims, columns = fresh if fresh is not None else (np.zeros(0, np.int64),
                                                     np.zeros((len(H), 0), np.int8))
    return kernel("hdc.mistake_pass", "cpu")(W, H, np.ascontiguousarray(t, np.int64), float(lr),
                                             int(batch), bool(online), h_norms, dims, columns)


def adapt_pass(W: np.ndarray, H: np.ndarray, t: np.ndarray, lr: float, batch: int,
               h_norms: np.ndarray, fresh: Any = None) -> int:
    """One pass of AdaptHD's rule (torchhd ``add_adapt``) over int8 ``H``; the mistakes.

    Per mini-batch: predict by cosine; each misclassified sample is added to its
    class (``lr``) and subtracted from the predicted one (``-lr``).
    """
    return mistake_pass(W, H, t, lr, batch, False, h_norms, fresh)


def online_pass(W: np.ndarray, H: np.ndarray, t: np.ndarray, lr: float, batch: int,
                h_norms: np.ndarray) -> int:
    """One pass of OnlineHD's rule (torchhd ``add_online``) over int8 ``H``; the mistakes.

    Per mini-batch, for each misclassified sample of cosines ``s``: its class gains
    ``lr (1 - s[target])`` times it, the predicted class ``lr (s[pred] - 1)`` times it.
    """
    return mistake_pass(W, H, t, lr, batch, True, h_norms)


def quant_pass(counts: np.ndarray, model: np.ndarray, H: np.ndarray, t: np.ndarray,
               batch: int) -> int:
    """One retraining pass of QuantHD (torchhd ``add_quantize``); the number of mistakes.

    Predictions use the fixed ternary ``model`` by dot product; each misclassified
    sample moves the integer ``counts``: +1 times it to its class, -1 to the predicted.
    """
    wrong_total = 0
    for r in batches(len(H), batch):
        Hb, tb = H[r:r + batch], t[r:r + batch]
        pred = (Hb @ model.T).argmax(axis=1)
        wrong = pred != tb
        if wrong.any():
            wrong_total += int(wrong.sum())
            move(counts, Hb[wrong], tb[wrong], pred[wrong], 1, -1)
    return wrong_total


def sparsify(W: np.ndarray, density: float) -> None:
    """Keep the ``round(density d)`` dimensions whose class values vary most; zero the rest.

    The variation of a dimension is its max minus its min over the classes
    (SparseHD's dimension-wise sparsity, torchhd ``SparseHD.sparsify``); ties go to
    the lower dimension.
    """
    d = W.shape[1]
    drop = d - round(density * d)
    variation = W.max(axis=0) - W.min(axis=0)
    W[:, np.argsort(variation, kind="stable")[:drop]] = 0


def weakest(W: np.ndarray, n: int) -> np.ndarray:
    """The ``n`` dimensions of least variance across the row-normalized class vectors (NeuralHD).

    In the order of a stable sort of the variances (ties: the lower dimension first);
    a partition finds them, the ``n`` alone are sorted.
    """
    norms = np.linalg.norm(W, axis=1, keepdims=True)
    var = (W / np.maximum(norms, 1e-12)).var(axis=0, ddof=1)
    if n >= len(var):
        return np.argsort(var, kind="stable")
    kth = var[np.argpartition(var, n - 1)[n - 1]]
    dims = np.concatenate([np.flatnonzero(var < kth), np.flatnonzero(var == kth)])[:n]
    return dims[np.lexsort((dims, var[dims]))]
