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
from numba import literal_unroll, types
from numba.core import sigutils
from numba.core.ccallback import CFunc
from numba.extending import overload

from ..._config import CACHE
from ..._isa import CACHEABLE
from ._jit import NamedCache, jit
from ._llvm.calls import address_pointer, call_address
from ._parallel import (
    DESCRIPTION_WORDS,
    WORDS,
    close_native,
    open_native,
    run_claimed,
    run_native,
)

# The description words of a GEMV of matmul.py: each array's address then its shape
# (:func:`_put`), then the scalars.
XL, XNEG, XSCALE, W, SCALES, SEGMENT, PREFETCH, Y, CTL, T1 = 0, 3, 6, 8, 11, 14, 15, 16, 19, 21
# and of group_gemv.py's (``_gemv_blocks(a, xsum, codes, laid, xscale, y, ctl, t1)``)
A, XSUM, CODES, LAID, BSCALE, BY, BCTL, BT1 = 0, 5, 9, 14, 18, 20, 23, 25
C_SIGNATURE = types.int64(types.CPointer(types.int64))


def _c_arrays(arrays: tuple) -> bool:
    """Whether numba types ``(type, dtype, ndim)`` are C-contiguous arrays of those."""
    return all(isinstance(a, types.Array) and a.layout == "C" and a.dtype == dtype
               and a.ndim == ndim for a, dtype, ndim in arrays)


def _described(xl, xneg, xscale, w, scales, y):
    """Whether a GEMV's arrays are what the C functions take (C-contiguous, their dtypes)."""


@overload(_described)
def _described_types(xl, xneg, xscale, w, scales, y):
    """:func:`_described` from the arrays' numba types: a constant of the compiled entry."""
    described = _c_arrays(((xl, xl.dtype if xl.dtype in (types.int8, types.float32) else None,
                            2), (xneg, types.int32, 2), (xscale, types.float32, 1),
                           (w, types.uint8, 2), (scales, types.float32, 2),
                           (y, types.float32, 2)))
    return lambda xl, xneg, xscale, w, scales, y: described


def _described_blocks(a, xsum, codes, laid, xscale, y):
    """:func:`_described` for the GEMV of laid-out rows."""


@overload(_described_blocks)
def _described_blocks_types(a, xsum, codes, laid, xscale, y):
    described = _c_arrays(((a, types.int8, 4), (xsum, types.int32, 3), (codes, types.uint8, 4),
                           (laid, types.float32, 3), (xscale, types.float32, 1),
                           (y, types.float32, 2)))
    return lambda a, xsum, codes, laid, xscale, y: described


@jit()
def _put(d, placed):
    """For each ``(k, a)`` of ``placed``: array ``a``'s address, then its shape, from ``d[k]``."""
    for pair in literal_unroll(placed):
        k, a = pair[0], pair[1]
        d[k] = a.ctypes.data
        for i in range(a.ndim):
            d[k + 1 + i] = a.shape[i]


@jit(inline="always")
def _run(words, generation, description, ctl, step, t1, function, helpers, late):
    """A described call: its control words set, opened, this thread's share, closed."""
    ctl[0], ctl[1] = 0, step
    g = open_native(words, generation, function, helpers, t1)
    call_address(function, description)
    return close_native(words, g, late)


@jit()
def _enter(words, generation, description, ctl, step, t1, function, helpers, late, xl, xneg,
           xscale, w, scales, segment, prefetch, y):
    """:func:`._parallel.run_native`'s entry point for the GEMV; -1 for arguments it refuses."""
    if not _described(xl, xneg, xscale, w, scales, y):
        return -1
    d = description
    _put(d, ((XL, xl), (XNEG, xneg), (XSCALE, xscale), (W, w), (SCALES, scales), (Y, y),
             (CTL, ctl)))
    d[SEGMENT], d[PREFETCH], d[T1] = segment, prefetch, t1
    return _run(words, generation, description, ctl, step, t1, function, helpers, late)


@jit()
def _enter_blocks(words, generation, description, ctl, step, t1, function, helpers, late, a,
                  xsum, codes, laid, xscale, y):
    """:func:`_enter` for the GEMV of laid-out rows."""
    if not _described_blocks(a, xsum, codes, laid, xscale, y):
        return -1
    description[BT1] = t1
    _put(description, ((A, a), (XSUM, xsum), (CODES, codes), (LAID, laid), (BSCALE, xscale),
                       (BY, y), (BCTL, ctl)))
    return _run(words, generation, description, ctl, step, t1, function, helpers, late)


