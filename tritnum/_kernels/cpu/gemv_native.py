"""The 2bit GEMV kernels run by helper threads that never return to Python.

A GEMV kernel of :mod:`.matmul` (``kernel(xl, xneg, xscale, w, scales, segment,
prefetch, y, ctl, t1)``, all arrays C-contiguous; likewise :mod:`.group_gemv`'s and the
VNNI GEMV of Q8_K activations of :mod:`.q8k`, each with an entry point and a C function
of its own) runs on 2+ threads through
:func:`._parallel.run_native`: :func:`_enter` writes the arrays' addresses and shapes
and the kernel's address into the pool's description words (the layout below) and opens
the call, and every thread, this one too, runs a C function (:func:`_c_function`, a
``numba.cfunc``, one a kind of kernel and dtype of the activations, compiled or loaded
from the disk cache at the first parallel call of its kind) that rebuilds the arrays
from those words (:func:`described_array`) and calls the kernel at that address (its C
wrapper, which numba compiled with the kernel: the C function does not compile the kernel
again).

The entry point checks what the C function takes for granted: every array
C-contiguous, of its dtype and number of dimensions (for the GEMV's activations, which
:func:`_enter` hands on as bytes, in Python; for the rest a check of the compiled types,
free at run time); a call it refuses (-1) runs on :func:`._parallel.run_claimed` instead.
The kernel's address is that of its compilation for exactly the types the C function
passes (:func:`_kernel_address`). The C functions cannot pass on an exception: the GEMV
kernels raise none.
"""

from __future__ import annotations

import functools
from typing import Any

import numba
import numpy as np
from numba import types
from numba.core import sigutils
from numba.core.ccallback import CFunc
from numba.extending import intrinsic

from ..._config import CACHE
from ..._isa import CACHEABLE
from ._jit import _Cache, jit, jit_where, specialized
from ._llvm.calls import call_address, call_compiled, describe, described_array
from ._llvm.dot_q8k import dot_q8k_vnni
from ._llvm.gemm import ROW_TILE
from ._llvm.pool import close_native, open_native
from ._parallel import CLAIM_MULTIPLE, DESCRIPTION_WORDS, WORDS, run_claimed, run_native

# The description words of a GEMV of matmul.py: each array's address then its shape
# (:func:`describe`), then the scalars.
XL, XNEG, XSCALE, W, SCALES, SEGMENT, PREFETCH, Y, CTL, T1 = 0, 3, 6, 8, 11, 14, 15, 16, 19, 21
# and of group_gemv.py's (``_gemv_blocks(a, xsum, codes, laid, xscale, y, ctl, t1)``)
A, XSUM, CODES, LAID, BSCALE, BY, BCTL, BT1 = 0, 5, 9, 14, 18, 20, 23, 25
# and of q8k.py's (``_q8k_gemv(xl, csum, xd, w, scales, fused, y, ctl, t1)``)
QX, QCSUM, QD, QW, QSCALES, QFUSED, QY, QCTL, QT1 = 0, 3, 6, 9, 12, 15, 16, 19, 21
KERNEL = DESCRIPTION_WORDS - 1  # the kernel's address, for each
C_SIGNATURE = types.int64(types.CPointer(types.int64))


def _array(dtype: Any, ndim: int, readonly: bool = False) -> types.Array:
    return types.Array(dtype, ndim, "C", readonly=readonly)


# The types of the kernels' compilation that the C functions call. The weights and their
# scales are read-only, as a TernaryTensor's are: a process whose calls run alone (which
# pass them as they are) and on 2 threads compiles each kernel once, not twice. A C
# function passes them as writeable arrays: numba lays out both kinds alike.


def _gemv_types(dtype: Any) -> tuple:
    """The numba types a GEMV kernel of matmul.py gets from its C function (``dtype``: xl's)."""
    return (_array(dtype, 2), _array(types.int32, 2), _array(types.float32, 1),
            _array(types.uint8, 2, True), _array(types.float32, 2, True), types.int64,
            types.boolean, _array(types.float32, 2), _array(types.int64, 1), types.int64)


