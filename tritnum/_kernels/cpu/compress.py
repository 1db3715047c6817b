"""CPU sketch kernels (precision contract: :mod:`..reference.compress`).

Both read and write each element once, in order, 64 columns per hash of the signs.
``sketch`` works on ``CHUNK`` buckets per task: their float64 sums stay in L1 while the
task reads its slice of every stripe (``i0 + t m .. i1 + t m``). ``expand`` writes
``SPAN`` consecutive elements per task.

float16 input (numba's CPU target has no float16) is read as its bits and widened to
float32 exactly, 64 columns at a time, into a buffer of the task's (:func:`.gguf._widen`):
no float32 copy of the gradient (95 MiB of float16 took 204 MiB through a whole one).
"""

from __future__ import annotations

import numpy as np

from ..._dispatch import register
from ..shared import compress as cs
from ._jit import jit
from ._parallel import CHUNKS_PER_THREAD, run, threads
from .gguf import _widen
from .vsa import _draw

CHUNK = 1 << 16  # the most buckets per sketch task (512 KB of float64 sums, in L2)
SPAN = 1 << 16  # elements per expand task (a multiple of 64)

_signed = jit(inline="always")(cs.signed)
RUN = 64  # columns per hash word: the longest run a kernel reads at once


@jit(inline="always")
def _run(h, j, stop, buf, bits):
    """Float16 bits ``h[j:stop]`` (at most ``RUN``) as float32 values, widened into ``buf``.

    ``bits`` is ``buf``'s uint32 view.
    """
    _widen(h, j, stop - j, buf, bits)
    return buf[:stop - j]


@jit(inline="always")
def _add_run(a, xs, residual, j, word, feedback):
    """``a[k] += sign * (xs[k] (+ residual[j + k]))`` in float64 over the run."""
    if feedback:
        rs = residual[j:j + a.shape[0]]
        for k in range(a.shape[0]):
            a[k] += _signed(np.float64(xs[k] + rs[k]), word, j + k)
    else:
        for k in range(a.shape[0]):
            a[k] += _signed(np.float64(xs[k]), word, j + k)


@jit()
def _sketch(x, residual, m, width, key, halves, out, t0, t1):
    """Buckets ``t0 width .. t1 width`` of the sketch of ``x`` (+ ``residual``).

    Each stripe's slice is added in runs of the columns that share a hash word, indexed
    from 0 so that the loop vectorizes. Large tasks: every slice starts a new stream that
    the hardware prefetchers must pick up (2048 buckets a task ran 1.5x slower).
    ``halves``: ``x`` holds float16 bits (uint16), widened a run at a time.
    """
    n = x.shape[0]
    feedback = residual.shape[0] > 0
    buf = np.empty(RUN, np.float32)
    bits = buf.view(np.uint32)
    acc = np.empty(width, np.float64)
    for task in range(t0, t1):
        i0 = task * width
        w = min(width, m - i0)
        acc[:w] = 0.0
        base = i0  # column of bucket i0 in the current stripe
        while base < n:
            end = min(base + w, n)
            j = base
            while j < end:
                q = j >> 6
                stop = min(end, (q + 1) << 6)
                word = _draw(key, q)
                a = acc[j - base:stop - base]
                if halves:
                    _add_run(a, _run(x, j, stop, buf, bits), residual, j, word,
                             feedback)
                else:
                    _add_run(a, x[j:stop], residual, j, word, feedback)
                j = stop
            base += m
        for k in range(w):
            out[i0 + k] = acc[k]
    return 0


@jit(inline="always")
def _feed_back(xs, residual, o, j):
    """``residual[j + k] = (xs[k] + residual[j + k]) - o[k]`` over the run."""
    rs = residual[j:j + o.shape[0]]
    for k in range(o.shape[0]):
        rs[k] = (xs[k] + rs[k]) - o[k]


@jit()
def _expand(s, n, key, x, residual, halves, out, t0, t1):
    """Elements ``t0 SPAN .. t1 SPAN`` of ``P^T s`` (``halves``: ``x`` as in :func:`_sketch`)."""
    m = s.shape[0]
    feedback = x.shape[0] > 0
    buf = np.empty(RUN, np.float32)
    bits = buf.view(np.uint32)
    for task in range(t0, t1):
        j = task * SPAN
        end = min(j + SPAN, n)
        base = j - j % m  # first column of j's stripe
        while j < end:  # runs of columns in one stripe that share a hash word
            q = j >> 6
            stop = min(end, (q + 1) << 6, base + m)
            word = _draw(key, q)
            o = out[j:stop]
            v = s[j - base:stop - base]
            for k in range(stop - j):
                o[k] = _signed(v[k], word, j + k)
            if feedback and halves:
                _feed_back(_run(x, j, stop, buf, bits), residual, o, j)
            elif feedback:
                _feed_back(x[j:stop], residual, o, j)
            j = stop
            if j == base + m:
                base += m
    return 0


def _empty(a):
    return np.empty(0, np.float32) if a is None else a


def _bits(x: np.ndarray | None) -> tuple[np.ndarray | None, bool]:
    """``x`` as the kernels read it: float16 as its bits (uint16), and whether it was."""
    if x is not None and x.dtype == np.float16:
        return x.view(np.uint16), True
    return x, False


@register("compress.sketch", "cpu")
def sketch(x: np.ndarray, residual: np.ndarray | None, m: int, key: int) -> np.ndarray:
    x, halves = _bits(x)
    out = np.empty(m, np.float32)
    if m:
        # CHUNKS_PER_THREAD tasks a thread where the sketch is large enough (see run)
        width = min(CHUNK, max(64, -(-m // (CHUNKS_PER_THREAD * threads()))))
        run(_sketch, -(-m // width), x.nbytes, x, _empty(residual), m, width, np.uint64(key),
            halves, out)
    return out


@register("compress.expand", "cpu")
def expand(s: np.ndarray, n: int, key: int, project: bool, x: np.ndarray | None = None,
           residual: np.ndarray | None = None, out: np.ndarray | None = None) -> np.ndarray:
    out = np.empty(n, np.float32) if out is None else out
    if n:
        if project:  # the float32 divisions of the reference, once per bucket
            s = cs.projected(s, n)
        x, halves = _bits(x)
        run(_expand, -(-n // SPAN), 4 * n, s, n, np.uint64(key), _empty(x),
            _empty(residual), halves, out)
    return out
