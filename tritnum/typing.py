"""Types of tritnum's named-choice arguments, for type checkers (tritnum ships ``py.typed``).

>>> from typing import get_args
>>> from tritnum.typing import Format
>>> get_args(Format)
('2bit', 'base3', 'bitplane')

Each ``Literal`` lists the same strings, in the same order, as the check that
refuses any other value at run time (``tests/test_namespace.py`` holds them equal).
"""

from __future__ import annotations

from typing import Literal, TypeAlias

__all__ = ["Activations", "BindRule", "Device", "Estimate", "Format", "GGUFQType", "HVFormat",
           "I2SLayout", "Metric"]

Format: TypeAlias = Literal["2bit", "base3", "bitplane"]
"""A packed format of :func:`tritnum.pack` (docs/formats.md)."""

Device: TypeAlias = Literal["auto", "cpu", "cuda", "numpy"]
"""Where an operation runs: ``"auto"`` follows the data, ``"numpy"`` is the reference."""

Activations: TypeAlias = Literal["float", "int8", "q8_k", "q8_k_unfused"]
"""How :func:`tritnum.linear` reads its activations: as floats, quantized to int8 per row
(bitnet.cpp), or to Q8_K per 256-value block (llama.cpp)."""

Metric: TypeAlias = Literal["dot", "cosine", "hamming"]
"""A similarity of :func:`tritnum.vsa.similarity` and :func:`tritnum.vsa.search`."""

HVFormat: TypeAlias = Literal["dense", "bitplane"]
"""How :mod:`tritnum.vsa` generators return hypervectors: int8 arrays or bitplane PackedTrits."""

BindRule: TypeAlias = Literal["mul", "mod3"]
"""The binding of :func:`tritnum.vsa.bind`: elementwise product, or the cyclic group mod 3."""

GGUFQType: TypeAlias = Literal["TQ2_0", "TQ1_0", "I2_S"]
"""A ternary GGUF block type of :mod:`tritnum.io`."""

I2SLayout: TypeAlias = Literal["x86", "x86-interleaved", "arm"]
"""bitnet.cpp's I2_S byte layout of :mod:`tritnum.io` (which build wrote the file)."""

Estimate: TypeAlias = Literal["unbiased", "projection"]
"""How :func:`tritnum.decompress` reconstructs a gradient from its sketch: ``P^T s``, or the
orthogonal projection ``P^T (P P^T)^-1 s`` (for error feedback)."""
