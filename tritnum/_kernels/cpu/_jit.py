"""The ``njit`` settings every CPU kernel uses."""

from __future__ import annotations

import numba

from ..._config import CACHE


def jit(**options):
    """``numba.njit`` with tritnum's cache setting (``TRITNUM_CACHE``); lazy, no signature."""
    return numba.njit(cache=CACHE, nogil=True, **options)
