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
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .._formats import get_format
from .._validate import choice
from ..errors import ShapeMismatchError
from ..packing import PackedTrits, ensure_valid
from ..quantize import TernaryTensor, quantize
from ..typing import Activations
from . import _ops
from ._quantize import ste_activations, ste_weight

__all__ = ["ACTIVATIONS", "BitLinear"]

ACTIVATIONS = ("int8", "float")
_PACKED = ("weight_packed", "weight_scale")


def _group_size(group_size: int | None, in_features: int) -> int | None:
    if group_size is None:
        return None
    group_size = operator.index(group_size)
    if group_size < 1 or in_features % group_size:
        raise ShapeMismatchError(
            f"group_size must divide in_features ({in_features}), got {group_size}",
            expected=f"a divisor of {in_features}", actual=group_size)
    return group_size


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
    - :meth:`train` goes back to the latent weights and drops the packed ones.

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
    device, dtype : optional
        Of the latent parameters, as for ``nn.Linear``.

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
    weight: nn.Parameter | None

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
                 device: Any = None, dtype: Any = None) -> None:
        factory = {"device": device, "dtype": dtype}
        super().__init__()
        self.in_features = operator.index(in_features)
        self.out_features = operator.index(out_features)
        self.group_size = _group_size(group_size, self.in_features)
        self.activations = choice(activations, "activations", ACTIVATIONS)
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

    @classmethod
    def from_linear(cls, linear: nn.Linear, *, group_size: int | None = None,
                    activations: Activations = "int8") -> BitLinear:
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
                    group_size=group_size, activations=activations, device="meta")
        layer.weight = linear.weight
        layer.bias = linear.bias
        return layer.train(linear.training)

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
        if compiling or (torch.is_grad_enabled() and (
                x.requires_grad or (self.bias is not None and self.bias.requires_grad))):
            return _ops.ternary_linear(*args)  # the operator, with its backward
        return _ops.frozen_linear(*args)

    def _train_forward(self, x: torch.Tensor) -> torch.Tensor:
        w_q, w_scale = ste_weight(self._latent(), self.group_size)
        a, x_scale = ste_activations(x) if self.activations == "int8" else (x, None)
        y = F.linear(a, w_q)
        if w_scale is not None:
            y = y * w_scale.to(y.dtype)
        if x_scale is not None:
            y = y * x_scale.to(y.dtype)[..., None]
        return y if self.bias is None else y + self.bias.to(y.dtype)

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
            return quantize((w.float() if w.dtype == torch.bfloat16 else w).numpy(),
                            group_size=self.group_size)
        packed = PackedTrits(self.weight_packed.cpu().numpy(),
                             (self.out_features, self.in_features), "2bit")
        return TernaryTensor(packed, self.weight_scale.cpu().numpy(), self.group_size)

    def extra_repr(self) -> str:
        """The sizes and options, as ``nn.Linear`` shows them."""
        released = ", latent weights released" if self.weight is None else ""
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, group_size={self.group_size}, "
                f"activations={self.activations!r}{released}")

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
        t = quantize(w.detach(), group_size=self.group_size)
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
