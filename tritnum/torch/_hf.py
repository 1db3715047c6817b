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

from ..errors import InvalidTritsError, ShapeMismatchError
from ..packing import pack
from .layers import BitLinear

__all__ = ["is_bitnet_layer", "to_bitlinear", "unpack_hf"]

_MODULE = "transformers.integrations.bitnet"
_CLASSES = ("BitLinear", "AutoBitLinear")
_SCALE_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16"}


def is_bitnet_layer(module: nn.Module) -> bool:
    """Whether ``module`` is one of transformers' BitNet layers."""
    kind = type(module)
    return kind.__module__ == _MODULE and kind.__name__ in _CLASSES


def _trits(values: np.ndarray, where: str) -> np.ndarray:
    """``values`` as int8 trits, else InvalidTritsError naming the first other value."""
    bad = np.argwhere((values != -1) & (values != 0) & (values != 1))
    if len(bad):
        index = tuple(int(i) for i in bad[0])
        raise InvalidTritsError(f"{where} holds {values[index]!r} at {index}, not a trit "
                                "(-1, 0, 1)")
    return values.astype(np.int8)


def unpack_hf(packed: torch.Tensor, out_features: int) -> np.ndarray:
    """The int8 trits ``(out_features, in)`` of transformers' packed uint8 ``(out / 4, in)``."""
    data = packed.detach().cpu().numpy()
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[0] * 4 != out_features:
        raise ShapeMismatchError(
            f"transformers' BitLinear weight must be uint8 of shape (out_features / 4, "
            f"in_features) = ({out_features / 4:g}, ...), got {data.dtype} {data.shape}",
            expected=(out_features // 4, "in_features"), actual=data.shape)
    codes = (data[None] >> (2 * np.arange(4, dtype=np.uint8))[:, None, None]) & 3
    return _trits(codes.reshape(out_features, -1).astype(np.int8) - 1,
                  "transformers' packed weight (code 3 is invalid)")


def to_bitlinear(module: nn.Module) -> BitLinear:
    """A tritnum BitLinear computing what the transformers BitNet ``module`` computes."""
    online = type(module).__name__ == "AutoBitLinear" and module.online_quant
    if online:
        layer = BitLinear.from_linear(module, scale_dtype=_SCALE_DTYPES.get(
            module.weight.dtype, "float32"))
    else:
        scale = module.weight_scale.detach().float().cpu().reshape(())
        bias = module.bias
        if type(module).__name__ == "BitLinear":
            trits = unpack_hf(module.weight, module.out_features)
            gamma = 1 / scale  # the output is divided by weight_scale
        else:
            trits = _trits(module.weight.detach().float().cpu().numpy(),
                           "AutoBitLinear's offline weight")
            gamma = scale  # multiplied, bias included
            bias = None if bias is None else bias.detach().float() * gamma.to(bias.device)
        device = module.weight.device
        layer = BitLinear(module.in_features, module.out_features, bias is not None,
                          device=device)
        state = {"weight_packed": torch.from_numpy(np.array(pack(trits, "2bit").data)).to(device),
                 "weight_scale": gamma.to(device)}
        if bias is not None:
            state["bias"] = bias.detach().float()
        layer.load_state_dict(state)
        layer.requires_grad_(False)
    if module.rms_norm is not None:
        layer.norm = "rms"
        layer.rms_norm = module.rms_norm
    return layer
