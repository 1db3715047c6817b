"""Whole models: ``convert`` swaps in BitLinear layers, ``export`` takes the weights out.

``load_exported`` puts them back; ``freeze``/``unfreeze`` and ``set_quant_lambda`` act on
all BitLinear layers at once.
"""

from __future__ import annotations

import fnmatch
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from ..errors import FormatError, ShapeMismatchError
from ..quantize import TernaryTensor
from ..typing import Activations
from . import _hf
from .layers import BitLinear, _quant_lambda, packed_buffers

__all__ = ["Selector", "convert", "export", "freeze", "load_exported", "set_quant_lambda",
           "unfreeze"]

# Internal API: the private names other modules use (tests/test_architecture_seams.py):
# schedule.py (the model argument checked as here).
_INTERNAL_API = ("_module",)

Selector = str | Iterable[str] | Callable[[str, nn.Module], bool] | None
"""Which modules: a glob on qualified names (``"encoder.*"``), several, or ``f(name, module)``."""

HEAD_NAMES = ("lm_head",)  # output projections BitNet keeps in full precision, by name


def _matcher(selector: Selector, what: str) -> Callable[[str, nn.Module], bool]:
    if callable(selector):
        return selector
    patterns = (selector,) if isinstance(selector, str) else tuple(selector or ())
    if not all(isinstance(p, str) for p in patterns):
        raise TypeError(f"{what} must be a glob, a sequence of globs or a callable "
                        f"(name, module) -> bool, got {selector!r}")
    return lambda name, module: any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _module(model: object, caller: str) -> nn.Module:
    """``model`` if it is a ``torch.nn.Module``, else TypeError saying what ``caller`` takes."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"{caller} takes a torch.nn.Module (a model or a layer), got "
                        f"{type(model).__name__}")
    return model


def _heads(linears: list[tuple[str, nn.Module]]) -> set[str]:
    """The output layer (the last Linear registered) and layers named like ``lm_head``."""
    heads = {name for name, _ in linears if name.rpartition(".")[2] in HEAD_NAMES}
    if linears:
        last = linears[-1][1]
        heads.update(name for name, m in linears if m is last)
    return heads


def convert(model: nn.Module, *, include: Selector = None, exclude: Selector = None,
            keep_head: bool = True, group_size: int | None = None,
            activations: Activations = "int8", norm: str | None = None,
            norm_eps: float = 1e-6, scale_dtype: str = "float32") -> nn.Module:
    """Replace the ``nn.Linear`` layers of ``model`` by :class:`BitLinear` ones, in place.

    Each replaced layer shares its ``nn.Linear``'s parameters
    (:meth:`BitLinear.from_linear`), so optimizers built before still work and a
    trained float model converts for quantization-aware fine-tuning. Only modules of
    type ``nn.Linear`` itself are replaced, not subclasses (e.g. the ``out_proj`` of
    ``nn.MultiheadAttention``, whose weights are read without calling it). Embeddings
    are not linear layers and stay as they are.

    transformers' BitNet layers (``BitLinear`` and ``AutoBitLinear`` of
    ``transformers.integrations.bitnet``, in a model loaded with the ``bitnet``
    quantization) are replaced too, whatever ``keep_head`` and the options of the new
    layers say, by a BitLinear that computes the same (the same trits; outputs within
    the rounding of the int8 activations), their ``rms_norm`` moved into it:

    - offline (packed or ternary weights with a ``weight_scale``): a layer holding
      only the packed trits and the scale ``gamma`` (``1 / weight_scale`` for
      ``BitLinear``, whose output transformers divides; ``weight_scale`` for
      ``AutoBitLinear``, which multiplies, the bias included), in eval mode, without
      gradients (``BitLinear.freeze(keep_latent=False)``'s state);
    - online (``AutoBitLinear`` with float master weights): a trainable layer sharing
      them, whose ``scale_dtype`` is their dtype, as transformers dequantizes in it.

    Parameters
    ----------
    model : nn.Module
    include : glob, sequence of globs, or callable, optional
        Only layers whose qualified name (``model.named_modules()``) matches;
        default: every ``nn.Linear``. A callable gets ``(name, module)``.
    exclude : glob, sequence of globs, or callable, optional
        Layers left as they are (over ``include``).
    keep_head : bool
        Leave the output head in full precision, as BitNet does: the last
        ``nn.Linear`` registered in the model (its output layer for models built in
        order) and any layer named ``lm_head``.
    group_size, activations, norm, norm_eps, scale_dtype
        Of the new layers (see :class:`BitLinear`).

    Returns
    -------
    nn.Module
        ``model``; a new BitLinear when ``model`` itself is a converted ``nn.Linear``.

    Raises
    ------
    TypeError
        ``model`` is not a ``torch.nn.Module``; an ``include``/``exclude`` of another type.
    InvalidTritsError
        A transformers BitNet layer's weight holds a value that is not a trit (a packed
        code 3).

    Examples
    --------
    >>> import torch
    >>> from tritnum.torch import convert
    >>> mlp = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8),
    ...                           torch.nn.Linear(8, 2))
    >>> [type(m).__name__ for m in convert(mlp, exclude="0")]
    ['Linear', 'BitLinear', 'Linear']
    """
    model = _module(model, "convert")
    included = _matcher(include if include is not None else "*", "include")
    excluded = _matcher(exclude, "exclude")
    modules = list(model.named_modules(remove_duplicate=False))
    linears = [(name, m) for name, m in modules if type(m) is nn.Linear]
    kept = _heads(linears) if keep_head else set()
    bitnet = [(name, m) for name, m in modules if _hf.is_bitnet_layer(m)]
    new: dict[int, BitLinear] = {}  # a Linear registered twice becomes one BitLinear
    for name, m in linears + bitnet:
        if name in kept or not included(name, m) or excluded(name, m):
            continue
        if id(m) not in new:
            new[id(m)] = _hf.to_bitlinear(m) if _hf.is_bitnet_layer(m) else (
                BitLinear.from_linear(m, group_size=group_size, activations=activations,
                                      norm=norm, norm_eps=norm_eps, scale_dtype=scale_dtype))
        if not name:
            return new[id(m)]
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent), child, new[id(m)])
    return model


def _array(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy().copy()


def export(model: nn.Module) -> dict[str, TernaryTensor | np.ndarray]:
    """The model's state as tritnum and NumPy objects, named as in its ``state_dict``.

    Each :class:`BitLinear` gives ``<name>.weight``: its eval-mode weights as a
    "2bit" :class:`~tritnum.TernaryTensor` (packed from the latent weights when the
    layer is in training mode; the model is not changed). Every other entry
    (biases, norms, embeddings, layers left in float, buffers) is a NumPy copy in its
    dtype (bfloat16 as float32, NumPy has none). The dict is what
    :func:`tritnum.io.write_gguf` takes; :func:`tritnum.save` takes its TernaryTensors.

    Parameters
    ----------
    model : torch.nn.Module
        The model, its :class:`BitLinear` layers in either mode.

    Returns
    -------
    dict of str to TernaryTensor or numpy.ndarray
        Every ``state_dict`` entry, by name, in its order.

    Raises
    ------
    TypeError
        ``model`` is not a ``torch.nn.Module``.
    ValueError
        A model with tensors on the meta device (shapes without values).

    Examples
    --------
    >>> import torch
    >>> from tritnum.torch import convert, export
    >>> model = convert(torch.nn.Sequential(torch.nn.Linear(256, 64), torch.nn.LayerNorm(64),
    ...                                     torch.nn.Linear(64, 4)))
    >>> {name: type(v).__name__ for name, v in export(model).items()}
    {'0.weight': 'TernaryTensor', '0.bias': 'ndarray', '1.weight': 'ndarray',
     '1.bias': 'ndarray', '2.weight': 'ndarray', '2.bias': 'ndarray'}
    """
    model = _module(model, "export")
    state = model.state_dict()
    meta = [key for key, value in state.items() if value.is_meta]
    if meta:  # no values to take out: torch's copy would raise NotImplementedError
        raise ValueError(f"export needs a model with values, but {meta[0]!r} is on the meta "
                         "device (no data): load or initialize it first (model.to_empty(), "
                         "load_state_dict)")
    layers = {name: m for name, m in model.named_modules(remove_duplicate=False)
              if isinstance(m, BitLinear)}
    out: dict[str, TernaryTensor | np.ndarray] = {}
    for key, value in state.items():
        owner, _, leaf = key.rpartition(".")
        layer = layers.get(owner)
        if layer is not None and leaf in ("weight", "weight_packed", "weight_scale"):
            name = f"{owner}.weight" if owner else "weight"
            if name not in out:
                out[name] = layer.ternary_weight()
        else:
            out[key] = _array(value)
    return out


def _bitlinears(model: nn.Module) -> dict[str, BitLinear]:
    """The model's BitLinear layers by qualified name (shared ones under each name)."""
    return {name: m for name, m in model.named_modules(remove_duplicate=False)
            if isinstance(m, BitLinear)}


