"""The ``njit`` settings every CPU kernel uses, and a disk cache that sees their helpers.

numba keys a cached kernel on its own file's time stamp and bytecode. The kernels
here are built from helpers in other files (the LLVM IR writers of ``_llvm``, the
block codecs of ``shared``, functions of other kernel modules inlined), so after an
edit to one of those alone (a ``git checkout``, an editable install) numba's own key
would hand back the kernel compiled from the old helper. The key here also holds
:data:`SOURCES`, a hash of every CPU and shared kernel source file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from types import FunctionType
from typing import Any

import numba
from numba.core.caching import FunctionCache

from ..._config import CACHE
from ..._isa import CACHEABLE

_INTERNAL_API = ("_Cache",)

_KERNELS = Path(__file__).resolve().parents[1]


def sources_hash(root: Path = _KERNELS) -> str:
    """SHA-256 of the names and bytes of the ``.py`` files in ``root/cpu`` and ``root/shared``."""
    digest = hashlib.sha256()
    for path in sorted(p for part in ("cpu", "shared") for p in (root / part).rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


SOURCES = sources_hash()


class _Cache(FunctionCache):
    """numba's per-function disk cache, its index key extended by :data:`SOURCES`."""

    def _index_key(self, sig: Any, codegen: Any) -> tuple:
        return (*super()._index_key(sig, codegen), SOURCES)


def specialized(template: Callable, name: str, **constants: Any) -> Callable:
    """A copy of ``template`` named ``name`` that reads ``constants`` as globals, for :func:`jit`.

    For a family of kernels that differ in constants numba prunes on (a format, a
    dtype, a dot). Not closures: numba keys a closure's disk-cache entries on its
    pickled cells, and cells that hold compiled functions pickle differently in each
    process, so every process missed the cache and compiled the kernel again (the
    quantizer's 3.4 s, the int8 GEMV of groups of whole blocks 6 s). numba keys a
    copy on its code, not its globals: its own ``name`` (the same in every process)
    gives each copy its own index file, and its own symbols (:mod:`.gemv_native` finds
    a kernel's C wrapper by symbol name). The copy sees the module's globals as they
    are when it is made.
    """
    copy = FunctionType(template.__code__, {**template.__globals__, **constants}, name,
                        template.__defaults__)
    copy.__qualname__ = name
    copy.__doc__ = template.__doc__
    return copy


def jit(**options: Any) -> Callable[[Callable], Any]:
    """``numba.njit(nogil=True, **options)``, lazy, no signature, cached on disk.

    The disk cache is on unless ``TRITNUM_CACHE=0`` or a forced ``TRITNUM_ISA``.
    """
    def decorate(func: Callable) -> Any:
        kernel = numba.njit(nogil=True, **options)(func)
        if CACHE and CACHEABLE:
            kernel._cache = _Cache(kernel.py_func)  # what cache=True does, with our key
        return kernel
    return decorate


def jit_where(runs: bool, **options: Any) -> Callable[[Callable], Any]:
    """:func:`jit` where the CPU can run the kernel (``runs``); elsewhere the plain function.

    For kernels of instructions some CPUs lack: where they cannot run, no call reaches
    them, and ``tn.warmup`` (which compiles every kernel it finds) finds none to compile.
    """
    return jit(**options) if runs else (lambda func: func)
