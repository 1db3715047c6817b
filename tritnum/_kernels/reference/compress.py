"""NumPy reference sketches (random ternary projection): the obvious code, and the test oracle.

Precision contract shared by every backend (so results match bit for bit): the input
element is ``x`` or, with a residual, ``x + residual`` in NumPy's type (float32 for
float16/float32 ``x``, float64 for float64 ``x``); a bucket adds its signed elements in
float64 in column order and is rounded to float32 once. Expanding takes float32 bucket
values (``projection``: divided in float32 by the bucket's element count), and a residual
becomes ``(x + residual) - value``, rounded to float32.
"""

from __future__ import annotations

import numpy as np

from ..._dispatch import register
from ..shared.compress import projected, signs


@register("compress.sketch", "numpy")
def sketch(x: np.ndarray, residual: np.ndarray | None, m: int, key: int) -> np.ndarray:
    """float32 sketch ``(m,)`` of the 1-D ``x`` (plus ``residual``, if given)."""
    n = x.shape[0]
    v = x if residual is None else x + residual
    terms = signs(n, key) * v.astype(np.float64)
    acc = np.zeros(m, np.float64)
    for base in range(0, n, max(m, 1)):  # stripe after stripe: each bucket adds in column order
        part = terms[base:base + m]
        acc[:part.shape[0]] += part
    return acc.astype(np.float32)


@register("compress.expand", "numpy")
def expand(s: np.ndarray, n: int, key: int, project: bool, x: np.ndarray | None = None,
           residual: np.ndarray | None = None, out: np.ndarray | None = None) -> np.ndarray:
    """float32 ``P^T s`` (``project``: ``P^T D^-1 s``) of length ``n``, into ``out`` if given.

    With ``x``, the ``residual`` buffer becomes ``(x + residual) - result`` in place.
    """
    m = s.shape[0]
    result = np.zeros(0, np.float32)
    if n:
        values = projected(s, n) if project else s
        result = np.tile(values, -(-n // m))[:n] * signs(n, key)
    if x is not None:
        residual[:] = (x + residual) - result
    if out is None:
        return result
    out[:] = result
    return out
