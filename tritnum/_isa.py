"""The SIMD instruction set of the hand-written CPU kernels, picked once per process.

numba compiles for the CPU the process runs on (``NUMBA_CPU_NAME``/
``NUMBA_CPU_FEATURES`` can name another), so the kernels may use what that
target has. The levels, lowest first:

- ``portable``: plain LLVM vector IR, lowered for any target;
- ``avx2``: ``vpermilps`` float trits, ``vpmaddubsw`` + ``vpmaddwd`` int8 sums
  (bitnet.cpp's I2_S kernel);
- ``avxvnni``: 256-bit ``vpdpbusd`` (u8 codes x s8 activations into int32);
- ``avx512vnni``: 512-bit ``vpdpbusd`` and 16-lane float trits, on 64-byte blocks.

``TRITNUM_ISA`` forces a lower level (for tests and comparisons); a level the
target lacks is an error. numba's on-disk cache keys kernels by the target CPU
and its features, never by this choice, so a forced level turns the cache off
(:data:`CACHEABLE`) rather than reuse kernels compiled for another level.
"""

from __future__ import annotations

import llvmlite.binding as llvm
from numba.core import config

from . import _config

LEVELS = _config.ISA_LEVELS

REQUIRES = {
    "portable": frozenset(),
    "avx2": frozenset({"avx2"}),
    "avxvnni": frozenset({"avx2", "avxvnni"}),
    "avx512vnni": frozenset({"avx2", "avx512f", "avx512bw", "avx512vl", "avx512vnni"}),
}


def target_features() -> frozenset[str]:
    """The CPU features numba compiles for: the host's, unless ``NUMBA_CPU_NAME`` names a CPU."""
    if config.CPU_NAME in (None, "host"):
        return frozenset(k for k, on in llvm.get_host_cpu_features().items() if on)
    flags = (config.CPU_FEATURES or "").split(",")
    return frozenset(f[1:] for f in flags if f.startswith("+"))


def available(features: frozenset[str] | None = None) -> tuple[str, ...]:
    """The levels the target supports, lowest first."""
    have = target_features() if features is None else features
    return tuple(level for level in LEVELS if REQUIRES[level] <= have)


def select(requested: str | None, features: frozenset[str] | None = None) -> str:
    """The level to compile for: the highest available one, or ``requested`` if it is available."""
    have = target_features() if features is None else features
    levels = available(have)
    if requested is None:
        return levels[-1]
    if requested not in levels:
        missing = ", ".join(sorted(REQUIRES[requested] - have))
        raise ValueError(f"TRITNUM_ISA={requested!r}: this CPU lacks {missing}; it has "
                         f"{', '.join(levels)}")
    return requested


ISA: str = select(_config.ISA)
CACHEABLE: bool = ISA == available()[-1]
