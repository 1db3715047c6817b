"""The frozen layer's forward as torch operators: ``tritnum::ternary_linear`` and its backward.

``torch.compile`` sees these as opaque operators (``torch.library.custom_op`` with
shape-only fake implementations), so an eval-mode model compiles in one graph
(``fullgraph=True`` works) and tritnum's kernels run where the graph calls them.
Their tensors are a :class:`~tritnum.torch.BitLinear`'s buffers: the packed "2bit"
trits (uint8, ``(out, ceil(in / 4))``) and the float32 scales.

The :class:`~tritnum.TernaryTensor` over a buffer is built once and kept while the
buffer lives and is not written to: neither its version counter nor a :class:`Sample` of
the buffer and of the scales changed (writes through ``.data`` bump no counter). Its codes
are checked on first use, as for any PackedTrits wrapped from elsewhere, so a buffer
found changed is checked again; :func:`forget` drops it for edits the sample misses.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from ..matmul import linear
from ..packing import PackedTrits
from ..quantize import TernaryTensor

__all__ = ["Sample", "forget", "frozen_linear", "ternary_dequantize", "ternary_linear",
           "ternary_weight", "version"]

# id of a packed buffer -> (weak reference to it, stamp, scale ref, TernaryTensor, Sample of
# the buffer, Sample of the scales); an entry leaves with its buffer. A plain dict: torch's
# WeakIdKeyDictionary took 0.9 us a lookup, in every eval-mode call
_WEIGHTS: dict[int, tuple[Any, ...]] = {}


def _leave(key: int) -> Any:
    """The callback of entry ``key``'s weak reference: the entry leaves (if still that one)."""
    def callback(ref: weakref.ref) -> None:
        hit = _WEIGHTS.get(key)
        if hit is not None and hit[0] is ref:
            del _WEIGHTS[key]
    return callback

