"""The 2bit GEMV kernels as C functions, for helper threads that never return to Python.

A GEMV kernel of :mod:`.matmul` (``kernel(xl, xneg, xscale, w, scales, segment,
prefetch, y, ctl, t1)``, all arrays C-contiguous) runs on 2+ threads through
:func:`._parallel.run_native`: :func:`_enter` writes the arrays' addresses and shapes
into the pool's description words (the layout below) and opens the call, and every
thread, this one too, runs the kernel's C function (:func:`_c_function`, a
``numba.cfunc`` compiled, or loaded from the disk cache, at the kernel's first
parallel call), which rebuilds the arrays from those words and calls the kernel.

The entry point checks what the C function takes for granted: every array
C-contiguous, of its dtype and number of dimensions (a check of the compiled types, free
at run time); a call it refuses (-1) runs on :func:`._parallel.run_claimed` instead.
The C functions cannot pass on an exception: the GEMV kernels raise none.
"""

from __future__ import annotations

import functools
from types import FunctionType
from typing import Any

import numba
import numpy as np
from numba import types
from numba.core import sigutils
from numba.core.ccallback import CFunc
from numba.extending import overload

from ..._config import CACHE
from ..._isa import CACHEABLE
from ._jit import NamedCache, jit
from ._llvm.calls import address_pointer, call_address
from ._llvm.gemv_target import BLOCK_BYTES
from ._parallel import (
    DESCRIPTION_WORDS,
    WORDS,
    close_native,
    open_native,
    run_claimed,
    run_native,
)

# The description words: each array's address then its shape; then the scalars.
XL, XNEG, XSCALE, W, SCALES, SEGMENT, PREFETCH, Y, CTL, T1 = 0, 3, 6, 8, 11, 14, 15, 16, 19, 21
C_SIGNATURE = types.int64(types.CPointer(types.int64))


def _described(xl, xneg, xscale, w, scales, y):
    """Whether the arrays are what the C functions take (C-contiguous, their dtypes)."""


@overload(_described)
def _described_types(xl, xneg, xscale, w, scales, y):
    """:func:`_described` from the arrays' numba types: a constant of the compiled entry."""
    arrays = ((xl, xl.dtype if xl.dtype in (types.int8, types.float32) else None, 2),
              (xneg, types.int32, 2), (xscale, types.float32, 1), (w, types.uint8, 2),
              (scales, types.float32, 2), (y, types.float32, 2))
    described = all(isinstance(a, types.Array) and a.layout == "C" and a.dtype == dtype
                    and a.ndim == ndim for a, dtype, ndim in arrays)
    return lambda xl, xneg, xscale, w, scales, y: described


@jit()
def _enter(words, generation, description, ctl, step, t1, function, helpers, late, xl, xneg,
           xscale, w, scales, segment, prefetch, y):
    """:func:`._parallel.run_native`'s entry point for the GEMV; -1 for arguments it refuses."""
    if not _described(xl, xneg, xscale, w, scales, y):
        return -1
    d = description
    d[XL], d[XL + 1], d[XL + 2] = xl.ctypes.data, xl.shape[0], xl.shape[1]
    d[XNEG], d[XNEG + 1], d[XNEG + 2] = xneg.ctypes.data, xneg.shape[0], xneg.shape[1]
    d[XSCALE], d[XSCALE + 1] = xscale.ctypes.data, xscale.shape[0]
    d[W], d[W + 1], d[W + 2] = w.ctypes.data, w.shape[0], w.shape[1]
    d[SCALES], d[SCALES + 1], d[SCALES + 2] = scales.ctypes.data, scales.shape[0], scales.shape[1]
    d[SEGMENT], d[PREFETCH] = segment, prefetch
    d[Y], d[Y + 1], d[Y + 2] = y.ctypes.data, y.shape[0], y.shape[1]
    d[CTL], d[CTL + 1], d[T1] = ctl.ctypes.data, ctl.shape[0], t1
    ctl[0], ctl[1] = 0, step
    g = open_native(words, generation, function, helpers, t1)
    call_address(function, description)
    return close_native(words, g, late)


