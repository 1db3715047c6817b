"""Hypothesis strategies for trit arrays and packed trits."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from .._formats import FORMATS

__all__ = ["packed_trits", "ternary_tensors", "trit_arrays", "trit_shapes"]

_SIGNED = ("int8", "int16", "int32", "int64")


def trit_shapes(
    *, min_dims: int = 1, max_dims: int = 3, min_side: int = 0, max_side: int = 70
) -> st.SearchStrategy[tuple[int, ...]]:
    """Shapes of rank >= 1 whose last axis is rarely a multiple of 4, 5 or 64.

    Parameters
    ----------
    min_dims : int, optional
        Fewest axes (at least 1: packing needs a last axis).
    max_dims : int, optional
        Most axes.
    min_side : int, optional
        Smallest length of an axis (0 allows empty arrays).
    max_side : int, optional
        Largest length of an axis.

    Returns
    -------
    hypothesis.strategies.SearchStrategy
        A strategy drawing tuples of int.

    Examples
    --------
    >>> from tritnum.testing import trit_shapes
    >>> shape = trit_shapes(max_dims=2).example()
    >>> 1 <= len(shape) <= 2
    True
    """
    return hnp.array_shapes(
        min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side
    )


def trit_arrays(
    shape: tuple[int, ...] | st.SearchStrategy[tuple[int, ...]] | None = None,
    *,
    dtype: Any = None,
    density: float | None = None,
) -> st.SearchStrategy[np.ndarray]:
    """Integer arrays of trits in {-1, 0, +1}.

    Parameters
    ----------
    shape : tuple or strategy, optional
        Defaults to :func:`trit_shapes`.
    dtype : dtype or strategy, optional
        Defaults to any signed integer dtype (int8 most often).
    density : float, optional
        Fraction of non-zero trits; by default any mix, runs of equal values included.

    Examples
    --------
    >>> import numpy as np
    >>> from tritnum.testing import trit_arrays
    >>> a = trit_arrays((3, 7), dtype=np.int8).example()
    >>> a.shape, bool(np.isin(a, [-1, 0, 1]).all())
    ((3, 7), True)
    """
    shape = trit_shapes() if shape is None else shape
    dtype = st.sampled_from(_SIGNED) if dtype is None else dtype
    if density is None:
        elements = st.sampled_from([-1, 0, 1])
    else:
        elements = st.floats(0, 1).map(
            lambda u: 0 if u >= density else (1 if u < density / 2 else -1)
        )
    return hnp.arrays(dtype, shape, elements=elements)


@st.composite
def packed_trits(
    draw: st.DrawFn,
    formats: tuple[str, ...] | None = None,
    shape: tuple[int, ...] | st.SearchStrategy[tuple[int, ...]] | None = None,
) -> Any:
    """:class:`tritnum.PackedTrits` of random trits in one of ``formats`` (default: all).

    Examples
    --------
    >>> from tritnum.testing import packed_trits
    >>> p = packed_trits(formats=("base3",)).example()
    >>> p.format
    'base3'
    """
    from ..packing import pack

    fmt = draw(st.sampled_from(formats or tuple(FORMATS)))
    return pack(draw(trit_arrays(shape, dtype=np.int8)), fmt, device="numpy")


@st.composite
def ternary_tensors(
    draw: st.DrawFn,
    shape: tuple[int, ...] | st.SearchStrategy[tuple[int, ...]] | None = None,
    formats: tuple[str, ...] | None = None,
) -> Any:
    """:class:`tritnum.TernaryTensor` quantized from random float32 weights.

    The scales are per tensor, per row, or per group of a divisor of the last axis.

    Examples
    --------
    >>> from tritnum.testing import ternary_tensors
    >>> t = ternary_tensors(shape=(2, 6)).example()
    >>> t.shape
    (2, 6)
    """
    from ..quantize import quantize

    shape = draw(trit_shapes(min_side=1) if shape is None else (
        shape if isinstance(shape, st.SearchStrategy) else st.just(shape)))
    weights = draw(hnp.arrays(np.float32, shape, elements=st.floats(-8, 8, width=32)))
    n = shape[-1]
    mode = draw(st.sampled_from(["tensor", "row", "group"]))
    kwargs: dict[str, Any] = {}
    if mode == "row":
        kwargs["axis"] = -1
    elif mode == "group":
        kwargs["group_size"] = draw(st.sampled_from([g for g in range(1, n + 1) if n % g == 0]))
    fmt = draw(st.sampled_from(formats or tuple(FORMATS)))
    return quantize(weights, format=fmt, device="numpy", **kwargs)
