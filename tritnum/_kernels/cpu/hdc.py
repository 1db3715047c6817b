"""CPU kernels of the HDC classifiers (:mod:`tritnum.vsa.estimators`): int8 hypervectors.

The nonlinear encoder's projection and its phases' trits run here, blocks of rows on the
pool's threads; the norms and class sums of encoded rows, their cosines with the class
vectors and the mistake-driven update passes are taken without a float copy of them. A
pass is one call: per 32-row batch, BLAS on a float copy cost about 0.1 ms against the
few microseconds of the products themselves; it writes NeuralHD's regenerated columns
into the rows too, with the norms they change.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from ... import _blas
from ..._dispatch import register
from ..shared import hdc as shared
from ._jit import jit
from ._parallel import run

FAST = {"reassoc", "contract", "nsz"}
# floats projected at a time by a thread (they stay in cache): 128 rows of 10,000 took
# 15 ms for digits' training rows against 18 ms at 64 and 19 ms at 256 (one thread)
PROJECTED = 128 * 10_000
_local = threading.local()  # each thread's block of projected floats


@register("hdc.row_norms", "cpu")
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
def _add_class_rows(W, H, t, c0, c1):
    """:func:`add_rows` for classes ``c0:c1``: each class's rows summed in int32, then added."""
    acc = np.zeros(H.shape[1], np.int32)
    for k in range(c0, c1):
        acc[:] = 0
        for i in range(H.shape[0]):
            if t[i] == k:
                for j in range(H.shape[1]):
                    acc[j] += H[i, j]
        for j in range(H.shape[1]):
            W[k, j] += acc[j]
    return 0


@register("hdc.add_rows", "cpu")
def add_rows(W, H, t):
    """``W[t[i]] += H[i]`` for every row (class sums of int8 rows, any ``W`` dtype).

    Classes are shared among the pool's threads; a class's rows add up in int32
    first (exact below 2**24 rows; 1.4x the speed of adding each row to ``W``).
    """
    run(_add_class_rows, W.shape[0], H.nbytes, W, H, t)


@register("hdc.phase_trits", "cpu")
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


@jit(fastmath=FAST)
def _dots(H, Wf, out):
    """``out[i, c]``: the float32 dot product of int8 row ``H[i]`` with ``Wf[c]``.

    ``Wf`` has an even number of rows (a zero row pads an odd count): four rows and
    two classes at a time, each load of a row serving two classes and each load of
    a class vector four rows (2.8x BLAS's speed on float copies of 32-row batches;
    1.2x four rows and one class, 1.6x one row and one class).
    """
    n, d = H.shape
    for i in range(0, n - n % 4, 4):
        for c in range(0, Wf.shape[0], 2):
            a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = np.float32(0)
            for j in range(d):
                w, v = Wf[c, j], Wf[c + 1, j]
                h0, h1 = np.float32(H[i, j]), np.float32(H[i + 1, j])
                h2, h3 = np.float32(H[i + 2, j]), np.float32(H[i + 3, j])
                a0 += h0 * w
                a1 += h1 * w
                a2 += h2 * w
                a3 += h3 * w
                b0 += h0 * v
                b1 += h1 * v
                b2 += h2 * v
                b3 += h3 * v
            out[i, c], out[i + 1, c], out[i + 2, c], out[i + 3, c] = a0, a1, a2, a3
            out[i, c + 1], out[i + 1, c + 1], out[i + 2, c + 1], out[i + 3, c + 1] = b0, b1, b2, b3
    for r in range(n - n % 4, n):
        for c in range(Wf.shape[0]):
            a = np.float32(0)
            for j in range(d):
                a += np.float32(H[r, j]) * Wf[c, j]
            out[r, c] = a


@jit()
def _refresh(W, Wf, scale, stale):
    """For each ``stale`` class: ``Wf[c]``, ``W[c]`` in float32, and ``scale[c] = 1 / |W[c]|``.

    The norm in float64 (1 for a zero vector).
    """
    for c in range(W.shape[0]):
        if stale[c]:
            total = 0.0
            for j in range(W.shape[1]):
                v = np.float64(W[c, j])
                total += v * v
                Wf[c, j] = np.float32(v)
            scale[c] = np.float32(1.0 / math.sqrt(total)) if total > 0 else np.float32(1)
            stale[c] = False


@jit()
def _scaled(out, h_norms, scale):
    """``out[i, c]`` (a dot product) divided by ``h_norms[i]`` (if not 0), times ``scale[c]``."""
    for i in range(out.shape[0]):
        hn = h_norms[i] if h_norms[i] > 0 else 1.0
        for c in range(out.shape[1]):
            out[i, c] = np.float32(out[i, c] / hn) * scale[c]


@register("hdc.cosines", "cpu")
@jit()
def cosines(H, W, h_norms):
    """Float32 cosines ``(n, n_classes)`` of int8 rows ``H`` (norms ``h_norms``) with ``W``.

    0 for a zero row or class vector.
    """
    k = W.shape[0]
    Wf = np.zeros((k + k % 2, W.shape[1]), np.float32)  # for _dots: an even count
    scale = np.ones(k + k % 2, np.float32)
    _refresh(W, Wf, scale, np.ones(k, np.bool_))
    out = np.empty((H.shape[0], k + k % 2), np.float32)
    _dots(H, Wf, out)
    _scaled(out, h_norms, scale)
    return out[:, :k]