SAMPLE_ROWS = SAMPLE_COLUMNS = 16  # a Sample is a grid of at most 16 x 16 values
_SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class Sample:
    """The values of a tensor at fixed positions, compared per call: a cheap fingerprint.

    A grid of at most 16 x 16 values evenly strided over the rows and the columns (all of
    them for a small tensor): a view of the tensor's memory, so that :meth:`same` sees
    writes that bump no version counter (``t.data.mul_(-1)``, ``t.data.lerp_(...)``).
    Whole-tensor updates (EMA and weight-averaging steps, sign flips, rescaling) change
    the sample; an edit of elements between its positions does not.

    The values are compared as raw bits (NaN equals itself, -0.0 differs from 0.0); on
    the CPU through a NumPy view (about 0.5 us), elsewhere with ``torch.equal`` (which
    waits for the device). The view keeps the tensor's memory alive.
    """

    __slots__ = ("_saved", "_view")

    def __init__(self, t: torch.Tensor) -> None:
        t = t.detach()
        if t.device.type == "meta" or t.numel() == 0:
            self._view = self._saved = None
            return
        grid = t.reshape(1, 1) if t.dim() == 0 else t.unsqueeze(0) if t.dim() == 1 else (
            t.flatten(0, -2) if t.dim() > 2 else t)  # >2-D: a view when it can be
        rows, cols = grid.shape
        nr = min(rows, SAMPLE_ROWS if rows * cols > SAMPLE_ROWS * SAMPLE_COLUMNS else rows)
        nc = min(cols, max(1, (SAMPLE_ROWS * SAMPLE_COLUMNS) // nr))
        view = grid[::max(1, rows // nr), ::max(1, cols // nc)][:nr, :nc]
        bits = view.view(_SAME_SIZE_INT[view.element_size()])  # raw bits, any float dtype
        self._view: Any = bits.numpy() if bits.device.type == "cpu" else bits
        self._saved: Any = self._read()

    def _read(self) -> Any:
        view = self._view
        return view.tobytes() if not isinstance(view, torch.Tensor) else view.clone()

    def same(self) -> bool:
        """Whether the sampled values are those read when the sample was taken."""
        view = self._view
        if view is None:
            return True
        if isinstance(view, torch.Tensor):
            return torch.equal(view, self._saved)
        return view.tobytes() == self._saved


def version(t: torch.Tensor) -> int:
    """``t``'s version counter (in-place writes bump it); -1 for inference tensors.

    Inference tensors (made under ``torch.inference_mode``) keep no counter: a write to
    one inside inference mode goes unseen.
    """
    return -1 if t.is_inference() else t._version


def ternary_weight(packed: torch.Tensor, scale: torch.Tensor, in_features: int,
                   group_size: int | None) -> TernaryTensor:
    """The TernaryTensor over ``packed`` (shared memory) and ``scale`` (copied to the host)."""
    stamp = (version(packed), version(scale), in_features, group_size)
    key = id(packed)
    hit = _WEIGHTS.get(key)
    if (hit is not None and hit[0]() is packed and hit[1] == stamp and hit[2]() is scale
            and hit[4].same() and hit[5].same()):
        return hit[3]
    # new, or written to (through .data too): wrapped again, so its codes are checked again
    trits = PackedTrits(packed.detach(), (packed.shape[0], in_features), "2bit", copy=False)
    w = TernaryTensor(trits, scale.detach().cpu().numpy(), group_size)
    _WEIGHTS[key] = (weakref.ref(packed, _leave(key)), stamp, weakref.ref(scale), w,
                     Sample(packed), Sample(scale))
    return w


def forget(packed: torch.Tensor | None) -> None:
    """Drop the TernaryTensor kept for ``packed``: the next use wraps and checks it again."""
    if packed is not None:
        hit = _WEIGHTS.get(id(packed))
        if hit is not None and hit[0]() is packed:
            del _WEIGHTS[id(packed)]


def frozen_linear(x: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor,
                  bias: torch.Tensor | None, in_features: int, group_size: int | None,
                  activations: str) -> torch.Tensor:
    """:func:`tritnum.linear` of ``x`` with the packed weights, in ``x``'s dtype.

    The implementation of ``tritnum::ternary_linear``; called directly where no graph is
    traced and no gradient is needed, it saves the dispatcher's 20-25 us per call.
    """
    w = ternary_weight(packed, scale, in_features, group_size)
    if (x.dtype == torch.float32 and x.device.type == "cpu"
            and (bias is None or (bias.dtype == torch.float32 and bias.device.type == "cpu"))):
        # NumPy views of the CPU tensors: linear's host route, as NumPy callers take it
        # (the general route converts each argument at each step: 64 x 64 took 32 us)
        y = linear(x.detach().numpy(), w, None if bias is None else bias.detach().numpy(),
                   activations=activations)
        return torch.from_numpy(y)
    y = linear(x, w, bias, activations=activations)
    return y.to(x.dtype)


ternary_linear = torch.library.custom_op("tritnum::ternary_linear", frozen_linear,
                                         mutates_args=())


@ternary_linear.register_fake
def _(x: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None,
      in_features: int, group_size: int | None, activations: str) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], packed.shape[0]))


@torch.library.custom_op("tritnum::ternary_dequantize", mutates_args=())
def ternary_dequantize(packed: torch.Tensor, scale: torch.Tensor, in_features: int,
                       group_size: int | None) -> torch.Tensor:
    """The float32 weights ``trits * scale``, ``(out, in)``, where ``packed`` lives."""
    return ternary_weight(packed, scale, in_features, group_size).dequantize()


@ternary_dequantize.register_fake
def _(packed: torch.Tensor, scale: torch.Tensor, in_features: int,
      group_size: int | None) -> torch.Tensor:
    return packed.new_empty((packed.shape[0], in_features), dtype=torch.float32)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, packed, scale, bias, in_features, group_size, _ = inputs
    ctx.save_for_backward(packed, scale)
    ctx.layout = (in_features, group_size)
    ctx.dtypes = (x.dtype, None if bias is None else bias.dtype)


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    """Straight-through: ``grad @ (trits * scale)`` for ``x``, the row sum for the bias."""
    packed, scale = ctx.saved_tensors
    grad_x = grad_bias = None
    if ctx.needs_input_grad[0]:
        w = torch.ops.tritnum.ternary_dequantize(packed, scale, *ctx.layout)
        grad_x = (grad.to(w.dtype) @ w).to(ctx.dtypes[0])
    if ctx.needs_input_grad[3]:
        grad_bias = grad.reshape(-1, grad.shape[-1]).sum(0).to(ctx.dtypes[1])
    return grad_x, None, None, grad_bias, None, None, None


ternary_linear.register_autograd(_backward, setup_context=_setup_context)


class EagerLinear(torch.autograd.Function):
    """``tritnum::ternary_linear`` with its backward, for eager calls that need a gradient.

    The same forward and backward as the operator, without the operator's dispatch:
    an eval-mode ``BitLinear`` of 64 x 64 under autograd took 35.5 µs through the
    operator (``nn.Linear`` 6.9 µs). Graphs that torch traces call the operator.
    """

    @staticmethod
    def forward(ctx: Any, *inputs: Any) -> torch.Tensor:
        output = frozen_linear(*inputs)
        _setup_context(ctx, inputs, output)
        return output

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        return _backward(ctx, grad)
