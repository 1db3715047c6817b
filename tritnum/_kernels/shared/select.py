"""Top-k selection on the host, shared by every backend's VSA search (ties to the lower index)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

SEARCH_BLOCK_SCORES = 1 << 22  # query x memory scores a search holds at once


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


def topk_blocks(scores: Callable[[int, int], np.ndarray], q: int, m: int, k: int,
                multiple: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """:func:`topk` of ``q`` rows of ``m`` scores made a block of rows at a time.

    ``scores(q0, q1)`` gives rows ``q0 .. q1`` (``(q1 - q0, m)``); blocks hold at
    most ``SEARCH_BLOCK_SCORES`` scores (at least one row, or ``multiple`` rows, and
    start at multiples of ``multiple``).
    """
    step = max(1, SEARCH_BLOCK_SCORES // max(m, 1) // multiple) * multiple
    parts = [topk(scores(q0, min(q, q0 + step)), k) for q0 in range(0, q, step)]
    if not parts:
        return np.zeros((0, k), np.int64), np.zeros((0, k))
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
