"""Kernels: ``reference`` (NumPy), ``cpu`` (numba njit) and ``cuda`` (numba cuda.jit).

Each backend registers its kernels with :mod:`tritnum._dispatch` when imported.
Kernels assume validated input: every shape and dtype is checked before them.
"""
