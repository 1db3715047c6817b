"""Whole models: ``convert`` swaps in BitLinear layers, ``export`` takes the weights out."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable

import numpy as np
import torch
from torch import nn

from ..quantize import TernaryTensor
from ..typing import Activations
from .layers import BitLinear

__all__ = ["Selector", "convert", "export"]

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
            activations: Activations = "int8") -> nn.Module:
    """Replace the ``nn.Linear`` layers of ``model`` by :class:`BitLinear` ones, in place.

    Each replaced layer shares its ``nn.Linear``'s parameters
    (:meth:`BitLinear.from_linear`), so optimizers built before still work and a
    trained float model converts for quantization-aware fine-tuning. Only modules of
    type ``nn.Linear`` itself are replaced, not subclasses (e.g. the ``out_proj`` of
    ``nn.MultiheadAttention``, whose weights are read without calling it). Embeddings
    are not linear layers and stay as they are.

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
    group_size, activations
        Of the new layers (see :class:`BitLinear`).

    Returns
    -------
    nn.Module
        ``model``; a new BitLinear when ``model`` itself is a converted ``nn.Linear``.

    Raises
    ------
    TypeError
        ``model`` is not a ``torch.nn.Module``; an ``include``/``exclude`` of another type.

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
    linears = [(name, m) for name, m in model.named_modules(remove_duplicate=False)
               if type(m) is nn.Linear]
    kept = _heads(linears) if keep_head else set()
    new: dict[int, BitLinear] = {}  # a Linear registered twice becomes one BitLinear
    for name, m in linears:
        if name in kept or not included(name, m) or excluded(name, m):
            continue
        if id(m) not in new:
            new[id(m)] = BitLinear.from_linear(m, group_size=group_size,
                                               activations=activations)
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