@jit()
def _replace(H, dims, fresh, norms, r0, r1):
    """Rows ``r0:r1``: ``H[i, dims] = fresh[i]``, and ``norms[i]`` (as :func:`row_norms`) updated.

    A row's norm is the square root of its non-zero count: the count of the columns
    replaced goes, theirs comes.
    """
    for i in range(r0, r1):
        count = np.int64(round(norms[i] * norms[i]))
        for k in range(dims.shape[0]):
            j = dims[k]
            count += np.int64(fresh[i, k] != 0) - np.int64(H[i, j] != 0)
            H[i, j] = fresh[i, k]
        norms[i] = math.sqrt(count)


@register("hdc.mistake_pass", "cpu")
@jit()
def mistake_pass(W, H, t, lr, batch, online, h_norms, dims, fresh):
    """One pass of AdaptHD's (or, ``online``, OnlineHD's) rule over int8 ``H``; the mistakes.

    Each mini-batch of ``batch`` rows is scored by float32 cosine with ``W`` as it
    stands (the first largest wins); then each misclassified row ``h`` (target ``c``,
    predicted ``p``, cosines ``s``) adds ``a h`` to ``W[c]`` and ``b h`` to ``W[p]``,
    in row order: ``a = lr``, ``b = -lr``, or with ``online`` ``a = lr (1 - s[c])``,
    ``b = lr (s[p] - 1)``. A float32 copy of ``W`` is kept for the scores and
    refreshed for the classes a batch changed. Columns ``dims`` of the rows become
    ``fresh`` first, a batch at a time (NeuralHD's regenerated dimensions; ``h_norms``
    follow): written while the batch is in cache, not in a pass of their own over
    ``H`` (digits: 2.3 ms of a 25 ms fit).
    """
    n, d = H.shape
    k = W.shape[0]
    Wf = np.zeros((k + k % 2, d), np.float32)  # for _dots: an even count
    scale = np.ones(k + k % 2, np.float32)
    stale = np.ones(k, np.bool_)
    s = np.empty((min(batch, n), k + k % 2), np.float32)
    wrong = 0
    for r in range(0, n, batch):
        m = min(batch, n - r)
        if dims.shape[0]:
            _replace(H, dims, fresh, h_norms, r, r + m)
        _refresh(W, Wf, scale, stale)
        _dots(H[r:r + m], Wf, s[:m])
        _scaled(s[:m], h_norms[r:r + m], scale)
        for i in range(m):
            c = t[r + i]
            p = 0
            for q in range(1, k):
                if s[i, q] > s[i, p]:
                    p = q
            if p == c:
                continue
            wrong += 1
            a, b = lr, -lr
            if online:
                a, b = lr * (1.0 - s[i, c]), lr * (s[i, p] - 1.0)
            for j in range(d):
                h = H[r + i, j]
                W[c, j] += a * h
                W[p, j] += b * h
            stale[c] = stale[p] = True
    return wrong



_near_normal = jit(inline="always")(shared.near_normal_value)


@register("hdc.near_normal", "cpu")
@jit()
def near_normal(bits, out):
    """``out[i]``: a near-Gaussian float32 value from the random 64-bit word ``bits[i]``.

    :func:`..shared.hdc.near_normal_value`; a fifth of the time of NumPy's Gaussian
    here (the popcount is one instruction).
    """
    for i in range(bits.shape[0]):
        out[i] = _near_normal(bits[i])


def _turns(rows: int, d: int) -> np.ndarray:
    """The calling thread's float32 block ``rows x d`` (kept: fresh ones fault pages in)."""
    block = getattr(_local, "turns", None)
    if block is None or block.size < rows * d:
        block = _local.turns = np.empty(rows * d, np.float32)
    return block[:rows * d].reshape(rows, d)


def _project_rows(z, proj, phase, edge, out, r0, r1):
    """Rows ``r0:r1`` of :func:`project_trits`, a cache-sized block at a time."""
    d = proj.shape[1]
    step = max(1, PROJECTED // max(d, 1))
    for r in range(r0, r1, step):
        end = min(r + step, r1)
        turns = _turns(end - r, d)
        np.matmul(z[r:end], proj, out=turns)  # releases the GIL, as the kernel does
        phase_trits(turns, phase, edge, out[r:end])
    return 0


@register("hdc.project_trits", "cpu")
def project_trits(z, proj, phase, edge, out):
    """``out``: :func:`phase_trits` of ``z @ proj`` (float32) with phases ``phase``.

    The nonlinear encoder. Blocks of rows go to the pool's threads, each block one
    single-threaded ``sgemm`` and the trits of its floats while they are in cache:
    on a busy machine a thread that comes late takes fewer blocks (two OpenBLAS
    threads on one product took 12x the time of one at load 4).
    """
    with _blas.limit(1):
        run(_project_rows, z.shape[0], out.nbytes, z, proj, phase, edge, out)

