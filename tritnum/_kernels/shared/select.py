"""Top-k selection on the host, shared by every backend's VSA search (ties to the lower index)."""

from __future__ import annotations

import numpy as np


def topk(s: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices and values of the ``k`` largest scores of each row, ties to the lower index."""
    q, m = s.shape
    if k == 1:  # one pass: argmax returns the first, lowest-index maximum (scores are never NaN)
        idx = np.argmax(s, axis=1)[:, None]
    elif k >= m:
        idx = np.argsort(-s, axis=1, kind="stable")
    else:
        part = np.argpartition(-s, k - 1, axis=1)[:, :k]
        kth = np.take_along_axis(s, part, axis=1).min(axis=1, keepdims=True)
        above = s > kth
        equal = s == kth
        room = k - above.sum(axis=1, keepdims=True)
        keep = above | (equal & (np.cumsum(equal, axis=1) <= room))
        idx = np.nonzero(keep)[1].reshape(q, k)  # k per row, in index order
        order = np.argsort(-np.take_along_axis(s, idx, axis=1), axis=1, kind="stable")
        idx = np.take_along_axis(idx, order, axis=1)
    return idx.astype(np.int64), np.take_along_axis(s, idx, axis=1)
