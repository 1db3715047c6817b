"""The ``njit`` settings every CPU kernel uses."""

from __future__ import annotations

import numba

from ..._config import CACHE
from ..._isa import CACHEABLE


def jit(**options):
    """``numba.njit`` with tritnum's cache setting; lazy, no signature.

    The disk cache is on unless ``TRITNUM_CACHE=0`` or a forced ``TRITNUM_ISA``.
    """
    return numba.njit(cache=CACHE and CACHEABLE, nogil=True, **options)