def _blocks_types(dtype: Any = types.int8) -> tuple:
    """The numba types of group_gemv.py's kernel, as :func:`_gemv_types`."""
    return (_array(dtype, 4), _array(types.int32, 3), _array(types.uint8, 4, True),
            _array(types.float32, 3, True), _array(types.float32, 1), _array(types.float32, 2),
            _array(types.int64, 1), types.int64)


def _q8k_types(dtype: Any = types.int8) -> tuple:
    """The numba types of q8k.py's VNNI GEMV kernel, as :func:`_gemv_types`."""
    return (_array(dtype, 2), _array(types.int32, 2), _array(types.float32, 2),
            _array(types.uint8, 2, True), _array(types.float32, 2, True), types.boolean,
            _array(types.float32, 2), _array(types.int64, 1), types.int64)


def _c_arrays(arrays: tuple, kinds: tuple) -> bool:
    """Whether numba types ``arrays`` are C-contiguous arrays of ``kinds``' dtypes and ranks."""
    return all(isinstance(a, types.Array) and a.layout == "C" and a.dtype == kind.dtype
               and a.ndim == kind.ndim for a, kind in zip(arrays, kinds, strict=True))


def _constant(value: bool) -> Any:
    """An intrinsic's codegen giving the boolean ``value``."""
    def codegen(context, builder, sig, args):
        return context.get_constant(types.boolean, value)

    return codegen


def _described_by(kinds_of: Any, dtypes: tuple) -> Any:
    """An intrinsic: whether a GEMV's six arrays are what its C functions take.

    C-contiguous, of the dtypes and ranks of the first six arrays of ``kinds_of(dtype)``
    (the kernel's types for activations of ``dtype``, the first array's, one of
    ``dtypes``). A constant of the compiled entry point, from the arrays' numba types (an
    intrinsic: an ``@overload`` compiled a function of its own, 0.08 s at the first call).
    """
    @intrinsic
    def described(typingctx, a, b, c, d, e, f):
        arrays = (a, b, c, d, e, f)
        dtype = getattr(a, "dtype", None)
        ok = dtype in dtypes and _c_arrays(
            arrays, [kind for kind in kinds_of(dtype) if isinstance(kind, types.Array)][:6])
        return types.boolean(*arrays), _constant(ok)

    return described


_described = _described_by(_gemv_types, (types.uint8,))  # the activations as bytes (_enter)
_described_blocks = _described_by(_blocks_types, (types.int8,))
_described_q8k = _described_by(_q8k_types, (types.int8,))


@jit(inline="always")
def _run(words, generation, description, ctl, step, t1, target, helpers, late):
    """A described call: its control words set, opened, this thread's share, closed.

    ``target`` is the C function's address and the kernel's. Inlined into each entry point
    (a function of its own took 0.15-0.2 s of the first 2-thread GEMV).
    """
    ctl[0], ctl[1] = 0, step
    description[KERNEL] = target[1]
    g = open_native(words, generation, target[0], helpers, t1)
    call_address(target[0], description)
    return close_native(words, g, late)


def _enter(words: np.ndarray, generation: np.ndarray, description: np.ndarray,
           ctl: np.ndarray, step: int, t1: int, target: tuple[int, int], helpers: int,
           late: int, xl: np.ndarray, *args: Any) -> int:
    """:func:`._parallel.run_native`'s entry point for the GEMV; -1 for arguments it refuses.

    The activations go to the compiled entry point (:func:`_enter_bytes`) as their bytes:
    one compilation serves int8 and float32 ones (a second took 0.25 s of the first
    2-thread float GEMV). The C function called is the one of ``xl``'s dtype (``target``).
    """
    if xl.dtype not in _ACTIVATIONS or xl.ndim != 2 or not xl.flags.c_contiguous:
        return -1
    return _enter_bytes(words, generation, description, ctl, step, t1, target, helpers, late,
                        xl.view(np.uint8), xl.itemsize, *args)


_ACTIVATIONS = (np.dtype(np.int8), np.dtype(np.float32))


