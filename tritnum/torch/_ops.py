"""The frozen layer's forward as torch operators: ``tritnum::ternary_linear`` and its backward.

``torch.compile`` sees these as opaque operators (``torch.library.custom_op`` with
shape-only fake implementations), so an eval-mode model compiles in one graph
(``fullgraph=True`` works) and tritnum's kernels run where the graph calls them.
Their tensors are a :class:`~tritnum.torch.BitLinear`'s buffers: the packed "2bit"
trits (uint8, ``(out, ceil(in / 4))``) and the float32 scales.

The :class:`~tritnum.TernaryTensor` over a buffer is built once and kept while the
buffer lives and is not written to (its version counter): its codes are checked on
first use only, as for any PackedTrits wrapped from elsewhere.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils.weak import WeakIdKeyDictionary

from ..matmul import linear
from ..packing import PackedTrits
from ..quantize import TernaryTensor

__all__ = ["frozen_linear", "ternary_dequantize", "ternary_linear", "ternary_weight", "version"]

_WEIGHTS: Any = WeakIdKeyDictionary()  # packed buffer -> (stamp, scale ref, TernaryTensor)


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
    hit = _WEIGHTS.get(packed)
    if hit is not None and hit[0] == stamp and hit[1]() is scale:
        return hit[2]
    trits = PackedTrits(packed.detach(), (packed.shape[0], in_features), "2bit", copy=False)
    w = TernaryTensor(trits, scale.detach().cpu().numpy(), group_size)
    _WEIGHTS[packed] = (stamp, weakref.ref(scale), w)
    return w


def frozen_linear(x: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor,
                  bias: torch.Tensor | None, in_features: int, group_size: int | None,
                  activations: str) -> torch.Tensor:
    """:func:`tritnum.linear` of ``x`` with the packed weights, in ``x``'s dtype.

    The implementation of ``tritnum::ternary_linear``; called directly where no graph is
    traced and no gradient is needed, it saves the dispatcher's 20-25 us per call.
    """
    w = ternary_weight(packed, scale, in_features, group_size)
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
