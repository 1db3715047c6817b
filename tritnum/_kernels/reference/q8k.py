"""NumPy reference of llama.cpp's Q8_K path: ``linear(x, w, activations="q8_k")``.

Kernel contract shared by every backend (``K = n``, a multiple of ``QK_K = 256``):

- ``quantize_q8k(x)``: float32 ``x`` ``(m, K)`` to ``q`` int8 ``(m, K)``, ``d``
  float32 ``(m, K / 256)`` and ``bsums`` int16 ``(m, K / 16)``, per block as
  ggml's ``quantize_row_q8_K_ref`` (:func:`..shared.q8k.quantize_q8k_block`);
  ``d`` is NaN for a block holding NaN or infinity (its ``q`` and ``bsums`` are
  then unspecified: the caller refuses such ``x``).
- ``linear_q8k(q, d, bsums, w, fmt, n, scales, bias, fused)``: float32 ``(m, out)``,
  each output as ggml's AVX2 ``ggml_vec_dot_tq2_0_q8_K`` computes it
  (:mod:`..shared.q8k`): per block ``b`` the exact int32 lane sums, each times
  ``float32(d[r, b] * scale)`` and added to its lane in float32 (``fused``: in one
  rounding, ``fma(lane, scale, acc)``, as GCC's contraction; else the product and
  the sum each rounded), then the lanes summed in ``hsum_float_8``'s order;
  ``bias`` (None or float32 ``(out,)``) added in float32 after. ``scales`` is
  ``(out, groups)`` float32 with ``groups`` dividing ``K / 256``: block ``b``
  takes ``scales[o, b // (K / 256 / groups)]``.
"""

from __future__ import annotations

import numpy as np

from ..._dispatch import register
from ..._formats import Format
from ..shared.q8k import BSUM, LANES, QK_K, fma32, hsum8
from .matmul import trits

CHUNK = 1 << 22  # lane sums held at once (outputs are computed a chunk of rows at a time)


@register("quantize_q8k", "numpy")
def quantize_q8k(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    m, k = x.shape
    xb = x.reshape(m, k // QK_K, QK_K)
    first = np.abs(xb).argmax(axis=-1)[..., None]  # the first of largest |x| (or a NaN)
    top = np.take_along_axis(xb, first, axis=-1)
    zero = top == 0
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        iscale = np.float32(-127) / np.where(zero, np.float32(1), top)
        q = np.rint(iscale * xb)  # ggml's nearest_int of infinity or NaN casts to 0
        q = np.where(zero | ~np.isfinite(q), 0, np.minimum(q, 127)).astype(np.int8)
        d = np.where(zero, np.float32(0), np.float32(1) / iscale)[..., 0]
        d[~np.isfinite(xb).all(axis=-1)] = np.nan
    q = q.reshape(m, k)
    bsums = q.reshape(m, -1, BSUM).sum(axis=-1, dtype=np.int16)
    return q, d.astype(np.float32), bsums


def _lanes(q: np.ndarray, codes: np.ndarray, chunk_sums: np.ndarray) -> np.ndarray:
    """``(m, out, blocks, LANES)`` lane sums: ``code * q`` over the lane minus its chunk sums.

    Element ``e`` of a block lies at ``(chunk c, lane L, a)`` with ``e = 32 c + 4 L + a``;
    the products are summed exactly (float64 of integers below ``2**53``).
    """
    m, k = q.shape
    out = codes.shape[0]
    blocks = k // QK_K
    qg = q.reshape(m, blocks, LANES, LANES, 4).transpose(1, 3, 0, 2, 4)  # (b, L, r, c, a)
    cg = codes.reshape(out, blocks, LANES, LANES, 4).transpose(1, 3, 2, 4, 0)  # (b, L, c, a, o)
    sums = np.matmul(qg.reshape(blocks, LANES, m, 32).astype(np.float64),
                     cg.reshape(blocks, LANES, 32, out).astype(np.float64))
    return sums.transpose(2, 3, 0, 1).astype(np.int64) - chunk_sums[:, None]


@register("linear_q8k", "numpy")
def linear_q8k(q: np.ndarray, d: np.ndarray, bsums: np.ndarray, w: np.ndarray, fmt: Format,
               n: int, scales: np.ndarray, bias: np.ndarray | None, fused: bool) -> np.ndarray:
    m = q.shape[0]
    out = w.shape[0]
    blocks = n // QK_K
    per_scale = blocks // max(scales.shape[1], 1)
    # lane L's chunk: values 32 L .. 32 L + 31, two bsums
    chunk_sums = bsums.reshape(m, blocks, LANES, 2).astype(np.int64).sum(axis=-1)
    y = np.empty((m, out), np.float32)
    rows = max(1, CHUNK // max(1, m * blocks * LANES))
    with np.errstate(invalid="ignore", over="ignore"):  # as ggml: 0 * inf is NaN
        for o0 in range(0, out, rows):
            codes = trits(w[o0:o0 + rows], fmt, n) + np.int8(1)
            lanes = _lanes(q, codes, chunk_sums).astype(np.float32)
            block_scales = np.repeat(scales[o0:o0 + rows], per_scale, axis=1)
            scale = d[:, None, :] * block_scales[None]  # (m, rows, blocks) float32
            acc = np.zeros((m, codes.shape[0], LANES), np.float32)
            for b in range(blocks):
                if fused:
                    acc = fma32(lanes[:, :, b], scale[:, :, b, None], acc)
                else:
                    acc += lanes[:, :, b] * scale[:, :, b, None]
            y[:, o0:o0 + rows] = hsum8(*np.moveaxis(acc, -1, 0))
    return y if bias is None else y + bias