def _call(d):
    """The C functions' body (a template): ``KERNEL`` on the arrays ``d`` describes.

    Each C function is this code with its own globals ``KERNEL`` and ``DTYPE`` (the
    activations' dtype), not a closure: numba keys a closure's cache entry on its
    pickled cells, and a kernel's pickle differs in each process (a new cache entry
    every time, never a hit).
    """
    xl = numba.carray(address_pointer(d[XL]), (d[XL + 1], d[XL + 2]), DTYPE)  # noqa: F821
    xneg = numba.carray(address_pointer(d[XNEG]), (d[XNEG + 1], d[XNEG + 2]), np.int32)
    xscale = numba.carray(address_pointer(d[XSCALE]), (d[XSCALE + 1],), np.float32)
    w = numba.carray(address_pointer(d[W]), (d[W + 1], d[W + 2]), np.uint8)
    scales = numba.carray(address_pointer(d[SCALES]), (d[SCALES + 1], d[SCALES + 2]),
                          np.float32)
    y = numba.carray(address_pointer(d[Y]), (d[Y + 1], d[Y + 2]), np.float32)
    ctl = numba.carray(address_pointer(d[CTL]), (d[CTL + 1],), np.int64)
    return KERNEL(xl, xneg, xscale, w, scales, d[SEGMENT], d[PREFETCH] != 0,  # noqa: F821
                  y, ctl, d[T1])


@functools.cache
def _c_function(kernel: Any, name: str, int8: bool) -> CFunc:
    """``kernel``'s C function, for int8 (``int8``) or float32 activations.

    ``name`` is the kernel's, the same in every process. Kept here for the life of the
    process: its machine code must outlive every call that hands its address to a helper.
    """
    call = FunctionType(_call.__code__, {**globals(), "KERNEL": kernel,
                                         "DTYPE": np.int8 if int8 else np.float32})
    # a cache index file of its own (numba names it after the qualified name): processes
    # saving two C functions at once into one index could pair one's key with the other's
    # code (numba's save takes no lock); each file now only ever holds the same code
    name = f"{name}-{'int8' if int8 else 'float32'}"
    call.__qualname__ = f"_call_{name.replace('-', '_')}"
    compiled = CFunc(call, sigutils.normalize_signature(C_SIGNATURE), {}, {"nopython": True})
    if CACHE and CACHEABLE:
        compiled._cache = NamedCache(call, name)
    compiled.compile()
    return compiled


def run_gemv(kernel: Any, name: str, tasks: int, nbytes: int, xl: np.ndarray,
             *args: Any) -> None:
    """``run_claimed(kernel, tasks, nbytes, xl, *args)``, its threads without the GIL.

    ``name`` tells the kernel apart from every other (the key of its C function in the
    disk cache).
    """
    function = _c_function(kernel, name, xl.dtype == np.int8).address
    if not run_native(_enter, function, kernel, tasks, nbytes, xl, *args):
        run_claimed(kernel, tasks, nbytes, xl, *args)


def warm() -> None:
    """Compile (or load) :func:`_enter` and the one-scale kernels' C functions: one SIMD block.

    On words of its own, with no helper: the call runs on this thread alone.
    """
    from .matmul import _gemv_kernel

    words, generation = np.zeros(WORDS, np.int64), np.zeros(1, np.int64)
    description, ctl = np.zeros(DESCRIPTION_WORDS, np.int64), np.zeros(2, np.int64)
    w, scales = np.zeros((8, BLOCK_BYTES), np.uint8), np.ones((8, 1), np.float32)
    for int8 in (True, False):
        kernel, name = _gemv_kernel(BLOCK_BYTES, BLOCK_BYTES, 1, int8)
        xl = np.zeros((1, 4 * BLOCK_BYTES), np.int8 if int8 else np.float32)
        args = (xl, np.zeros((1, 1), np.int32), np.ones(1, np.float32), w, scales, BLOCK_BYTES,
                int8, np.empty((1, 8), np.float32))
        _enter(words, generation, description, ctl, 8, 8, _c_function(kernel, name, int8).address,
               0, 0, *args)
