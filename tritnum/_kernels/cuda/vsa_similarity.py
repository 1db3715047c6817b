"""CUDA VSA similarity: scores of row pairs (dot, cosine, Hamming) and class scores.

The scores are :func:`..shared.vsa.score`'s, on int8 trits or on bit-plane words
(``cuda.popc``), through the device functions of :mod:`.vsa_device`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda, float64

from ..._dispatch import register
from ..shared import vsa as hv
from ._launch import THREADS, blocks
from .vsa_device import pair_trits, pair_words


def _pairs_kernel(pair: Any) -> Any:
    """A kernel scoring the row pairs ``(a[ia[t]], b[ib[t]])`` with ``pair``."""

    @cuda.jit
    def pairs(a, b, ia, ib, metric, d, out):
        for t in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
            out[t] = pair(a[ia[t]], b[ib[t]], metric, d)

    return pairs


pairs_dense = _pairs_kernel(pair_trits)
pairs_planes = _pairs_kernel(pair_words)


@cuda.jit
def class_scores_dense(rows, sums, norms, scores, best):
    """One thread per sample: its score against every prototype, and the first best."""
    n, d = rows.shape
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        top = 0
        for c in range(sums.shape[0]):
            dot = float64(0.0)
            for j in range(d):
                dot += float64(rows[i, j]) * sums[c, j]
            scores[i, c] = dot / norms[c]
            if scores[i, c] > scores[i, top]:
                top = c
        best[i] = top


@register("vsa.similarity", "cuda")
def similarity(a, b, ia, ib, metric: int, packed: bool, d: int) -> Any:
    out = cuda.device_array(ia.shape[0], np.int64 if metric == hv.DOT else np.float64)
    if out.size:
        kernel = pairs_planes if packed else pairs_dense
        kernel[blocks(out.size), THREADS](a, b, ia, ib, metric, d, out)
    return out


@register("vsa.class_scores", "cuda")
def class_scores(rows, sums, norms) -> tuple[Any, Any]:
    n = rows.shape[0]
    scores = cuda.device_array((n, sums.shape[0]), np.float64)
    best = cuda.device_array(n, np.int64)
    if n:
        class_scores_dense[blocks(n), THREADS](rows, sums, norms, scores, best)
    return scores, best