@jit()
def _enter_bytes(words, generation, description, ctl, step, t1, target, helpers, late, xl,
                 itemsize, xneg, xscale, w, scales, segment, prefetch, y):
    """:func:`_enter` compiled: ``xl`` the activations' bytes, ``itemsize`` bytes an element."""
    if not _described(xl, xneg, xscale, w, scales, y):
        return -1
    d = description
    describe(d, ((XL, xl), (XNEG, xneg), (XSCALE, xscale), (W, w), (SCALES, scales), (Y, y),
                 (CTL, ctl)))
    d[XL + 2] = xl.shape[1] // itemsize  # the activations' shape in elements
    d[SEGMENT], d[PREFETCH], d[T1] = segment, prefetch, t1
    return _run(words, generation, description, ctl, step, t1, target, helpers, late)


# on CPUs that have the kernel only (as it): tn.warmup compiles every dispatcher it finds
@jit_where(ROW_TILE is not None)
def _enter_blocks(words, generation, description, ctl, step, t1, target, helpers, late, a,
                  xsum, codes, laid, xscale, y):
    """:func:`_enter` for the GEMV of laid-out rows."""
    if not _described_blocks(a, xsum, codes, laid, xscale, y):
        return -1
    description[BT1] = t1
    describe(description, ((A, a), (XSUM, xsum), (CODES, codes), (LAID, laid),
                           (BSCALE, xscale), (BY, y), (BCTL, ctl)))
    return _run(words, generation, description, ctl, step, t1, target, helpers, late)


@jit_where(dot_q8k_vnni is not None)
def _enter_q8k(words, generation, description, ctl, step, t1, target, helpers, late, xl, csum,
               xd, w, scales, fused, y):
    """:func:`_enter` for the VNNI GEMV of Q8_K activations."""
    if not _described_q8k(xl, csum, xd, w, scales, y):
        return -1
    description[QFUSED], description[QT1] = fused, t1
    describe(description, ((QX, xl), (QCSUM, csum), (QD, xd), (QW, w), (QSCALES, scales),
                           (QY, y), (QCTL, ctl)))
    return _run(words, generation, description, ctl, step, t1, target, helpers, late)


# The C functions' bodies (templates): the kernel at ``d[KERNEL]`` on the arrays ``d``
# describes. Each C function is one of them with its own global ``DTYPE`` (the
# activations' dtype, :func:`._jit.specialized`).


def _call(d):
    """A GEMV of matmul.py."""
    return call_compiled(d[KERNEL], (
        described_array(d, XL, DTYPE, 2), described_array(d, XNEG, np.int32, 2),  # noqa: F821
        described_array(d, XSCALE, np.float32, 1), described_array(d, W, np.uint8, 2),
        described_array(d, SCALES, np.float32, 2), d[SEGMENT], d[PREFETCH] != 0,
        described_array(d, Y, np.float32, 2), described_array(d, CTL, np.int64, 1), d[T1]))


def _call_blocks(d):
    """The GEMV of laid-out rows (group_gemv.py)."""
    return call_compiled(d[KERNEL], (
        described_array(d, A, DTYPE, 4), described_array(d, XSUM, np.int32, 3),  # noqa: F821
        described_array(d, CODES, np.uint8, 4), described_array(d, LAID, np.float32, 3),
        described_array(d, BSCALE, np.float32, 1), described_array(d, BY, np.float32, 2),
        described_array(d, BCTL, np.int64, 1), d[BT1]))


def _call_q8k(d):
    """The VNNI GEMV of Q8_K activations (q8k.py)."""
    return call_compiled(d[KERNEL], (
        described_array(d, QX, DTYPE, 2), described_array(d, QCSUM, np.int32, 2),  # noqa: F821
        described_array(d, QD, np.float32, 2), described_array(d, QW, np.uint8, 2),
        described_array(d, QSCALES, np.float32, 2), d[QFUSED] != 0,
        described_array(d, QY, np.float32, 2), described_array(d, QCTL, np.int64, 1),
        d[QT1]))


# each template: its entry point, the types it passes its kernel, the chunks' multiple
_KINDS = {_call: (_enter, _gemv_types, CLAIM_MULTIPLE), _call_blocks: (_enter_blocks,
          _blocks_types, 1), _call_q8k: (_enter_q8k, _q8k_types, CLAIM_MULTIPLE)}


