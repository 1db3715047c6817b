"""Interchange with other tools: GGUF models (llama.cpp, bitnet.cpp) and safetensors files.

- :func:`read_gguf` / :func:`write_gguf`: whole GGUF files, tensors with their metadata
  (:class:`GGUFModel`, :class:`GGUFValue`), each tensor in its own type.
- :func:`quantize_gguf`: an F32/F16/BF16 model file to TQ1_0, TQ2_0 or I2_S, streamed.
- :func:`to_gguf_blocks` / :func:`from_gguf_blocks`: one tensor's TQ1_0, TQ2_0 or I2_S
  bytes, byte-exact with llama.cpp and bitnet.cpp.
- :func:`read_safetensors` / :func:`write_safetensors`: float and ternary tensors in the
  format of PyTorch and Hugging Face checkpoints.
- :func:`from_hf_bitnet` / :func:`to_hf_bitnet`: one projection of a Hugging Face
  transformers ``bitnet`` checkpoint (packed trits and ``weight_scale``), exactly.
- :func:`read_hf_bitnet` / :func:`write_hf_bitnet`: whole transformers ``bitnet`` model
  directories (``config.json``, sharded safetensors).
- :func:`convert` / :func:`hf_bitnet_to_gguf`: those models to and from tritnum's own
  files, and to GGUF for llama.cpp (``python -m tritnum convert``); :func:`llama_to_gguf`:
  a Llama model with ternary projections (trained with :mod:`tritnum.torch`) to GGUF.
"""

from .convert import convert, hf_bitnet_to_gguf, llama_to_gguf
from .gguf.blocks import QTYPES, from_gguf_blocks, to_gguf_blocks
from .gguf.file import read_gguf, write_gguf
from .gguf.i2s import LAYOUTS as I2S_LAYOUTS
from .gguf.model import GGUFBlocks, GGUFModel, GGUFReport, TensorReport
from .gguf.quantize import quantize_gguf
from .gguf.values import GGUFValue
from .hf_bitnet import from_hf_bitnet, to_hf_bitnet
from .hf_checkpoint import read_hf_bitnet, write_hf_bitnet
from .safetensors_file import SafetensorsFile, read_safetensors, write_safetensors

__all__ = ["I2S_LAYOUTS", "QTYPES", "GGUFBlocks", "GGUFModel", "GGUFReport", "GGUFValue",
           "SafetensorsFile", "TensorReport", "convert", "from_gguf_blocks", "from_hf_bitnet",
           "hf_bitnet_to_gguf", "llama_to_gguf", "quantize_gguf", "read_gguf", "read_hf_bitnet",
           "read_safetensors", "to_gguf_blocks", "to_hf_bitnet", "write_gguf", "write_hf_bitnet",
           "write_safetensors"]
