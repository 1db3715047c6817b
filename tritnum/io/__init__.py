"""Interchange with other tools: GGUF ternary block formats (llama.cpp, bitnet.cpp)."""

from .gguf_blocks import QTYPES, from_gguf_blocks, to_gguf_blocks

__all__ = ["QTYPES", "from_gguf_blocks", "to_gguf_blocks"]
