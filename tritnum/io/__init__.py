"""Interchange with other tools: GGUF ternary block formats (llama.cpp, bitnet.cpp) and files."""

from .gguf_blocks import QTYPES, from_gguf_blocks, to_gguf_blocks
from .gguf_file import read_gguf, write_gguf

__all__ = ["QTYPES", "from_gguf_blocks", "read_gguf", "to_gguf_blocks", "write_gguf"]
