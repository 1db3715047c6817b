"""Interchange with other tools: GGUF ternary block formats (llama.cpp, bitnet.cpp), safetensors."""

from .gguf_blocks import QTYPES, from_gguf_blocks, to_gguf_blocks
from .gguf_file import read_gguf, write_gguf
from .safetensors_file import SafetensorsFile, read_safetensors, write_safetensors

__all__ = ["QTYPES", "SafetensorsFile", "from_gguf_blocks", "read_gguf", "read_safetensors",
           "to_gguf_blocks", "write_gguf", "write_safetensors"]