@functools.cache
def _c_function(template: Any, dtype: type) -> CFunc:
    """``template``'s C function for activations of ``dtype``, compiled or loaded.

    Kept here for the life of the process: its machine code must outlive every call that
    hands its address to a helper.
    """
    # its own name, so its own cache index file: numba's save takes no lock, and two
    # processes saving two C functions into one index at once could pair one's key with
    # the other's code
    call = specialized(template, f"{template.__name__}_{np.dtype(dtype).name}", DTYPE=dtype)
    compiled = CFunc(call, sigutils.normalize_signature(C_SIGNATURE), {}, {"nopython": True})
    if CACHE and CACHEABLE:
        compiled._cache = _Cache(call)
    compiled.compile()
    return compiled


@functools.cache
def _kernel_address(template: Any, kernel: Any, dtype: type) -> int:
    """The address of ``kernel``'s C wrapper for the types ``template`` passes it.

    numba compiles (or loads) that signature if no call did yet; a dispatcher keeps what
    it compiled for the life of the process.
    """
    kinds = _KINDS[template][1](numba.from_dtype(np.dtype(dtype)))
    compiled = kernel.get_compile_result(types.int64(*kinds))
    if types.unliteral(compiled.signature.return_type) != types.int64:  # numba 0.60: Literal
        raise TypeError(f"{kernel} returns {compiled.signature.return_type}, not an int64")
    return compiled.library.get_pointer_to_function(compiled.fndesc.llvm_cfunc_wrapper_name)


def _target(template: Any, kernel: Any, dtype: type) -> tuple[int, int]:
    """The addresses :func:`_run` takes: ``template``'s C function's, ``kernel``'s."""
    return _c_function(template, dtype).address, _kernel_address(template, kernel, dtype)


def _run_native(template: Any, dtype: type, kernel: Any, tasks: int, nbytes: int,
                *args: Any) -> None:
    """``run_claimed(kernel, tasks, nbytes, *args)``, its threads without the GIL.

    Through ``template``'s entry point and C function, for activations of ``dtype``.
    """
    entry, _, multiple = _KINDS[template]
    target = functools.partial(_target, template, kernel, dtype)
    if not run_native(entry, target, kernel, tasks, nbytes, *args, multiple=multiple):
        run_claimed(kernel, tasks, nbytes, *args, multiple=multiple)


def run_gemv(kernel: Any, tasks: int, nbytes: int, xl: np.ndarray, *args: Any) -> None:
    """:func:`_run_native` for a GEMV of matmul.py."""
    _run_native(_call, xl.dtype.type, kernel, tasks, nbytes, xl, *args)


def run_blocks(kernel: Any, tasks: int, nbytes: int, *args: Any) -> None:
    """:func:`_run_native` for group_gemv.py's kernel."""
    _run_native(_call_blocks, np.int8, kernel, tasks, nbytes, *args)


def run_q8k(kernel: Any, tasks: int, nbytes: int, *args: Any) -> None:
    """:func:`_run_native` for q8k.py's VNNI GEMV."""
    _run_native(_call_q8k, np.int8, kernel, tasks, nbytes, *args)


def warm_gemv(kernel: Any, tasks: int, xl: np.ndarray, *args: Any) -> None:
    """:func:`run_gemv`'s entry point and C function, and ``kernel``, compiled (or loaded).

    The call runs on this thread alone, on words of its own (no helper).
    """
    _alone(_call, xl.dtype.type, kernel, tasks, xl, *args)


def warm_blocks(kernel: Any, tasks: int, *args: Any) -> None:
    """:func:`warm_gemv` for :func:`run_blocks`."""
    _alone(_call_blocks, np.int8, kernel, tasks, *args)


def warm_q8k(kernel: Any, tasks: int, *args: Any) -> None:
    """:func:`warm_gemv` for :func:`run_q8k`."""
    _alone(_call_q8k, np.int8, kernel, tasks, *args)


def _alone(template: Any, dtype: type, kernel: Any, tasks: int, *args: Any) -> None:
    words, generation = np.zeros(WORDS, np.int64), np.zeros(1, np.int64)
    description, ctl = np.zeros(DESCRIPTION_WORDS, np.int64), np.zeros(2, np.int64)
    _KINDS[template][0](words, generation, description, ctl, tasks, tasks,
                        _target(template, kernel, dtype), 0, 0, *args)
