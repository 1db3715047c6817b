"""The ``njit`` settings every CPU kernel uses."""

from __future__ import annotations

import numba

from ..._config import CACHE
from ._isa import CACHEABLE


def jit(**options):
    """``numba.njit`` with tritnum's cache setting (``TRITNUM_CACHE``, off under a forced
    ``TRITNUM_ISA``); lazy, no signature."""
    return numba.njit(cache=CACHE and CACHEABLE, nogil=True, **options)
