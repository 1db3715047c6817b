"""CUDA VSA kernels that go element by element (grid-stride loops): generation and algebra.

Random and level hypervectors, checks, bind/unbind (``op``), permutation, level
indices and the axis moves of the Dask layer; the arithmetic is :mod:`..shared.vsa`
as the device functions of :mod:`.vsa_device`. The other CUDA VSA kernels:
:mod:`.vsa_bundle` (majority votes), :mod:`.vsa_similarity` (pairwise scores) and
:mod:`.vsa_search` (top-k search).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda, int64

from ..._dispatch import register
from ._launch import THREADS, blocks, flag, is_set
from .vsa_device import (
    draw,
    level_of,
    mixed_trit,
    op_trits,
    op_words,
    random_word,
    rolled_word,
    row_key,
    trit_of,
)


# ------------------------------------------------------------------- kernels
@cuda.jit
def random_dense(row0, key, thr, out):
    n, d = out.shape
    for i in range(cuda.grid(1), n * d, cuda.gridsize(1)):
        r = i // d
        j = i - r * d
        out[r, j] = trit_of(draw(row_key(key, row0 + r), j), thr)


@cuda.jit
def random_planes(row0, d, key, thr, out):
    n = out.shape[0]
    nw = out.shape[2]
    for i in range(cuda.grid(1), n * nw, cuda.gridsize(1)):
        r = i // nw
        w = i - r * nw
        out[r, 0, w], out[r, 1, w] = random_word(row_key(key, row0 + r), w,
                                                  min(64, d - 64 * w), thr)


@cuda.jit
def mixed_dense(key, thr, circle, out):
    n, d = out.shape
    k0 = row_key(key, 0)
    k1 = row_key(key, 1)
    k2 = row_key(key, 2)
    for i in range(cuda.grid(1), n * d, cuda.gridsize(1)):
        r = i // d
        j = i - r * d
        out[r, j] = mixed_trit(k0, k1, k2, r, j, n, circle, thr)


@cuda.jit
def check_rows(rows, bad):
    n, d = rows.shape
    for i in range(cuda.grid(1), n * d, cuda.gridsize(1)):
        r = i // d
        v = rows[r, i - r * d]
        if v < -1 or v > 1:
            bad[0] = 1  # a flag, not a count: a count could wrap to 0


@cuda.jit
def op_dense(a, b, ia, ib, op, out, bad):
    n, d = out.shape
    for i in range(cuda.grid(1), n * d, cuda.gridsize(1)):
        t = i // d
        j = i - t * d
        x = a[ia[t], j]
        y = b[ib[t], j]
        if x < -1 or x > 1 or y < -1 or y > 1:
            bad[0] = 1  # the inputs are checked as they are read
        out[t, j] = op_trits(x, y, op)


@cuda.jit
def op_planes(a, b, ia, ib, op, out):
    n = out.shape[0]
    nw = out.shape[2]
    for i in range(cuda.grid(1), n * nw, cuda.gridsize(1)):
        t = i // nw
        w = i - t * nw
        x = a[ia[t]]
        y = b[ib[t]]
        out[t, 0, w], out[t, 1, w] = op_words(x[0, w], x[1, w], y[0, w], y[1, w], op)


@cuda.jit
def permute_dense(rows, shifts, out):
    n, d = out.shape
    for i in range(cuda.grid(1), n * d, cuda.gridsize(1)):
        r = i // d
        j = i - r * d
        src = j - shifts[r]
        out[r, j] = rows[r, src + d if src < 0 else src]


@cuda.jit
def permute_planes(rows, shifts, d, out):
    n = out.shape[0]
    nw = out.shape[2]
    for i in range(cuda.grid(1), n * 2 * nw, cuda.gridsize(1)):
        r = i // (2 * nw)
        p = (i // nw) % 2
        k = i % nw
        out[r, p, k] = rolled_word(rows[r, p], k, shifts[r], d)


@cuda.jit
def levels_of_values(values, lo, hi, top, out, bad):
    """One thread per value: its level (:func:`hv.level_of`, bounds repeating every ``len(lo)``)."""
    p = lo.shape[0]
    for i in range(cuda.grid(1), values.shape[0], cuda.gridsize(1)):
        j = i % p
        out[i] = level_of(values[i], lo[j], hi[j], top)
        if out[i] < 0:
            bad[0] = 1


@cuda.jit
def checked_indices(values, n, out, bad):
    """One thread per value: the integer index, flagged unless ``0 <= value < n``."""
    for i in range(cuda.grid(1), values.shape[0], cuda.gridsize(1)):
        v = values[i]
        if v < 0 or v >= n:
            bad[0] = 1
        out[i] = int64(v)


@cuda.jit
def axis_first_rows(rows, out):
    """``out[i, a, x] = rows[a, i, x]``, one thread per element."""
    na, n, nx = rows.shape
    for t in range(cuda.grid(1), na * n * nx, cuda.gridsize(1)):
        x = t % nx
        a = t // nx % na
        i = t // (nx * na)
        out[i, a, x] = rows[a, i, x]


# ------------------------------------------------------------------ wrappers
@register("vsa.random", "cuda")
def random(row0: int, n: int, d: int, key: int, thr: int, packed: bool) -> Any:
    k, t = np.uint64(key), np.uint64(thr)
    if packed:
        out = cuda.device_array((n, 2, -(-d // 64)), np.uint64)
        if out.size:
            random_planes[blocks(n * out.shape[2]), THREADS](row0, d, k, t, out)
    else:
        out = cuda.device_array((n, d), np.int8)
        if out.size:
            random_dense[blocks(n * d), THREADS](row0, k, t, out)
    return out


@register("vsa.mixed", "cuda")
def mixed(n: int, d: int, key: int, thr: int, circle: bool) -> Any:
    out = cuda.device_array((n, d), np.int8)
    if out.size:
        mixed_dense[blocks(n * d), THREADS](np.uint64(key), np.uint64(thr), bool(circle), out)
    return out


@register("vsa.check", "cuda")
def check(rows: Any) -> bool:
    bad = flag()
    if rows.size:
        check_rows[blocks(rows.size), THREADS](rows, bad)
    return not is_set(bad)


@register("vsa.op", "cuda")
def op(a, b, ia, ib, code: int, packed: bool, d: int) -> tuple[Any, bool]:
    out = cuda.device_array((ia.shape[0], *tuple(a.shape)[1:]), a.dtype)
    if not out.size:
        return out, packed or (check(a) and check(b))  # rows that nothing reads: checked here
    if packed:
        op_planes[blocks(out.size // 2), THREADS](a, b, ia, ib, code, out)
        return out, True
    bad = flag()
    op_dense[blocks(out.size), THREADS](a, b, ia, ib, code, out, bad)
    return out, not is_set(bad)


@register("vsa.permute", "cuda")
def permute(rows, shifts, packed: bool, d: int) -> Any:
    out = cuda.device_array(rows.shape, rows.dtype)
    if out.size:
        kernel = permute_planes if packed else permute_dense
        args = (rows, shifts, d, out) if packed else (rows, shifts, out)
        kernel[blocks(out.size), THREADS](*args)
    return out


@register("vsa.level_indices", "cuda")
def level_indices(values, lo, hi, n_levels: int) -> tuple[Any, bool]:
    out = cuda.device_array(values.shape[0], np.int64)
    bad = flag()
    if out.size:
        if lo is None or hi is None:
            checked_indices[blocks(out.size), THREADS](values, n_levels, out, bad)
        else:
            levels_of_values[blocks(out.size), THREADS](values, lo, hi, n_levels - 1, out, bad)
    return out, not is_set(bad)


@register("vsa.axis_first", "cuda")
def axis_first(rows) -> Any:
    na, n, nx = rows.shape
    out = cuda.device_array((n, na, nx), rows.dtype)
    if out.size:
        axis_first_rows[blocks(out.size), THREADS](rows, out)
    return out


@register("vsa.concat", "cuda")
def concat(parts) -> Any:
    if len(parts) == 1:
        return parts[0]
    out = cuda.device_array((sum(p.shape[0] for p in parts), *tuple(parts[0].shape)[1:]),
                            parts[0].dtype)
    r0 = 0
    for p in parts:
        out[r0:r0 + p.shape[0]] = p
        r0 += p.shape[0]
    return out
