"""transformers' BitNet layers (``transformers.integrations.bitnet``) as tritnum's BitLinear.

Recognised by their class's module and name, so that transformers is never imported here:

- ``BitLinear`` (offline, ``linear_class="bitlinear"``): a packed uint8 ``weight`` of
  shape ``(out / 4, in)`` whose byte ``[r, c]`` holds, in bits ``2i..2i+1`` (LSB first),
  ``W[i * out / 4 + r, c] + 1``; a ``weight_scale`` of one value that the output is
  **divided** by (``1 / gamma``).
- ``AutoBitLinear`` offline (``linear_class="autobitlinear"``): ternary values in its
  ``weight`` (transformers unpacks them on load) and a ``weight_scale`` (``gamma``) that
  the output, bias included, is **multiplied** by. Online: float master weights that
  transformers' ``WeightQuant`` ternarizes in every forward (absmean, as tritnum's), a
  trainable layer.
- ``rms_norm`` (``use_rms_norm``): moved into the new layer as it is.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..errors import InvalidTritsError
from ..io import from_hf_bitnet, to_hf_bitnet
from ..packing import pack
from ..quantize import TernaryTensor
from .layers import BitLinear

__all__ = ["is_bitnet_layer", "to_bitlinear"]

_MODULE = "transformers.integrations.bitnet"
_CLASSES = ("BitLinear", "AutoBitLinear")
_SCALE_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16"}


def is_bitnet_layer(module: nn.Module) -> bool:
    """Whether ``module`` is one of transformers' BitNet layers."""
    kind = type(module)
    return kind.__module__ == _MODULE and kind.__name__ in _CLASSES


def _hf_packed(weight: torch.Tensor) -> np.ndarray:
    """An offline AutoBitLinear's ternary ``weight``, packed again in transformers' layout.

    transformers unpacked it on load; :func:`tritnum.io.from_hf_bitnet` reads it packed.
    """
    values = weight.detach().float().cpu().numpy()
    bad = np.argwhere((values != -1) & (values != 0) & (values != 1))
    if len(bad):
        index = tuple(int(i) for i in bad[0])
        raise InvalidTritsError(f"AutoBitLinear's offline weight holds {values[index]!r} at "
                                f"{index}, not a trit (-1, 0, 1)")
    ones = TernaryTensor(pack(values.astype(np.int8), "2bit"), np.float32(1))
    return to_hf_bitnet(ones, linear_class="autobitlinear", scale_dtype="float32")[0]


def to_bitlinear(module: nn.Module) -> BitLinear:
    """A tritnum BitLinear computing what the transformers BitNet ``module`` computes.

    The offline weights and scale go through :func:`tritnum.io.from_hf_bitnet` (the scale
    convention of the class applied once, the bias of ``AutoBitLinear`` multiplied by its
    scale).
    """
    online = type(module).__name__ == "AutoBitLinear" and module.online_quant
    if online:
        layer = BitLinear.from_linear(module, scale_dtype=_SCALE_DTYPES.get(
            module.weight.dtype, "float32"))
    else:
        auto = type(module).__name__ == "AutoBitLinear"
        packed = _hf_packed(module.weight) if auto else module.weight.detach().cpu()
        scale = module.weight_scale.detach().cpu()
        linear_class = "autobitlinear" if auto else "bitlinear"
        if module.bias is None:
            tw, bias = from_hf_bitnet(packed, scale, linear_class=linear_class), None
        else:
            tw, bias = from_hf_bitnet(packed, scale, linear_class=linear_class,
                                      bias=module.bias.detach().cpu())
        layer = BitLinear._from_ternary(tw, None if bias is None else torch.from_numpy(bias),
                                        module.weight.device)
    if module.rms_norm is not None:
        layer.norm = "rms"
        layer.rms_norm = module.rms_norm
    return layer
