"""CUDA VSA bundling: the majority of dense rows (weighted votes) and of bit planes.

``bundle`` on bit planes splits the vectors over threads with counters in registers
(:func:`bundle_planes`); ``class_sums`` adds rows into per-class int64 sums (the
centroid classifier's prototypes).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda, int32, uint64

from ..._dispatch import register
from ..shared import vsa as hv
from ._launch import MAX_BLOCKS, THREADS, blocks


@cuda.jit
def bundle_dense(vs, weights, out):
    n, rows, d = vs.shape
    for i in range(cuda.grid(1), rows * d, cuda.gridsize(1)):
        r = i // d
        j = i - r * d
        acc = weights[0] * 0 if n else 0
        for k in range(n):
            acc += weights[k] * vs[k, r, j]
        out[r, j] = 1 if acc > 0 else (-1 if acc < 0 else 0)


COUNTER_BITS = 8  # bits of a thread's register counters: up to 255 votes between flushes
CHUNK = (1 << COUNTER_BITS) - 1
BUNDLE_PER_THREAD = 32  # vectors a bundle thread counts before the vectors are split further
MAX_SLICES = 32  # slices of the vectors per word column (a power of two dividing THREADS)


@cuda.jit
def bundle_planes(vs, slices, out):
    """Majority of bit-plane vectors: a parallel split of the vectors, counters in registers.

    ``vs`` is ``(n, rows, 2, nw)``. A block takes ``THREADS // slices`` adjacent
    word columns of one row (coalesced loads) and splits the ``n`` vectors into
    ``slices`` contiguous slices, one thread per (slice, column). A thread counts
    its slice with bit-sliced ripple counters of ``COUNTER_BITS`` bits per plane
    (unrolled: registers), flushing every ``CHUNK`` vectors: the 64 lanes' plus
    minus minus counts are added to the block's int32 lane votes with shared
    atomics. Slice 0's threads then turn each column's 64 votes into the output's
    plus and minus words (the sign; a tie is 0).

    Floor: ``16 n rows nw`` bytes read once (coalesced), ``16 rows nw`` written;
    about 2 x 6 word operations per vector word (amortized ripple) and
    ``64 x 2 COUNTER_BITS`` per flush.
    """
    votes = cuda.shared.array((THREADS, 64), int32)
    cnt = cuda.local.array((2, COUNTER_BITS), uint64)
    n, rows, _, nw = vs.shape
    tid = cuda.threadIdx.x
    cols = THREADS // slices
    s = tid // cols
    c = tid - s * cols
    per = (n + slices - 1) // slices
    groups = (nw + cols - 1) // cols
    for item in range(cuda.blockIdx.x, rows * groups, cuda.gridDim.x):
        r = item // groups
        w = (item - r * groups) * cols + c
        for b in range(64):
            votes[c, b] = 0
        cuda.syncthreads()
        if w < nw:
            v1 = min(n, (s + 1) * per)
            for v0 in range(s * per, v1, CHUNK):
                for k in range(COUNTER_BITS):
                    cnt[0, k] = 0
                    cnt[1, k] = 0
                for v in range(v0, min(v1, v0 + CHUNK)):
                    for p in range(2):
                        carry = vs[v, r, p, w]
                        for k in range(COUNTER_BITS):
                            if carry == 0:
                                break
                            x = cnt[p, k]
                            cnt[p, k] = x ^ carry
                            carry &= x
                for b in range(64):
                    diff = 0
                    for k in range(COUNTER_BITS):
                        diff += (int32((cnt[0, k] >> b) & 1) - int32((cnt[1, k] >> b) & 1)) << k
                    if diff != 0:
                        cuda.atomic.add(votes, (c, b), diff)
        cuda.syncthreads()
        if s == 0 and w < nw:
            plus = uint64(0)
            minus = uint64(0)
            for b in range(64):
                bit = uint64(1) << uint64(b)
                if votes[c, b] > 0:
                    plus |= bit
                elif votes[c, b] < 0:
                    minus |= bit
            out[r, 0, w] = plus
            out[r, 1, w] = minus
        cuda.syncthreads()  # votes[] is cleared for the next item


def bundle_slices(n: int) -> int:
    """Slices of ``n`` bundled vectors: about BUNDLE_PER_THREAD each, a power of two."""
    want = -(-n // BUNDLE_PER_THREAD)
    return min(MAX_SLICES, 1 << max(0, want - 1).bit_length())


@cuda.jit
def class_sums_dense(rows, labels, out):
    n, d = rows.shape
    for j in range(cuda.grid(1), d, cuda.gridsize(1)):  # a thread owns a column: no atomics
        for i in range(n):
            out[labels[i], j] += rows[i, j]


@register("vsa.bundle", "cuda")
def bundle(vs, weights, packed: bool, d: int) -> Any:
    n = vs.shape[0]
    out = cuda.device_array(tuple(vs.shape)[1:], vs.dtype)
    if out.size:
        if packed:
            slices = bundle_slices(n)
            groups = -(-out.shape[2] // (THREADS // slices))
            bundle_planes[min(out.shape[0] * groups, MAX_BLOCKS), THREADS](vs, slices, out)
        else:
            w = weights
            if w is None:
                w = cuda.to_device(np.ones(max(n, 1), hv.votes_dtype(n)))
            bundle_dense[blocks(out.size), THREADS](vs, w, out)
    return out


@register("vsa.class_sums", "cuda")
def class_sums(rows, labels, classes: int) -> Any:
    out = cuda.to_device(np.zeros((classes, rows.shape[1]), np.int64))
    if out.size and rows.shape[0]:
        class_sums_dense[blocks(rows.shape[1]), THREADS](rows, labels, out)
    return out