# The C functions' bodies (templates): ``KERNEL`` on the arrays ``d`` describes. Each C
# function is one of them with its own globals ``KERNEL`` and ``DTYPE`` (the activations'
# dtype), not a closure: numba keys a closure's cache entry on its pickled cells, and a
# kernel's pickle differs in each process (a new cache entry every time, never a hit).


def _call(d):
    """A GEMV of matmul.py."""
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


def _call_blocks(d):
    """The GEMV of laid-out rows (group_gemv.py)."""
    a = numba.carray(address_pointer(d[A]), (d[A + 1], d[A + 2], d[A + 3], d[A + 4]), np.int8)
    xsum = numba.carray(address_pointer(d[XSUM]), (d[XSUM + 1], d[XSUM + 2], d[XSUM + 3]),
                        np.int32)
    codes = numba.carray(address_pointer(d[CODES]),
                         (d[CODES + 1], d[CODES + 2], d[CODES + 3], d[CODES + 4]), np.uint8)
    laid = numba.carray(address_pointer(d[LAID]), (d[LAID + 1], d[LAID + 2], d[LAID + 3]),
                        np.float32)
    xscale = numba.carray(address_pointer(d[BSCALE]), (d[BSCALE + 1],), np.float32)
    y = numba.carray(address_pointer(d[BY]), (d[BY + 1], d[BY + 2]), np.float32)
    ctl = numba.carray(address_pointer(d[BCTL]), (d[BCTL + 1],), np.int64)
    return KERNEL(a, xsum, codes, laid, xscale, y, ctl, d[BT1])  # noqa: F821


@functools.cache
def _c_function(template: Any, kernel: Any, name: str, dtype: type) -> CFunc:
    """``kernel``'s C function from ``template``, for activations of ``dtype``.

    ``name`` is the kernel's, the same in every process. Kept here for the life of the
    process: its machine code must outlive every call that hands its address to a helper.
    """
    call = FunctionType(template.__code__, {**globals(), "KERNEL": kernel, "DTYPE": dtype})
    # a cache index file of its own (numba names it after the qualified name): processes
    # saving two C functions at once into one index could pair one's key with the other's
    # code (numba's save takes no lock); each file now only ever holds the same code
    name = f"{name}-{np.dtype(dtype).name}"
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
    function = functools.partial(_c_function, _call, kernel, name, xl.dtype.type)
    if not run_native(_enter, function, kernel, tasks, nbytes, xl, *args):
        run_claimed(kernel, tasks, nbytes, xl, *args)


def run_blocks(kernel: Any, tasks: int, nbytes: int, *args: Any) -> None:
    """``run_claimed(kernel, tasks, nbytes, *args, multiple=1)`` for group_gemv.py's kernel."""
    function = functools.partial(_c_function, _call_blocks, kernel, "blocks", np.int8)
    if not run_native(_enter_blocks, function, kernel, tasks, nbytes, *args, multiple=1):
        run_claimed(kernel, tasks, nbytes, *args, multiple=1)


def warm_gemv(kernel: Any, name: str, tasks: int, xl: np.ndarray, *args: Any) -> None:
    """:func:`run_gemv`'s entry point and ``kernel``'s C function compiled (or loaded).

    The call runs on this thread alone, on words of its own (no helper).
    """
    _alone(_enter, _c_function(_call, kernel, name, xl.dtype.type), tasks, xl, *args)


def warm_blocks(kernel: Any, tasks: int, *args: Any) -> None:
    """:func:`warm_gemv` for :func:`run_blocks`."""
    _alone(_enter_blocks, _c_function(_call_blocks, kernel, "blocks", np.int8), tasks, *args)


def _alone(entry: Any, function: CFunc, tasks: int, *args: Any) -> None:
    words, generation = np.zeros(WORDS, np.int64), np.zeros(1, np.int64)
    description, ctl = np.zeros(DESCRIPTION_WORDS, np.int64), np.zeros(2, np.int64)
    entry(words, generation, description, ctl, tasks, tasks, function.address, 0, 0, *args)
