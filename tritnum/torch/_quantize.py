"""BitNet b1.58 quantizers in torch ops, bit for bit as tritnum's, and their straight-through twins.

Written with torch operations so that autograd, CUDA tensors and ``torch.compile``
work; the arithmetic follows tritnum's precision contract
(:mod:`tritnum._kernels.reference.quantize`) operation by operation:

- weights (:func:`tritnum.quantize`): float64 sums of ``|w|`` per tensor or group,
  ``scale = float32(max(sum / count, 1e-5))``; trits ``(w > s/2) - (w < -s/2)`` for
  16- and 32-bit weights (exact in float32), ``(w/s > 0.5) - (w/s < -0.5)`` with float64
  quotients for float64 weights, as tritnum's reference divides.
- activations (:func:`tritnum.quantize_activations`): float32 throughout,
  ``amax = max(max|x|, 1e-5)`` per row, ``q = clip(rint(x * (127 / amax)), -128, 127)``
  (``torch.round`` rounds half to even, as ``np.rint``), scale ``amax / 127``.

The float64 sums are added in another order than tritnum's kernels add them; the
float32 scale differs only if the two float64 sums fall on either side of a float32
rounding boundary (a chance of about 1e-8 per scale).

The straight-through versions return values that are exactly the quantized ones
(``q + (x - x.detach())``: the second term is exactly zero) with the gradient of the
identity, the estimator of ``x + (q(x) - x).detach()``, whose value is rounded.
"""

from __future__ import annotations

import torch

from .._kernels.shared.quantize import EPS

__all__ = ["SCALE_DTYPES", "activation_scale", "dequantized_weight", "quantize_activations",
           "round_scale", "ste_activations", "ste_weight", "ternarize", "weight_scale"]

_HALF_WIDTH = (torch.float16, torch.bfloat16)
SCALE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def round_scale(scale: torch.Tensor, scale_dtype: str) -> torch.Tensor:
    """float32 ``scale`` rounded to ``scale_dtype`` (nearest, ties to even) and held as float32."""
    if scale_dtype == "float32":
        return scale
    return scale.to(SCALE_DTYPES[scale_dtype]).to(torch.float32)


def _grouped(w: torch.Tensor, group_size: int | None) -> torch.Tensor:
    """``w`` as ``(*lead, groups, group_size)`` (one group of everything when None)."""
    if group_size is None:
        return w.reshape(1, -1)
    return w.reshape(*w.shape[:-1], -1, group_size)


def weight_scale(w: torch.Tensor, group_size: int | None = None) -> torch.Tensor:
    """float32 absmean scales of ``w``: 0-d per tensor, else ``(*lead, in // group_size)``."""
    w = w.detach()
    groups = _grouped(w, group_size)
    count = max(groups.shape[-1], 1)
    mean = groups.abs().sum(dim=-1, dtype=torch.float64) / count
    mean = mean.clamp_min(EPS).to(torch.float32)
    return mean.reshape(()) if group_size is None else mean


def ternarize(w: torch.Tensor, scale: torch.Tensor, group_size: int | None = None) -> torch.Tensor:
    """The trits of ``w`` for its float32 ``scale`` as a float tensor of ``w``'s dtype."""
    w = w.detach()
    groups = _grouped(w, group_size)
    s = scale[..., None] if group_size is not None else scale
    if w.dtype == torch.float64:
        q = groups / s.to(torch.float64)
        t = (q > 0.5).to(w.dtype) - (q < -0.5).to(w.dtype)
    else:
        wide = groups.float() if w.dtype in _HALF_WIDTH else groups
        half = s * 0.5  # exact: s is a float32 >= 1e-5
        t = (wide > half).to(w.dtype) - (wide < -half).to(w.dtype)
    return t.reshape(w.shape)


def activation_scale(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 ``amax = max(max|x|, 1e-5)`` per row (``x.shape[:-1]``) and ``127 / amax``.

    The quotient is a division: ``127 / tensor`` in torch multiplies by a rounded
    reciprocal, which differs from it in the last bit now and then.
    """
    amax = x.detach().float().abs().amax(dim=-1).clamp_min(EPS)
    return amax, torch.full_like(amax, 127).div(amax)


def quantize_activations(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, scale)`` as :func:`tritnum.quantize_activations`: q int8, scale float32 per row."""
    amax, inverse = activation_scale(x)
    q = torch.round(x.detach().float() * inverse[..., None]).clamp(-128, 127)
    return q.to(torch.int8), amax / 127


def ste_weight(w: torch.Tensor, group_size: int | None = None,
               scale_dtype: str = "float32") -> tuple[torch.Tensor, torch.Tensor | None]:
    """Straight-through ternary weights for ``F.linear``: ``(w_q, out_scale)``.

    Per tensor or per row (``group_size`` None or the whole row) ``w_q`` holds the trits
    and ``out_scale`` the scale of each output (0-d or ``(out,)``) to multiply the
    product by, so that the product sums integers exactly; per group ``w_q`` is
    ``trits * scale`` and ``out_scale`` None. Either way
    ``d w_q * out_scale / d w`` is the identity (up to rounding). The trits are those of
    the float32 scale; the scale multiplied is rounded to ``scale_dtype``.
    """
    exact = weight_scale(w, group_size)
    t = ternarize(w, exact, group_size)
    scale = round_scale(exact, scale_dtype)
    if group_size is None or group_size == w.shape[-1]:
        w_q = t + (w - w.detach()) / scale.to(w.dtype)  # scale: 0-d, or (out, 1) per row
        return w_q, scale if group_size is None else scale[:, 0]
    per_element = scale.repeat_interleave(group_size, dim=-1).to(w.dtype)
    return t * per_element + (w - w.detach()), None


def dequantized_weight(w: torch.Tensor, group_size: int | None = None,
                       scale_dtype: str = "float32") -> torch.Tensor:
    """``trits * scale`` of ``w`` per element, in ``w``'s dtype, detached (no gradient)."""
    scale = weight_scale(w, group_size)
    t = ternarize(w, scale, group_size)
    scale = round_scale(scale, scale_dtype)
    if group_size is not None:
        scale = scale.repeat_interleave(group_size, dim=-1)
    return (t * scale.to(t.dtype)).detach()


def ste_activations(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Straight-through int8 activations: ``(q, scale)`` with ``q * scale`` ≈ ``x``.

    ``q`` holds the integers of :func:`quantize_activations` in ``x``'s dtype;
    ``d q * scale / d x`` is the identity (up to rounding).
    """
    amax, inverse = activation_scale(x)
    inverse = inverse[..., None]
    xf = x.float()
    q = torch.round(xf.detach() * inverse).clamp(-128, 127)
    return (q + (xf - xf.detach()) * inverse).to(x.dtype), amax / 127