def _tensor_kind(dtype: Any) -> str:
    """'b', 'i' or 'f' (complex as 'f') for a NumPy or torch dtype."""
    if isinstance(dtype, torch.dtype):
        return "b" if dtype == torch.bool else "f" if (dtype.is_floating_point
                                                       or dtype.is_complex) else "i"
    kind = np.dtype(dtype).kind
    return "i" if kind == "u" else "f" if kind == "c" else kind


def _packed_state(key: str, value: object, layer: BitLinear) -> dict[str, torch.Tensor]:
    """A BitLinear's ``weight_packed``/``weight_scale`` from ``value``, checked against it."""
    if not isinstance(value, TernaryTensor):
        raise TypeError(f"{key!r} is a BitLinear's weight: load_exported takes a "
                        f"TernaryTensor for it (what export gives), got {type(value).__name__}")
    shape = (layer.out_features, layer.in_features)
    if value.shape != shape:
        raise ShapeMismatchError(f"{key!r}: the layer's weight is {shape}, the tensor "
                                 f"{value.shape}", expected=shape, actual=value.shape)
    if value.group_size != layer.group_size:
        raise ShapeMismatchError(
            f"{key!r}: the layer has group_size={layer.group_size}, the tensor "
            f"group_size={value.group_size} (make the layer with the tensor's)",
            expected=layer.group_size, actual=value.group_size)
    device = layer.weight.device if layer.weight is not None else layer.weight_packed.device
    packed, scale = packed_buffers(value, device)
    return {"weight_packed": packed, "weight_scale": scale}


