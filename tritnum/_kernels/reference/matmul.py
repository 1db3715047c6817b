"""NumPy reference ternary matmul: dequantize in float64 and multiply (the test oracle).

Kernel contract shared by every backend (``w`` holds ``out`` packed rows of ``n``
trits, ``scales`` is ``(out, groups)`` float32 with groups of ``n // groups``):

- ``linear_float(x, w, fmt, n, scales, bias)``: ``x @ (trits * scale).T + bias``,
  float32 ``(m, out)`` from float32 ``x`` ``(m, n)``.
- ``linear_int8(q, xscale, w, fmt, n, scales, bias)``: W1.58A8,
  ``xscale[r] * sum_g scales[o, g] * sum_{j in g} trits[o, j] * q[r, j] + bias[o]``
  with exact integer group sums, float32 ``(m, out)``.

``bias`` is None or float32 ``(out,)``. The packed rows are valid (checked before).
Both take ``out=``, a float32 ``(m, out)`` buffer the result is written into. Also
``linear_int8_fused(x, w, fmt, n, scales, bias, out=None)``: float ``x`` quantized
per row (as ``quantize_activations``) then ``linear_int8``, returning the result
and the row scales (NaN for a row holding NaN or infinity, whose outputs are NaN);
``linear_weights(data, scales, fmt, n, cache)`` and ``keep(a, cache, name)``: the
weights and arrays as the backend's kernels take them, kept in ``cache`` (a dict
the caller owns, e.g. a TernaryTensor's) where that saves work (GPU copies);
``linear_small(data, scales, fmt, n)``: for weights as ``linear_weights`` gives them,
routes running a few rows in one step by activation mode (the CPU's small layers;
other backends: none, an empty dict).
"""

from __future__ import annotations

import numpy as np

from ..._dispatch import register
from ..._formats import Format
from ..shared import linear
from ..shared.linear import into
from ..shared.packing import decode


def trits(w: np.ndarray, fmt: Format, n: int) -> np.ndarray:
    """The ``(out, n)`` int8 trits of packed rows."""
    codes, _ = decode(w, fmt, n)
    return codes[:, :n].astype(np.int8) - 1


def _grouped(a: np.ndarray, groups: int) -> np.ndarray:
    rows, n = a.shape
    return a.reshape(rows, groups, n // groups)


@register("linear_float", "numpy")
def linear_float(x: np.ndarray, w: np.ndarray, fmt: Format, n: int, scales: np.ndarray,
                 bias: np.ndarray | None, out: np.ndarray | None = None) -> np.ndarray:
    groups = scales.shape[1]
    dense = (_grouped(trits(w, fmt, n), groups) * scales[..., None].astype(np.float64))
    with np.errstate(invalid="ignore", over="ignore"):  # NaN and infinity propagate (documented)
        y = x.astype(np.float64) @ dense.reshape(-1, n).T
        return into((y if bias is None else y + bias).astype(np.float32), out)


@register("linear_int8", "numpy")
def linear_int8(q: np.ndarray, xscale: np.ndarray, w: np.ndarray, fmt: Format, n: int,
                scales: np.ndarray, bias: np.ndarray | None,
                out: np.ndarray | None = None) -> np.ndarray:
    groups = scales.shape[1]
    t = _grouped(trits(w, fmt, n), groups).astype(np.int64)
    sums = np.einsum("rgj,ogj->rog", _grouped(q, groups).astype(np.int64), t)
    y = (sums * scales.astype(np.float64)).sum(axis=-1) * xscale.astype(np.float64)[:, None]
    return into((y if bias is None else y + bias).astype(np.float32), out)


register("linear_int8_fused", "numpy")(linear.int8_fused("numpy"))
register("linear_weights", "numpy")(linear.weights)
register("linear_small", "numpy")(linear.no_small_rows)
register("keep", "numpy")(linear.keep)
