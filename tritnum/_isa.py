"""The SIMD instruction set of the hand-written CPU kernels, picked once per process.

numba compiles for the CPU the process runs on (``NUMBA_CPU_NAME``/
``NUMBA_CPU_FEATURES`` can name another), so the kernels may use what that
target has. The levels, lowest first:

- ``portable``: plain LLVM vector IR, lowered for any target;
- ``avx2``: ``vpermilps`` float trits, ``vpmaddubsw`` + ``vpmaddwd`` int8 sums
  (bitnet.cpp's I2_S kernel);
- ``avxvnni``: 256-bit ``vpdpbusd`` (u8 codes x s8 activations into int32);
- ``avx512vnni``: 512-bit ``vpdpbusd`` and 16-lane float trits, on 64-byte blocks.

:data:`TABLE` holds what each level offers, the one place the kernels read it from
(:class:`Level`: the CPU features it needs, its vector width, its int8 dot
instruction, whether ``vpermilps``/``vpmaddubsw`` and ``vpopcntq`` are there);
:data:`LEVEL` is the entry of the chosen level. Tile shapes that belong to one
kernel stay in that kernel's module, derived from these facts.

``TRITNUM_ISA`` forces a lower level (for tests and comparisons); a level the
target lacks is an error. numba's on-disk cache keys kernels by the target CPU
and its features, never by this choice, so a forced level turns the cache off
(:data:`CACHEABLE`) rather than reuse kernels compiled for another level.
"""

from __future__ import annotations

from dataclasses import dataclass

import llvmlite.binding as llvm
from numba.core import config

from . import _config


@dataclass(frozen=True)
class Level:
    """What one SIMD level offers the hand-written CPU kernels."""

    name: str
    requires: frozenset[str]  # the CPU features (LLVM's names) the level needs
    vector_bytes: int  # the vectors the kernels work in: 32 (AVX2 ymm; portable IR) or 64 (zmm)
    x86: bool  # AVX2's instructions: vpermilps, vpmaddubsw + vpmaddwd, vpshufb
    int8_dot: str  # u8 x s8 sums into int32: "portable", "maddubs" (AVX2) or "vnni" (vpdpbusd)
    vpopcntq: bool  # 8 words counted by one vpopcntq (used where the CPU has AVX512_VPOPCNTDQ)

    @property
    def float_lanes(self) -> int:
        """float32 (or int32) lanes of one vector."""
        return self.vector_bytes // 4


TABLE = {level.name: level for level in (
    Level("portable", frozenset(), 32, False, "portable", False),
    Level("avx2", frozenset({"avx2"}), 32, True, "maddubs", False),
    Level("avxvnni", frozenset({"avx2", "avxvnni"}), 32, True, "vnni", False),
    Level("avx512vnni", frozenset({"avx2", "avx512f", "avx512bw", "avx512vl", "avx512vnni"}), 64,
          True, "vnni", True),
)}
LEVELS = _config.ISA_LEVELS
assert tuple(TABLE) == LEVELS, "the table lists the levels of _config.ISA_LEVELS, lowest first"
REQUIRES = {name: level.requires for name, level in TABLE.items()}


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
LEVEL: Level = TABLE[ISA]
CACHEABLE: bool = ISA == available()[-1]