def load_exported(model: nn.Module, tensors: Mapping[str, TernaryTensor | np.ndarray], *,
                  strict: bool = True) -> Any:
    """Load what :func:`export` gave (or a file of it) back into a converted model, in place.

    The inverse of :func:`export` (not ``torch.load`` or :func:`tritnum.load`, which
    read files): each :class:`BitLinear`'s ``<name>.weight`` is a
    :class:`~tritnum.TernaryTensor` (any format, "2bit" as export gives it), loaded as
    its packed weights and scales: the layer is then frozen without latent weights
    (``freeze(keep_latent=False)``'s state, eval mode; :func:`unfreeze` rebuilds them
    to train on). Every other ``state_dict`` entry (biases, norms, embeddings, float
    layers, buffers) is an array (NumPy, torch, or anything ``numpy.asarray`` takes)
    copied into the model's tensor in its dtype and device. Exported and loaded back
    into the same architecture, the model computes bit for bit what it did in eval mode.

    Everything is checked before anything is loaded: an error leaves the model as it
    was.

    Parameters
    ----------
    model : torch.nn.Module
        The model, converted (:func:`convert`) as the exported one was.
    tensors : mapping of str to TernaryTensor or array
        By ``state_dict`` name, as :func:`export` or :func:`tritnum.load` give them.
    strict : bool
        Refuse keys the model has and ``tensors`` lacks, and keys it does not have.
        False loads what matches and reports the rest.

    Returns
    -------
    NamedTuple
        ``missing_keys`` and ``unexpected_keys`` (lists of names), as
        ``torch.nn.Module.load_state_dict`` returns them.

    Raises
    ------
    TypeError
        ``model`` is not a ``torch.nn.Module``; a BitLinear's weight that is not a
        TernaryTensor, a TernaryTensor for another entry, or an array of another kind
        (float, integer, bool) than the model's tensor; the key is named.
    FormatError
        With ``strict``: a missing or an unexpected key, named.
    ShapeMismatchError
        A shape, or a TernaryTensor's ``group_size``, unlike the layer's; the key is
        named.

    Examples
    --------
    >>> import torch
    >>> from tritnum.torch import convert, export, load_exported
    >>> def make():
    ...     return convert(torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(),
    ...                                        torch.nn.Linear(32, 4)))
    >>> trained, fresh = make().eval(), make()
    >>> load_exported(fresh, export(trained))
    <All keys matched successfully>
    >>> x = torch.randn(2, 64)
    >>> torch.equal(fresh.eval()(x), trained(x))
    True
    """
    model = _module(model, "load_exported")
    if not isinstance(tensors, Mapping):
        raise TypeError(f"load_exported takes a mapping of names to tensors (what export "
                        f"gives), got {type(tensors).__name__}")
    layers = _bitlinears(model)
    expected: dict[str, tuple[str, Any]] = {}  # key -> (kind, BitLinear or model tensor)
    for key, value in model.state_dict(keep_vars=True).items():
        owner, _, leaf = key.rpartition(".")
        layer = layers.get(owner)
        if layer is not None and leaf in ("weight", "weight_packed", "weight_scale"):
            expected[f"{owner}.weight" if owner else "weight"] = ("ternary", layer)
        else:
            expected[key] = ("array", value)
    missing = [key for key in expected if key not in tensors]
    unexpected = [key for key in tensors if key not in expected]
    if strict and (missing or unexpected):
        what = (f"{missing[0]!r} is missing" if missing else
                f"{unexpected[0]!r} is not in the model")
        raise FormatError(f"load_exported: {what} ({len(missing)} missing, {len(unexpected)} "
                          "unexpected; strict=False loads the rest)")
    state: dict[str, torch.Tensor] = {}
    for key, (kind, target) in expected.items():
        if key not in tensors:
            continue
        value = tensors[key]
        if kind == "ternary":
            owner = key.rpartition(".")[0]
            prefix = f"{owner}." if owner else ""
            state.update({prefix + leaf: t for leaf, t in
                          _packed_state(key, value, target).items()})
            continue
        if isinstance(value, TernaryTensor):
            raise TypeError(f"{key!r} is not a BitLinear's weight: an array, not a "
                            "TernaryTensor (convert the model as the exported one was)")
        array = value if isinstance(value, torch.Tensor) else np.asarray(value)
        if tuple(array.shape) != tuple(target.shape):
            raise ShapeMismatchError(f"{key!r}: the model's is {tuple(target.shape)}, the "
                                     f"tensor {tuple(array.shape)}",
                                     expected=tuple(target.shape), actual=tuple(array.shape))
        if _tensor_kind(array.dtype) != _tensor_kind(target.dtype):
            raise TypeError(f"{key!r}: the model holds {target.dtype}, the tensor "
                            f"{array.dtype} (another kind of number)")
        state[key] = array if isinstance(array, torch.Tensor) else torch.from_numpy(
            np.array(array))
    result = model.load_state_dict(state, strict=False)
    return type(result)(missing, unexpected)


