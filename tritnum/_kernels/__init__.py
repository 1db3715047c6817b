"""Kernels: ``reference`` (NumPy), ``cpu`` (numba njit) and ``cuda`` (numba cuda.jit).

Each backend registers its kernels with :mod:`tritnum._dispatch` when imported.
Kernels assume validated input: every shape and dtype is checked before them.

Each family (packing, quantize, matmul, gguf, vsa) is ``reference/X.py``,
``cpu/X.py`` and ``cuda/X.py``, with the code several of them use in ``shared/``
(codecs compiled by both numba backends, NumPy layouts, top-k). A backend imports
only from ``shared/`` and its own folder; public modules import only ``shared/``
and reach the backends through the registry (:func:`tritnum._dispatch.kernel`).
"""
