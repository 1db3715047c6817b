"""CUDA sketch kernels (precision contract: :mod:`..reference.compress`).

``sketch``: one thread per bucket, which adds its elements in column order (the threads of
a warp read consecutive columns of a stripe together). ``expand``: a 2-D grid, buckets
along x and stripes along y, one element per thread and no division to find its bucket.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from ..._dispatch import register
from ..shared import compress as cs
from ._launch import THREADS, blocks
from .vsa_device import device, draw

MAX_CELLS = 1 << 16  # the most blocks an expand launch has (both axes; stripes loop beyond)

_signed = device(cs.signed)
_sizes = device(cs.sizes)
_members = device(cs.members)


@cuda.jit
def sketch_buckets(x, residual, key, out):
    n = x.shape[0]
    m = out.shape[0]
    feedback = residual.shape[0] > 0
    for i in range(cuda.grid(1), m, cuda.gridsize(1)):
        acc = 0.0
        for j in range(i, n, m):
            v = x[j]
            if feedback:
                v = v + residual[j]
            acc += _signed(np.float64(v), draw(key, j >> 6), j)
        out[i] = acc


@cuda.jit
def expand_stripes(s, n, key, project, x, residual, out):
    m = s.shape[0]
    r, full = _sizes(n, m)
    feedback = x.shape[0] > 0
    i0, t0 = cuda.grid(2)
    di, dt = cuda.gridsize(2)
    for t in range(t0, r, dt):
        for i in range(i0, m, di):
            j = t * m + i
            if j < n:
                d = s[i]
                if project:
                    d = d / np.float32(_members(i, r, full))
                d = _signed(d, draw(key, j >> 6), j)
                out[j] = d
                if feedback:
                    residual[j] = (x[j] + residual[j]) - d


def _empty(a: Any) -> Any:
    return cuda.device_array(0, np.float32) if a is None else a


@register("compress.sketch", "cuda")
def sketch(x: Any, residual: Any, m: int, key: int) -> Any:
    out = cuda.device_array(m, np.float32)
    if m:
        sketch_buckets[blocks(m), THREADS](x, _empty(residual), np.uint64(key), out)
    return out


@register("compress.expand", "cuda")
def expand(s: Any, n: int, key: int, project: bool, x: Any = None, residual: Any = None,
           out: Any = None) -> Any:
    out = cuda.device_array(n, np.float32) if out is None else out
    if n:
        m = s.shape[0]
        across = blocks(m)
        grid = (across, max(1, min(-(-n // m), MAX_CELLS // across)))
        expand_stripes[grid, (THREADS, 1)](s, n, np.uint64(key), bool(project), _empty(x),
                                          _empty(residual), out)
    return out