def freeze(model: nn.Module, *, keep_latent: bool = True) -> nn.Module:
    """Eval mode for the model and :meth:`BitLinear.freeze` for each of its BitLinear layers.

    Parameters
    ----------
    model : torch.nn.Module
        The model (or one layer).
    keep_latent : bool
        False releases the latent float weights of every BitLinear: the model keeps
        only packed trits and scales (about 16x less memory than float32), saves them in
        its ``state_dict``, and runs in eval mode until :func:`unfreeze`.

    Returns
    -------
    torch.nn.Module
        ``model``, in eval mode.

    Raises
    ------
    TypeError
        ``model`` is not a ``torch.nn.Module``.

    Examples
    --------
    >>> import torch
    >>> from tritnum.torch import convert, freeze
    >>> model = freeze(convert(torch.nn.Sequential(torch.nn.Linear(64, 32),
    ...                                            torch.nn.Linear(32, 4))), keep_latent=False)
    >>> sorted(model.state_dict())
    ['0.bias', '0.weight_packed', '0.weight_scale', '1.bias', '1.weight']
    """
    model = _module(model, "freeze").eval()
    for layer in set(_bitlinears(model).values()):
        layer.freeze(keep_latent=keep_latent)
    return model


def unfreeze(model: nn.Module) -> nn.Module:
    """Training mode for the model; BitLinear layers without latent weights rebuild them.

    The layers that :func:`freeze` (``keep_latent=False``), :func:`load_exported` or a
    packed ``state_dict`` left with packed weights only get latent weights **rebuilt
    from their trits and scales** (:meth:`BitLinear.unfreeze`: quantizing them gives the
    same trits and scales back, so training starts from the frozen model); the float
    weights from before the freeze are gone. One ``UserWarning`` says how many layers
    were rebuilt.

    Parameters
    ----------
    model : torch.nn.Module
        The model (or one layer).

    Returns
    -------
    torch.nn.Module
        ``model``, in training mode.

    Raises
    ------
    TypeError
        ``model`` is not a ``torch.nn.Module``.

    Examples
    --------
    >>> import torch, warnings
    >>> from tritnum.torch import convert, freeze, unfreeze
    >>> model = freeze(convert(torch.nn.Sequential(torch.nn.Linear(64, 32),
    ...                                            torch.nn.Linear(32, 4))), keep_latent=False)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     _ = unfreeze(model)
    >>> str(caught[0].message)[:54]
    'unfreeze rebuilt the latent weights of 1 BitLinear lay'
    >>> model.training, model[0].weight.shape
    (True, torch.Size([32, 64]))
    """
    model = _module(model, "unfreeze")
    layers = set(_bitlinears(model).values())
    released = [layer for layer in layers if layer.weight is None]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # one warning for the model, below
        for layer in released:
            layer.unfreeze()
    model.train()
    if released:
        warnings.warn(f"unfreeze rebuilt the latent weights of {len(released)} BitLinear "
                      "layer(s) from their trits and scales (the float weights before the "
                      "freeze are gone)", UserWarning, stacklevel=2)
    return model


def set_quant_lambda(model: nn.Module, value: float) -> nn.Module:
    """Set :attr:`BitLinear.quant_lambda` of every BitLinear in ``model``; returns it.

    ``w + λ (q(w) - w).detach()`` and the same for the activations in training mode:
    0 trains the float model, 1 (the default) fully quantized. :class:`QuantSchedule`
    calls this per step from a warm-up schedule.

    Parameters
    ----------
    model : torch.nn.Module
        The model (or one layer).
    value : float
        λ, in [0, 1].

    Returns
    -------
    torch.nn.Module
        ``model``.

    Raises
    ------
    TypeError
        ``model`` is not a ``torch.nn.Module``, or ``value`` not a number.
    ValueError
        ``value`` outside [0, 1].

    Examples
    --------
    >>> import torch
    >>> from tritnum.torch import convert, set_quant_lambda
    >>> model = set_quant_lambda(convert(torch.nn.Sequential(torch.nn.Linear(8, 8),
    ...                                                      torch.nn.Linear(8, 2))), 0.25)
    >>> model[0].quant_lambda
    0.25
    """
    model = _module(model, "set_quant_lambda")
    value = _quant_lambda(value)
    for layer in set(_bitlinears(model).values()):
        layer.quant_lambda = value
    return model
