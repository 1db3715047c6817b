"""``BitLinear``: an ``nn.Module`` that trains ternary weights (BitNet b1.58) and runs them packed.

In training mode the forward pass is quantization-aware training in torch
operations: the latent float weights are absmean-ternarized and the activations
quantized to int8 per token, exactly as :func:`tritnum.quantize` and
:func:`tritnum.quantize_activations` do, with straight-through gradients. In eval
mode the layer holds its weights packed ("2bit" trits and float32 scales, in
buffers) and runs :func:`tritnum.linear` on them; both modes give the same
outputs up to the rounding of the final rescale.
"""

from __future__ import annotations

import inspect
import math
import operator
import warnings
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch._C._functorch import TransformType
from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters

from .._formats import get_format
from .._validate import choice
from ..errors import FormatError, ShapeMismatchError
from ..packing import PackedTrits, ensure_valid, pack, unpack
from ..quantize import TernaryTensor, quantize
from ..typing import Activations
from . import _ops
from ._quantize import (
    SCALE_DTYPES,
    dequantized_weight,
    quantize_activations,
    round_scale,
    ste_activations,
    ste_weight,
)

__all__ = ["ACTIVATIONS", "NORMS", "BitLinear"]

# Internal API: the private names other modules use (tests/test_architecture_seams.py):
# convert.py (set_quant_lambda checks its value), _hf.py (packed layers from trits).
_INTERNAL_API = ("_quant_lambda", "BitLinear._from_ternary")

ACTIVATIONS = ("int8", "float")
NORMS = (None, "rms")
_PACKED = ("weight_packed", "weight_scale")
_EPS = np.float64(1e-5)  # the absmean floor of tritnum.quantize


def _quant_lambda(value: float) -> float:
    """``value`` as a float in [0, 1], else ValueError (TypeError for a non-number)."""
    if isinstance(value, torch.Tensor):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"quant_lambda must be a number in [0, 1], got {type(value).__name__}")
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"quant_lambda must be in [0, 1] (0: float, 1: fully quantized), "
                         f"got {value}")
    return value


def _norm(norm: str | None) -> str | None:
    """``norm`` if one of :data:`NORMS`, else ValueError naming them."""
    return None if norm is None else choice(norm, "norm (or None)", NORMS[1:])


def _rounded(t: TernaryTensor, scale_dtype: str) -> TernaryTensor:
    """``t`` with its scales rounded to ``scale_dtype``; FormatError where one overflows it."""
    if scale_dtype == "float32":
        return t
    scales = round_scale(torch.tensor(np.asarray(t.scales, np.float32)), scale_dtype)
    if not torch.isfinite(scales).all():
        worst = float(np.max(t.scales))
        raise FormatError(f"a weight scale of {worst:g} overflows scale_dtype={scale_dtype!r} "
                          f"(largest {torch.finfo(SCALE_DTYPES[scale_dtype]).max:g}): use "
                          "scale_dtype='float32' or 'bfloat16'")
    return TernaryTensor(t.packed, scales.numpy(), t.group_size)


