"""Random ternary test data shared by the CPU and CUDA test lanes."""

from __future__ import annotations

import numpy as np


def trits(shape, seed, density=2 / 3):
    """int8 trits of ``shape``: each nonzero with probability ``density``, then ±1 evenly."""
    rng = np.random.default_rng(seed)
    v = rng.choice(np.array([-1, 1], np.int8), size=shape)
    return np.where(rng.random(shape) < density, v, 0).astype(np.int8)
