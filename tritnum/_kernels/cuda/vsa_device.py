"""The shared VSA arithmetic (:mod:`..shared.vsa`) as inline CUDA device functions.

Every CUDA VSA kernel (:mod:`.vsa`, :mod:`.vsa_bundle`, :mod:`.vsa_similarity`,
:mod:`.vsa_search`) and the sketch kernels of :mod:`.compress` call these: the same
Python functions the CPU kernels compile with ``numba.njit``, here compiled with
``cuda.jit(device=True, inline="always")`` (inlined at the Numba IR level, so a
kernel compiles to PTX without a driver), with ``cuda.popc`` on uint64 words.
"""

from __future__ import annotations

from typing import Any

from numba import cuda

from ..shared import vsa as hv


def device(fn: Any, **names: Any) -> Any:
    return cuda.jit(device=True, inline="always")(hv.specialize(fn, **names) if names else fn)


@cuda.jit(device=True, inline="always")
def popc(x):
    return cuda.popc(x)


fmix = device(hv.fmix64)
row_key = device(hv.row_key, fmix64=fmix)
draw = device(hv.draw, fmix64=fmix)
trit_of = device(hv.trit_of)
random_word = device(hv.random_word, draw=draw)
takes_other = device(hv.takes_other)
mixed_trit = device(hv.mixed_trit, draw=draw, trit_of=trit_of, takes_other=takes_other)
op_trits = device(hv.op_trits)
op_words = device(hv.op_words)
score = device(hv.score)
pair_words = device(hv.pair_words, popc=popc, score=score)
pair_trits = device(hv.pair_trits, score=score)
bits_at = device(hv.bits_at)
rolled_word = device(hv.rolled_word, bits_at=bits_at)
level_of = device(hv.level_of)