def packed_buffers(w: TernaryTensor, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``(weight_packed, weight_scale)`` of ``w`` on ``device``: "2bit" bytes, float32 scales."""
    packed = w.packed if w.format == "2bit" else pack(unpack(w.packed), "2bit")
    return (torch.from_numpy(np.array(packed.data)).to(device),
            torch.from_numpy(np.array(w.scales, np.float32)).to(device))


def latent_from_trits(trits: np.ndarray, scales: np.ndarray,
                      group_size: int | None) -> np.ndarray:
    """float32 latent weights whose absmean quantization gives ``trits`` and ``scales`` back.

    In each scale's group the ``k`` nonzero trits of ``n`` become ``±v`` with two
    neighbouring float32 magnitudes ``v`` (about ``scale * n / k``), as many of each as
    bring the float64 sum of ``|w|`` nearest ``scale * n``: the trits come back exactly
    (``v >= scale > scale / 2``), and the scale too unless a group has too few nonzero
    trits to reach it (then within one float32 step). A group of zeros stays zeros (its
    scale becomes the floor, 1e-5; its outputs are zero either way).
    """
    out = trits.shape[0]
    groups = trits.reshape(1, -1) if group_size is None else trits.reshape(out, -1, group_size)
    k = np.count_nonzero(groups, axis=-1).astype(np.float64)
    target = np.asarray(scales, np.float32).reshape(k.shape).astype(np.float64) * groups.shape[-1]
    low = (target / np.maximum(k, 1)).astype(np.float32)
    low = np.where(low.astype(np.float64) * k > target, np.nextafter(low, np.float32(0)), low)
    high = np.nextafter(low, np.float32(np.inf))
    step = high.astype(np.float64) - low
    many = np.clip(np.rint((target - k * low) / step), 0, k)  # how many take the higher one
    rank = np.cumsum(groups != 0, axis=-1)
    magnitude = np.where(rank <= many[..., None], high[..., None], low[..., None])
    return (groups * magnitude).astype(np.float32).reshape(trits.shape)


def _group_size(group_size: int | None, in_features: int) -> int | None:
    if group_size is None:
        return None
    group_size = operator.index(group_size)
    if group_size < 1 or in_features % group_size:
        raise ShapeMismatchError(
            f"group_size must divide in_features ({in_features}), got {group_size}",
            expected=f"a divisor of {in_features}", actual=group_size)
    return group_size


def _needs_the_operator() -> bool:
    """Whether an eager eval-mode call takes the operator, not EagerLinear or frozen_linear.

    Dispatch modes (make_fx, FakeTensorMode) and torch.func's vmap know the operator;
    the others read x's memory (make_fx recorded their output as a constant, whatever
    the input) and have no vmap rule. Forward-mode AD
    (torch.func.jvp, jacfwd) is left to EagerLinear, which refuses it: the operator
    gives it zero tangents.
    """
    if torch._C._len_torch_dispatch_stack():
        return True
    return torch._C._are_functorch_transforms_active() and not any(
        i.key() == TransformType.Jvp for i in retrieve_all_functorch_interpreters())


def _stamp(w: torch.Tensor) -> tuple[Any, ...]:
    """What identifies the values of the latent weights: storage, version, dtype, device."""
    return w.data_ptr(), _ops.version(w), w.dtype, w.device


class BitLinear(nn.Module):
    """A linear layer with ternary weights: BitNet b1.58 training in torch, packed kernels in eval.

    This one, PyTorch's, takes sizes as ``nn.Linear``; :class:`tritnum.BitLinear`, NumPy's
    layer of the same name, takes a weight matrix for inference.

    ``y = x @ W.T + b`` where ``W`` is the absmean ternarization of the latent float
    ``weight`` (:func:`tritnum.quantize`: ``trits * scale``, one scale per tensor or per
    ``group_size`` inputs) and, with ``activations="int8"``, ``x`` is quantized per
    token to int8 (:func:`tritnum.quantize_activations`).

    - **Training mode** (quantization-aware training): the quantizers run as torch
      operations, bit for bit as tritnum's, so autograd, CUDA and ``torch.compile``
      work; gradients reach the latent weights and the input straight through the
      rounding (the estimator ``w + (q(w) - w).detach()``). The product sums integers
      exactly (float32 holds them up to 2**24: ``in_features`` below 131,072) and is
      rescaled afterwards, as the kernels do.
    - **Eval mode**: ``eval()`` (or :meth:`freeze`) packs the weights into the
      buffers ``weight_packed`` ("2bit" trits, uint8) and ``weight_scale`` (float32), and
      the forward pass runs :func:`tritnum.linear` on them (CPU, or CUDA for CUDA
      tensors): no float copy of the weights is made. The output equals the training
      forward on the same input, up to the rounding of the rescale, and is returned in
      the input's dtype. Weights changed in place while in eval mode are packed again
      on the next call (not inside a compiled graph: call ``eval()`` again there). The
      backward pass of eval mode reaches the input and the bias, not the weights.
    - **Changes the layer sees**: torch's version counter catches in-place operations
      on the parameters; writes through ``.data`` (EMA and weight-averaging code,
      ``weight.data.mul_(-1)``) bump no counter, so each eval call also compares a
      fixed sample of at most 256 latent weights, packed bytes and scales (a grid
      strided over rows and columns) with the values it packed or checked: whole-tensor
      updates (EMA steps, sign flips, rescaling) are packed again, and packed bytes
      found changed (``weight_packed.data``) are checked again (a corrupt code raises
      :class:`~tritnum.errors.InvalidTritsError`). An edit through ``.data`` of single
      elements the sample may miss needs :meth:`refresh`.
    - :meth:`train` goes back to the latent weights and drops the packed ones;
      :meth:`unfreeze` also after :meth:`freeze` released them (it rebuilds them).
    - **The training recipe's knobs** (BitNet b1.58's): ``norm="rms"`` puts an RMSNorm
      (the submodule ``rms_norm``, ``torch.nn.RMSNorm``; its weight is in the
      ``state_dict`` and in :func:`export`) on the input before the activations are
      quantized, in both modes, as transformers' ``use_rms_norm``. :attr:`quant_lambda`
      (set it, or for a whole model :func:`set_quant_lambda` and :class:`QuantSchedule`)
      blends float and quantized values in training mode: ``w + λ (q(w) - w).detach()``
      and the same for the activations (``λ = 0`` is the float layer, ``λ = 1``, the
      default, BitNet's quantization-aware training); eval mode and :func:`export`
      always use the fully quantized weights. ``scale_dtype`` rounds the weight scales
      (training, eval and export alike) to what a checkpoint of that dtype stores; the
      trits are those of the float32 scale.

    The ``state_dict`` holds the latent ``weight`` and ``bias``, as ``nn.Linear``'s
    (checkpoints of either load into the other), unless :meth:`freeze` released the
    latent weights: then it holds ``weight_packed``, ``weight_scale`` and ``bias``, and
    loads back into any ``BitLinear`` of the same shape.

    Parameters
    ----------
    in_features, out_features : int
        Sizes of each input and output row.
    bias : bool
        Learn an additive bias.
    group_size : int, optional
        One weight scale per ``group_size`` consecutive inputs (must divide
        ``in_features``); default: one scale for the tensor, as BitNet b1.58.
    activations : {"int8", "float"}
        ``"int8"``: W1.58A8, activations quantized per token (bitnet.cpp's inference);
        ``"float"``: ternary weights only.
    norm : {None, "rms"}
        ``"rms"``: an RMSNorm of the input (learned weight, ``norm_eps``) before the
        activations are quantized.
    norm_eps : float
        The RMSNorm's epsilon (transformers' ``rms_norm_eps``).
    scale_dtype : {"float32", "bfloat16", "float16"}
        The weight scales are rounded to this dtype (held as float32), so that training
        sees the scales a checkpoint in that dtype stores.
    device, dtype : optional
        Of the latent parameters, as for ``nn.Linear``.

    Attributes
    ----------
    quant_lambda : float
        In [0, 1]: how much of the quantization training mode applies (default 1).

    Examples
    --------
    >>> import torch
    >>> from tritnum.torch import BitLinear
    >>> _ = torch.manual_seed(0)
    >>> layer = BitLinear(64, 16)
    >>> layer
    BitLinear(in_features=64, out_features=16, bias=True, group_size=None, activations='int8')
    >>> x = torch.randn(2, 64)
    >>> y_train = layer(x)                 # quantization-aware training forward
    >>> y_train.sum().backward()           # straight-through gradients
    >>> layer.weight.grad.shape
    torch.Size([16, 64])
    >>> y_eval = layer.eval()(x)           # packed weights, tritnum's kernels
    >>> layer.weight_packed.dtype, tuple(layer.weight_packed.shape)
    (torch.uint8, (16, 16))
    >>> torch.allclose(y_eval, y_train, rtol=1e-6, atol=1e-6)
    True
    """

    in_features: int
    out_features: int
    group_size: int | None
    activations: Activations
    norm: str | None
    scale_dtype: str
    weight: nn.Parameter | None
    rms_norm: nn.Module | None

    def __new__(cls, *args: Any, **kwargs: Any) -> BitLinear:
        """Refuse a weight matrix where the sizes go, naming :class:`tritnum.BitLinear`.

        Checked here, before ``__init__``, so that ``BitLinear(W)``, which lacks
        ``out_features``, is explained too.
        """
        first = args[0] if args else kwargs.get("in_features")
        if isinstance(first, (list, tuple)) or getattr(first, "ndim", 0) > 0:
            shape = getattr(first, "shape", None)
            got = type(first).__name__ + ("" if shape is None else f" of shape {tuple(shape)}")
            raise TypeError(
                f"tritnum.torch.BitLinear takes sizes, as torch.nn.Linear: "
                f"BitLinear(in_features, out_features), not a weight matrix (got a "
                f"{got}). From a weight W of shape (out, in): "
                f"BitLinear(W.shape[1], W.shape[0]), then copy W into its .weight (or "
                f"tritnum.torch.convert an nn.Linear); NumPy's layer on a weight matrix is "
                f"tritnum.BitLinear(W)")
        return super().__new__(cls)

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 group_size: int | None = None, activations: Activations = "int8",
                 norm: str | None = None, norm_eps: float = 1e-6,
                 scale_dtype: str = "float32", device: Any = None, dtype: Any = None) -> None:
        factory = {"device": device, "dtype": dtype}
        super().__init__()
        self.in_features = operator.index(in_features)
        self.out_features = operator.index(out_features)
        self.group_size = _group_size(group_size, self.in_features)
        self.activations = choice(activations, "activations", ACTIVATIONS)
        self.norm = _norm(norm)
        self.scale_dtype = choice(scale_dtype, "scale_dtype", tuple(SCALE_DTYPES))
        self.rms_norm = (nn.RMSNorm(self.in_features, eps=float(norm_eps), **factory)
                         if self.norm == "rms" else None)
        self._lambda = 1.0  # quant_lambda as set; the buffer holds it for the forward
        self._gradual = False  # quant_lambda < 1: the blended training forward
        self.register_buffer("_quant_lambda", torch.ones((), device=device), persistent=False)
        self.weight = nn.Parameter(torch.empty((self.out_features, self.in_features), **factory))
        if bias:
            self.bias = nn.Parameter(torch.empty(self.out_features, **factory))
        else:
            self.register_parameter("bias", None)
        for name in _PACKED:
            self.register_buffer(name, None, persistent=False)
        self._packed_from: tuple[Any, ...] | None = None  # the latent weights packed
        self._packed_sample: _ops.Sample | None = None  # and a sample of their values
        self.reset_parameters()

    # the signature help(), inspect and Sphinx show: __init__'s, not __new__'s (*args, **kwargs)
    __new__.__signature__ = inspect.signature(__init__)  # type: ignore[attr-defined]

    @property
    def quant_lambda(self) -> float:
        """How much of the quantization the training forward applies, in [0, 1].

        ``w + λ (q(w) - w).detach()`` for the weights and the same for the
        activations: 0 is the float layer (``nn.Linear``, after the norm), 1 (the
        default) the quantized one, bit for bit as before. Eval mode and
        :func:`export` ignore it. Set per step, e.g. by :class:`QuantSchedule`; held
        in a buffer so that a compiled model does not recompile for each value.
        """
        return self._lambda

    @quant_lambda.setter
    def quant_lambda(self, value: float) -> None:
        value = _quant_lambda(value)
        with torch.no_grad():
            self._quant_lambda.fill_(value)
        self._lambda = value
        self._gradual = value < 1.0

    @classmethod
    def from_linear(cls, linear: nn.Linear, *, group_size: int | None = None,
                    activations: Activations = "int8", norm: str | None = None,
                    norm_eps: float = 1e-6, scale_dtype: str = "float32") -> BitLinear:
        """A BitLinear with ``linear``'s parameters (the same Parameter objects) and mode.

        Sharing the parameters, as torch's own QAT modules do, keeps optimizers and
        tied weights working; the layer is in ``linear``'s training mode.

        Parameters
        ----------
        linear : torch.nn.Linear
            The layer whose weight, bias, sizes and mode the BitLinear takes.
        group_size : int, optional
            One weight scale per ``group_size`` consecutive inputs (must divide
            ``in_features``); default: one scale for the tensor.
        activations : {"int8", "float"}
            ``"int8"``: activations quantized per token; ``"float"``: ternary
            weights only.
        norm : {None, "rms"}
            ``"rms"``: a new RMSNorm (weight of ones) on the input.
        norm_eps : float
            The RMSNorm's epsilon.
        scale_dtype : {"float32", "bfloat16", "float16"}
            The dtype the weight scales are rounded to.

        Returns
        -------
        BitLinear
            The new layer, sharing ``linear``'s Parameter objects.

        Raises
        ------
        TypeError
            ``linear`` is not an ``nn.Linear``.

        Examples
        --------
        >>> import torch
        >>> from tritnum.torch import BitLinear
        >>> dense = torch.nn.Linear(8, 4)
        >>> layer = BitLinear.from_linear(dense)
        >>> layer.weight is dense.weight and layer.bias is dense.bias
        True
        """
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"from_linear takes an nn.Linear, got {type(linear).__name__}")
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None,
                    group_size=group_size, activations=activations, scale_dtype=scale_dtype,
                    device="meta")
        device = linear.weight.device
        layer._quant_lambda = torch.ones((), device=device)
        if norm is not None:
            layer.norm = _norm(norm)
            layer.rms_norm = nn.RMSNorm(linear.in_features, eps=float(norm_eps),
                                        device=device, dtype=linear.weight.dtype)
        layer.weight = linear.weight
        layer.bias = linear.bias
        return layer.train(linear.training)

    @classmethod
    def _from_ternary(cls, w: TernaryTensor, bias: torch.Tensor | None,
                      device: Any) -> BitLinear:
        """A layer holding only ``w`` (packed) and ``bias``, in eval mode.

        ``freeze(keep_latent=False)``'s state, made without latent weights to release.
        """
        out_features, in_features = w.shape
        layer = cls(in_features, out_features, bias is not None, group_size=w.group_size,
                    device="meta")
        layer._quant_lambda = torch.ones((), device=device)
        layer.weight_packed, layer.weight_scale = packed_buffers(w, device)
        layer._persist_packed(True)
        if bias is not None:
            layer.bias = nn.Parameter(bias.to(device), requires_grad=False)
        return layer.train(False)

    def reset_parameters(self) -> None:
        """Initialize the latent weight and bias as ``nn.Linear`` does (Kaiming uniform)."""
        weight = self._latent()
        nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.in_features
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            nn.init.uniform_(self.bias, -bound, bound)
        self._sync()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Quantization-aware training forward in training mode, the packed kernels in eval.

        Parameters
        ----------
        x : torch.Tensor
            Inputs of shape ``(..., in_features)``.

        Returns
        -------
        torch.Tensor
            Outputs of shape ``(..., out_features)``, in the input's dtype in eval mode.
        """
        if self.rms_norm is not None:
            x = self.rms_norm(x)
        if self.training:
            return self._train_forward(x)
        compiling = torch.compiler.is_compiling()
        if not compiling:
            self._refresh()
        elif self.weight_packed is None:
            raise RuntimeError("a BitLinear in eval mode compiles after eval() or freeze() "
                               "packed its weights")
        args = (x, self.weight_packed, self.weight_scale, self.bias, self.in_features,
                self.group_size, self.activations)
        if compiling or _needs_the_operator():
            return _ops.ternary_linear(*args)  # the operator, with its backward
        if torch.is_grad_enabled() and (
                x.requires_grad or (self.bias is not None and self.bias.requires_grad)):
            return _ops.EagerLinear.apply(*args)  # the same, without the operator's dispatch
        return _ops.frozen_linear(*args)

    def _train_forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._gradual:
            return self._blended_forward(x)
        w_q, w_scale = ste_weight(self._latent(), self.group_size, self.scale_dtype)
        a, x_scale = ste_activations(x) if self.activations == "int8" else (x, None)
        y = F.linear(a, w_q)
        if w_scale is not None:
            y = y * w_scale.to(y.dtype)
        if x_scale is not None:
            y = y * x_scale.to(y.dtype)[..., None]
        return y if self.bias is None else y + self.bias.to(y.dtype)

    def _blended_forward(self, x: torch.Tensor) -> torch.Tensor:
        """``F.linear`` of ``x + λ (q(x) - x).detach()`` and ``w + λ (q(w) - w).detach()``."""
        w = self._latent()
        lam = self._quant_lambda
        w = w + lam.to(w.dtype) * (dequantized_weight(w, self.group_size, self.scale_dtype) - w
                                   ).detach()
        if self.activations == "int8":
            q, scale = quantize_activations(x)
            x_q = (q.float() * scale[..., None]).to(x.dtype)
            x = x + lam.to(x.dtype) * (x_q - x).detach()
        return F.linear(x, w.to(x.dtype), None if self.bias is None else self.bias.to(x.dtype))

    def train(self, mode: bool = True) -> BitLinear:
        """Training mode uses the latent weights (the packed ones are dropped); eval packs them.

        Parameters
        ----------
        mode : bool
            True for training mode, False for eval mode (what ``eval()`` passes).

        Returns
        -------
        BitLinear
            The layer itself.
        """
        super().train(mode)
        if self.weight is not None:
            if mode:
                self.weight_packed = self.weight_scale = None
                self._packed_from = self._packed_sample = None
            else:
                self._refresh()
        return self

    def freeze(self, *, keep_latent: bool = True) -> BitLinear:
        """Pack the weights and switch to eval mode (as ``eval()``); returns the layer.

        Parameters
        ----------
        keep_latent : bool
            False releases the latent float weights: the layer then holds only the
            packed trits and scales (about 16x less memory than float32), saves them in
            its ``state_dict``, and runs in eval mode only (a training-mode forward
            raises ``RuntimeError``).

        Examples
        --------
        >>> from tritnum.torch import BitLinear
        >>> layer = BitLinear(256, 64).freeze(keep_latent=False)
        >>> sorted(layer.state_dict())
        ['bias', 'weight_packed', 'weight_scale']
        >>> layer.weight is None, layer.training
        (True, False)
        """
        self.eval()
        if not keep_latent:
            self._persist_packed(True)
        return self

    def unfreeze(self) -> BitLinear:
        """Training mode again, also after ``freeze(keep_latent=False)``; returns the layer.

        With latent weights this is ``train()``. Without them (released by
        :meth:`freeze`, or loaded packed) the latent weights are **rebuilt from the trits
        and scales** (the float weights before the freeze are gone): in each scale's
        group the nonzero trits become ``±scale / (fraction of nonzero trits)``, in
        float32, chosen so that quantizing them gives the same trits and scales back
        (the scale to the last bit where a float32 value reaches it, else within one
        float32 step), so the training forward starts from the frozen layer's weights.
        A group of zero trits stays zero. Emits a ``UserWarning`` saying so.

        Returns
        -------
        BitLinear
            The layer itself, in training mode, with latent weights.

        Examples
        --------
        >>> import torch, warnings
        >>> from tritnum.torch import BitLinear
        >>> layer = BitLinear(64, 8)
        >>> packed = layer.freeze(keep_latent=False).ternary_weight()
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     _ = layer.unfreeze()
        >>> layer.training, layer.weight.shape
        (True, torch.Size([8, 64]))
        >>> bool((layer.ternary_weight().packed.unpack() == packed.packed.unpack()).all())
        True
        """
        if self.weight is None:
            t = self.ternary_weight()
            latent = latent_from_trits(unpack(t.packed), t.scales, self.group_size)
            device = self.weight_packed.device
            self._persist_packed(False)
            with torch.no_grad():
                self.weight.copy_(torch.from_numpy(latent).to(device))
            warnings.warn("BitLinear.unfreeze rebuilt the latent weights released by "
                          "freeze(keep_latent=False) from the trits and scales "
                          "(the float weights before the freeze are gone)", UserWarning,
                          stacklevel=2)
        return self.train()

    def refresh(self) -> BitLinear:
        """Pack the latent weights again, or check the packed ones again; returns the layer.

        Eval mode notices writes through ``.data`` by a sample of the values (see the
        class notes), which an edit of single elements can miss: call ``refresh()``
        after such an edit. With latent weights it packs them again (in eval mode; in
        training mode there is nothing packed); without them (``freeze(keep_latent=
        False)``) it checks the codes of ``weight_packed`` and reads ``weight_scale``
        again.

        Returns
        -------
        BitLinear
            The layer itself.

        Raises
        ------
        InvalidTritsError
            ``weight_packed`` holds a code no encoder writes (layers without latent
            weights).

        Examples
        --------
        >>> import torch
        >>> from tritnum.torch import BitLinear
        >>> _ = torch.manual_seed(0)
        >>> layer = BitLinear(64, 8, bias=False).eval()
        >>> x = torch.randn(1, 64)
        >>> with torch.no_grad():
        ...     _ = layer(x)
        ...     layer.weight.data[3, 5] = 100.0  # one element, through .data
        ...     y = layer.refresh()(x)
        >>> fresh = BitLinear(64, 8, bias=False).eval()
        >>> with torch.no_grad():
        ...     _ = fresh.weight.copy_(layer.weight)
        ...     torch.equal(y, fresh(x))
        True
        """
        _ops.forget(self.weight_packed)
        if self.weight is not None:
            if self.weight_packed is not None:
                self._pack()
        elif self.weight_packed is not None:
            w = _ops.ternary_weight(self.weight_packed, self.weight_scale, self.in_features,
                                    self.group_size)
            ensure_valid(w.packed, "cuda" if self.weight_packed.is_cuda else "cpu")
        return self

    def ternary_weight(self) -> TernaryTensor:
        """The eval-mode weights as a :class:`tritnum.TernaryTensor` ("2bit") on the host.

        A NumPy-backed copy (its ``unpack()`` gives NumPy arrays), also for a layer on
        the GPU; the layer is not changed.

        Examples
        --------
        >>> import torch
        >>> from tritnum.torch import BitLinear
        >>> BitLinear(64, 8, group_size=32).ternary_weight()
        TernaryTensor(shape=(8, 64), format='2bit', group_size=32, 3.0 bits/weight, 192 bytes)
        """
        if self.weight is not None:
            w = self.weight.detach().cpu()
            return _rounded(quantize((w.float() if w.dtype == torch.bfloat16 else w).numpy(),
                                     group_size=self.group_size), self.scale_dtype)
        packed = PackedTrits(self.weight_packed.cpu().numpy(),
                             (self.out_features, self.in_features), "2bit")
        return TernaryTensor(packed, self.weight_scale.cpu().numpy(), self.group_size)

    def extra_repr(self) -> str:
        """The sizes and options, as ``nn.Linear`` shows them."""
        released = ", latent weights released" if self.weight is None else ""
        knobs = "".join(f", {name}={value!r}" for name, value, default in (
            ("norm", self.norm, None), ("scale_dtype", self.scale_dtype, "float32"))
            if value != default)
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, group_size={self.group_size}, "
                f"activations={self.activations!r}{knobs}{released}")

    # ---------------------------------------------------------------- packed state
    def _latent(self) -> nn.Parameter:
        if self.weight is None:
            raise RuntimeError("this BitLinear's latent weights were released by "
                               "freeze(keep_latent=False): it runs in eval mode only")
        return self.weight

    def _refresh(self) -> None:
        """Pack the latent weights unless the buffers already hold them.

        Held means: the same storage, version, dtype and device, and the same values at
        the sampled positions (writes through ``.data`` bump no version).
        """
        if self.weight is not None and (self.weight_packed is None
                                        or self._packed_from != _stamp(self.weight)
                                        or not self._packed_sample.same()):
            self._pack()

    @torch.no_grad()
    def _pack(self) -> None:
        w = self.weight
        t = _rounded(quantize(w.detach(), group_size=self.group_size), self.scale_dtype)
        data = t.packed.data
        self.weight_packed = (torch.as_tensor(data, device=w.device) if w.device.type == "cuda"
                              else torch.tensor(data))
        self.weight_scale = torch.tensor(t.scales, device=w.device)
        self._packed_from = _stamp(w)
        self._packed_sample = _ops.Sample(w)

    def _sync(self) -> None:
        """After the latent weights changed: pack them again if eval mode holds packed ones."""
        if self.weight is not None and self.weight_packed is not None:
            self._pack()

    def _persist_packed(self, released: bool) -> None:
        """Release the latent weights (the packed buffers are the state), or bring them back.

        Brought back, the latent weights are uninitialized until loaded.
        """
        if released:
            self.weight = None
        else:
            self.weight = nn.Parameter(torch.empty((self.out_features, self.in_features),
                                                   device=self.weight_packed.device))
        for name in _PACKED:
            self.register_buffer(name, getattr(self, name), persistent=released)

    def _apply(self, fn: Any, recurse: bool = True) -> BitLinear:
        scale = self.weight_scale
        super()._apply(fn, recurse)
        if self.weight is not None:
            self._sync()  # from the converted latent weights
        elif scale is not None:  # the scales stay float32 through .half() and the like
            self.weight_scale = scale.to(self.weight_packed.device)
        return self

    def _load_from_state_dict(self, state_dict: Any, prefix: str, *args: Any) -> None:
        packed = state_dict.get(prefix + "weight_packed")
        if packed is not None and self.weight is not None:
            self.weight_packed = torch.zeros(  # placeholders of the right shape, loaded below
                get_format("2bit").data_shape((self.out_features, self.in_features)),
                dtype=torch.uint8, device=self.weight.device)
            groups = () if self.group_size is None else (
                self.out_features, self.in_features // self.group_size)
            self.weight_scale = torch.zeros(groups, device=self.weight.device)
            self._persist_packed(True)
            self.train(False)
        elif packed is None and self.weight is None and prefix + "weight" in state_dict:
            self._persist_packed(False)
        super()._load_from_state_dict(state_dict, prefix, *args)
        self._sync()
