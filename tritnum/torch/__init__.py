"""PyTorch layers on tritnum: ternary quantization-aware training and packed inference.

Needs PyTorch (``pip install torch``, or from a tritnum checkout
``pip install -e '.[torch]'``); ``import tritnum`` never imports torch, this module does.

- :class:`BitLinear`: an ``nn.Module`` that trains BitNet b1.58 ternary weights
  (absmean weights, int8 activations per token, straight-through gradients) and, in
  eval mode, runs tritnum's packed kernels.
- :func:`convert`: replaces the ``nn.Linear`` layers of a model by BitLinear ones.
- :func:`export`: a model's weights as TernaryTensors and NumPy arrays, for
  :func:`tritnum.io.write_gguf`; :func:`load_exported` puts them back into a model.
- :func:`freeze` / :func:`unfreeze`: a whole model to packed inference and back.
- gradual quantization (BitNet's training recipe): :func:`set_quant_lambda` and a
  warm-up :class:`QuantSchedule`.
- gradient compression with random ternary sketches (:func:`tritnum.compress`) in
  training: :func:`register_compression` (a :class:`GradientCompression`) on an
  optimizer or a module, :func:`ddp_comm_hook` with a :class:`CompressionState` for DDP.

>>> import torch
>>> from tritnum.torch import convert
>>> model = convert(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
...                                     torch.nn.Linear(32, 4)))
>>> [type(m).__name__ for m in model]
['BitLinear', 'ReLU', 'Linear']
"""

from __future__ import annotations

try:
    import torch as _torch  # noqa: F401  (the extra's one dependency, named if missing)
except ImportError as error:
    from .._extras import missing

    raise ImportError(missing("tritnum.torch", "torch")) from error

from .compress import (
    CompressionState,
    GradientCompression,
    ddp_comm_hook,
    register_compression,
)
from .convert import convert, export, freeze, load_exported, set_quant_lambda, unfreeze
from .layers import BitLinear
from .schedule import QuantSchedule

__all__ = ["BitLinear", "CompressionState", "GradientCompression", "QuantSchedule", "convert",
           "ddp_comm_hook", "export", "freeze", "load_exported", "register_compression",
           "set_quant_lambda", "unfreeze"]
