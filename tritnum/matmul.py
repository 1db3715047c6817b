"""Ternary matmul on packed weights: ``linear``, ``x @ w.T`` and the ``BitLinear`` layer.

``y = x @ dequantize(w).T + bias`` is computed from the packed trits, never from
a dense float copy of ``w``: one row of activations (GEMV) reads the packed bytes
once; many rows (GEMM) decode tiles of weight rows once per call and multiply
them with BLAS.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._dispatch import call, implements, place, resolve_device
from ._interop import as_rows, dask_layer, is_cuda_array, is_dask, native, origin, to_gpu, to_host
from ._validate import choice
from .errors import ShapeMismatchError
from .packing import ensure_valid
from .quantize import TernaryTensor, TransposedTernaryTensor, quantize, quantize_activations
from .typing import Activations

__all__ = ["BitLinear", "linear"]

ACTIVATIONS = ("float", "int8")


def _weights(w: Any) -> TernaryTensor:
    if isinstance(w, TransposedTernaryTensor):
        raise TypeError("linear takes the (out, in) TernaryTensor w itself, not w.T "
                        "(x @ w.T is the same as linear(x, w))")
    if not isinstance(w, TernaryTensor):
        raise TypeError(f"w must be a tn.TernaryTensor (from tn.quantize), got {type(w).__name__}")
    if w.ndim != 2:
        raise ShapeMismatchError(f"w must be 2-D (out, in), got shape {w.shape}",
                                 expected="ndim == 2", actual=w.shape)
    return w


def _activations(x: Any, x_scale: Any, activations: str, n: int) -> tuple[Any, bool]:
    """``x`` checked, and whether it takes the int8 path."""
    choice(activations, "activations", ACTIVATIONS)
    a = native(x)
    if not (is_cuda_array(a) or is_dask(a)):
        a = np.asarray(a)
    kind = a.dtype.kind
    if a.dtype == np.int8 and x_scale is not None:
        int8 = True
    elif a.dtype == np.int8:
        raise TypeError("an int8 x is quantized activations: pass its scale as x_scale "
                        "(x ≈ x_int8 * x_scale), or pass float activations")
    elif kind == "f":
        if x_scale is not None:
            raise TypeError("x_scale goes with int8 activations; float x needs none")
        int8 = activations == "int8"
    else:
        raise TypeError(f"x must be a float16/32/64 array (or int8 with x_scale), "
                        f"got dtype {a.dtype}")
    if a.ndim == 0:
        raise ShapeMismatchError("x must have at least one dimension, got a scalar",
                                 expected=f"(..., {n})", actual=())
    features = tuple(a.shape)[-1]  # GPU arrays' shapes may refuse negative indices
    if features != n:
        raise ShapeMismatchError(
            f"x has {features} features on its last axis but w has {n} inputs",
            expected=n, actual=features)
    return a, int8


def _vector(v: Any, name: str, shape: tuple[int, ...]) -> Any:
    """A float32 array of ``shape`` from a real-valued ``v`` (scalars broadcast for x_scale).

    A float32 GPU array of the right shape stays where it is (checked, not copied).
    """
    a = native(v)
    if (is_cuda_array(a) and a.dtype == np.float32 and tuple(a.shape) == shape
            and a.is_c_contiguous()):
        return a
    a = to_host(a)
    if a.dtype.kind not in "fiu":
        raise TypeError(f"{name} must be real numbers, got dtype {a.dtype}")
    try:
        return np.ascontiguousarray(np.broadcast_to(a, shape), dtype=np.float32)
    except ValueError:
        raise ShapeMismatchError(f"{name} must have shape {shape}, got {a.shape}",
                                 expected=shape, actual=a.shape) from None


def _bias(bias: Any, out: int) -> Any:
    if bias is None:
        return None
    b = native(bias)
    if tuple(np.shape(b)) != (out,):
        raise ShapeMismatchError(f"bias must have shape ({out},), got {tuple(np.shape(b))}",
                                 expected=(out,), actual=tuple(np.shape(b)))
    return _vector(b, "bias", (out,))


def _scale_rows(w: TernaryTensor) -> np.ndarray:
    """The weight scales as ``(out, groups)`` float32 (one group for per-tensor scales)."""
    out = w.shape[0]
    if w.group_size is None:
        return np.full((out, 1), w.scales, np.float32)
    return np.ascontiguousarray(w.scales.reshape(out, -1))


@implements("matmul")
def linear(x: Any, w: TernaryTensor, bias: Any = None, *, activations: Activations = "float",
           x_scale: Any = None, device: str = "auto") -> Any:
    """``x @ dequantize(w).T + bias`` from packed ternary weights.

    Parameters
    ----------
    x : array_like, shape (in,) or (..., in)
        float16/32/64 activations (computed in float32), or int8 activations
        already quantized, with ``x_scale``.
    w : TernaryTensor, shape (out, in)
        Weights from :func:`tritnum.quantize` in any format, with per-tensor,
        per-row or per-group scales.
    bias : array_like, shape (out,), optional
        Added to every output row.
    activations : {"float", "int8"}
        ``"float"`` (the default here; :class:`BitLinear` defaults to ``"int8"``,
        as bitnet.cpp runs): float32 arithmetic. ``"int8"``: BitNet b1.58 W1.58A8
        inference: ``x`` is quantized per row with
        :func:`tritnum.quantize_activations`, the products ``trit * q`` are
        summed exactly in integers (per scale group) and rescaled by the weight
        and activation scales, as bitnet.cpp does.
    x_scale : array_like, optional
        For int8 ``x`` only: the scale of each row (shape ``x.shape[:-1]``, or a
        scalar), ``x ≈ x_int8 * x_scale``. An int8 ``x`` with ``x_scale``
        always takes the int8 path.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run; ``"auto"`` follows the data.

    Returns
    -------
    numpy.ndarray, GPU array or Dask array of float32, shape (out,) or (..., out)
        A lazy Dask array for Dask activations, chunked as ``x`` along the
        leading axes; the weights go to the workers once (see ``tritnum._dask``).

    Raises
    ------
    ShapeMismatchError
        ``x.shape[-1]`` is not ``in``, ``bias`` is not ``(out,)``, or ``w`` is not 2-D.
    TypeError
        ``x`` is integer (other than int8 with ``x_scale``), bool, complex or object.
    InvalidTritsError
        ``w`` wraps packed bytes holding a corrupt code (checked on first use).
    ValueError
        NaN or infinity in ``x`` on the int8 path (it cannot be quantized).

    Notes
    -----
    On the float path NaN and infinity in ``x`` propagate as they do in BLAS:
    every output that reads them is NaN or infinite. Values beyond float32's range
    become infinite (the float path computes in float32).

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> w = tn.quantize(np.array([[1.0, -1.0, 0.0], [0.0, 1.0, 1.0]]))
    >>> x = np.array([[2.0, 1.0, 4.0]], dtype=np.float32)
    >>> tn.linear(x, w)
    array([[0.6666667, 3.3333335]], dtype=float32)
    >>> x @ w.T
    array([[0.6666667, 3.3333335]], dtype=float32)
    >>> tn.linear(x, w, activations="int8")  # x quantized to int8 per row
    array([[0.671916 , 3.3385828]], dtype=float32)
    """
    like = origin(x)
    w = _weights(w)
    out, n = w.shape
    a, int8 = _activations(x, x_scale, activations, n)
    b = _bias(bias, out)
    if is_dask(a) or is_dask(w.packed.data):  # lazy in, lazy out: weights shared by all tasks
        return dask_layer().linear(a, w, b, int8, x_scale, device)
    lead = tuple(a.shape)[:-1]
    dev = resolve_device(device, a, w.packed.data)
    ensure_valid(w.packed, dev)
    rows = as_rows(a)
    m = rows.shape[0]
    given_scale = None if x_scale is None else _vector(x_scale, "x_scale", lead).reshape(m)
    if m == 0 or out == 0 or n == 0:
        y = np.zeros((m, out), np.float32) + (0 if b is None else to_host(b))
        return place(y, like, (*lead, out))
    if int8 and x_scale is None:
        q, xs = quantize_activations(rows, device=dev)
    elif int8:
        q, xs = rows, given_scale
    else:
        q, xs = _float32_rows(rows), None
    weights = (w.packed.data, w.packed._format, n, _scale_rows(w), b)
    if int8:
        y = call("linear_int8", dev, q, xs, *weights)
    else:
        y = call("linear_float", dev, q, *weights)
    return place(y, like, (*lead, out))


def _float32_rows(rows: Any) -> Any:
    """C-contiguous float32 rows, where they live (other GPU dtypes go through the host)."""
    is_cuda = is_cuda_array(rows)
    if is_cuda:
        if rows.dtype == np.float32 and rows.is_c_contiguous():
            return rows
        rows = to_host(rows)
    with np.errstate(over="ignore"):  # beyond float32: infinite, and propagates (documented)
        host = np.ascontiguousarray(rows, np.float32)
    return to_gpu(host) if is_cuda else host


class BitLinear:
    """A ternary linear layer: quantize a float weight once, apply :func:`linear` on call.

    Parameters
    ----------
    weight : array_like of float, shape (out_features, in_features), or TernaryTensor
        Float weights are quantized with BitNet b1.58 absmean (:func:`tritnum.quantize`).
    bias : array_like, shape (out_features,), optional
    group_size : int, optional
        One weight scale per ``group_size`` inputs (default: one per tensor, as BitNet).
    activations : {"int8", "float"}
        ``"int8"`` (default, as bitnet.cpp runs, and unlike :func:`linear`, whose
        default is ``"float"``; the two differ by the activations' rounding, about
        1 %): W1.58A8 inference as bitnet.cpp; ``"float"``: float32.
    format : {"2bit", "base3", "bitplane"}
        Packed format of the weights.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where the layer runs.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> rng = np.random.default_rng(0)
    >>> layer = tn.BitLinear(rng.standard_normal((64, 256)), bias=np.zeros(64))
    >>> layer.in_features, layer.out_features, layer.nbytes, round(layer.sparsity, 2)
    (256, 64, 4356, 0.31)
    >>> layer(rng.standard_normal((2, 256))).shape
    (2, 64)
    """

    def __init__(self, weight: Any, bias: Any = None, *, group_size: int | None = None,
                 activations: str = "int8", format: str = "2bit",
                 device: str = "auto") -> None:
        choice(activations, "activations", ACTIVATIONS)
        if isinstance(weight, TernaryTensor):
            if group_size is not None and group_size != weight.group_size:
                raise ValueError("group_size is fixed by a TernaryTensor weight")
            w = weight
        else:
            w = quantize(weight, group_size=group_size, format=format, device=device)
        self.weight = _weights(w)
        self.bias = _bias(bias, self.weight.shape[0])
        self.activations = activations
        self.device = device
        self._sparsity: float | None = None

    @property
    def in_features(self) -> int:
        """Inputs per row of activations."""
        return self.weight.shape[1]

    @property
    def out_features(self) -> int:
        """Outputs per row."""
        return self.weight.shape[0]

    @property
    def nbytes(self) -> int:
        """Bytes held: packed weights, scales and bias."""
        return self.weight.nbytes + (0 if self.bias is None else self.bias.nbytes)

    @property
    def sparsity(self) -> float:
        """Fraction of weights that are zero."""
        if self._sparsity is None:
            zeros = 0
            rows = max(1, (1 << 22) // max(self.in_features, 1))
            for r0 in range(0, self.out_features, rows):
                trits = self.weight.packed[r0:r0 + rows].unpack(device=self.device)
                zeros += int(np.count_nonzero(to_host(trits) == 0))
            self._sparsity = zeros / max(self.weight.packed.size, 1)
        return self._sparsity

    def __call__(self, x: Any) -> Any:
        """``linear(x, weight, bias)`` with the layer's activations and device."""
        return linear(x, self.weight, self.bias, activations=self.activations,
                      device=self.device)

    def __repr__(self) -> str:
        return (f"BitLinear(in_features={self.in_features}, out_features={self.out_features}, "
                f"activations={self.activations!r}, format={self.weight.format!r}, "
                f"group_size={self.weight.group_size}, {self.nbytes / 1024:.1f} KiB, "
                f"sparsity={self.sparsity:.2f})")
