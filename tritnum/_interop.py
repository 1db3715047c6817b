"""Where the caller's data lives, and in which framework: arrays in, results back.

Every public op takes NumPy arrays (and anything ``np.asarray`` reads), GPU
arrays exposing ``__cuda_array_interface__`` (numba device arrays, CuPy) and
PyTorch tensors on the CPU or a CUDA GPU. At the boundary :func:`native` turns
an input into what kernels read, without a copy where the layout allows: a
NumPy array on the host (torch CPU tensors through DLPack) or a numba device
array on the GPU (CuPy arrays and torch CUDA tensors through the CUDA array
interface). :class:`Origin` remembers where an input came from, and
:meth:`Origin.wrap` hands a result back in that framework, on that device.

Two conversions are not free, by necessity: bfloat16 tensors are read as
float32 (NumPy has no bfloat16), and ``requires_grad`` tensors are read
detached (tritnum's kernels do not record autograd graphs).

Dask arrays are lazy: public ops hand them, unread, to tritnum's Dask layer
(:func:`dask_layer`, the package ``tritnum._dask``), which builds lazy results
whose tasks run the in-memory ops on each chunk.

Nothing here imports torch, CuPy, numba-cuda or dask: an object is recognised as
a tensor or a Dask array only when its framework is already imported.
"""

from __future__ import annotations

import importlib
import math
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._registry import kernel

__all__ = [
    "HOST",
    "Origin",
    "as_rows",
    "contiguous",
    "copy_into",
    "copy_of",
    "dask_layer",
    "flat",
    "for_device",
    "is_contiguous",
    "is_cuda_array",
    "is_dask",
    "is_torch",
    "native",
    "origin",
    "take",
    "to_gpu",
    "to_host",
    "to_host_exact",
]


def is_torch(obj: Any) -> bool:
    """Whether ``obj`` is a PyTorch tensor (False without importing torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def is_dask(obj: Any) -> bool:
    """Whether ``obj`` is a Dask array (False without importing dask)."""
    da = sys.modules.get("dask.array")
    return da is not None and isinstance(obj, da.Array)


def dask_layer() -> Any:
    """The Dask layer of tritnum (``tritnum._dask``), imported on first use: by a Dask input."""
    try:
        return importlib.import_module("tritnum._dask")
    except ModuleNotFoundError as error:  # chunks= asks for Dask arrays without Dask
        if (error.name or "").split(".")[0] != "dask":
            raise
        from ._extras import missing

        raise ModuleNotFoundError(missing("Lazy (Dask) arrays", "dask"),
                                  name=error.name) from error


# what most arguments of a call are: never on a GPU (checked first, by exact type)
_HOST_TYPES = frozenset({np.ndarray, int, float, bool, str, bytes, tuple, type(None)})


def is_cuda_array(obj: Any) -> bool:
    """Whether ``obj`` lives on a GPU (a CUDA tensor, or ``__cuda_array_interface__``)."""
    if type(obj) in _HOST_TYPES:  # the common case, first: this runs several times per call
        return False
    if is_torch(obj):
        return obj.device.type == "cuda"
    return bool(getattr(obj, "__cuda_ndarray__", False)) or hasattr(
        obj, "__cuda_array_interface__"
    )


def _from_torch(t: Any) -> Any:
    """A torch tensor as a NumPy array (CPU) or numba device array (CUDA), sharing memory."""
    import torch

    t = t.detach()
    if t.dtype == torch.bfloat16:
        t = t.float()  # NumPy has no bfloat16; read as float32 (a copy)
    if t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg()
    if t.device.type == "cuda":
        from numba import cuda

        return cuda.as_cuda_array(t)
    if t.device.type != "cpu":
        raise TypeError(
            f"tritnum runs on CPU and CUDA tensors, got a tensor on {t.device}; "
            "move it with .cpu() or .cuda()"
        )
    return np.from_dlpack(t)


def native(x: Any) -> Any:
    """``x`` as kernels read it: a NumPy or numba device array, zero-copy where possible.

    PyTorch tensors and ``__cuda_array_interface__`` arrays are converted;
    anything else is returned as it is, for the validators to read.
    """
    if type(x) is np.ndarray:
        return x
    if is_torch(x):
        return _from_torch(x)
    if getattr(x, "__cuda_ndarray__", False):  # a numba device array (or the simulator's)
        return x
    if hasattr(x, "__cuda_array_interface__"):
        from numba import cuda

        return cuda.as_cuda_array(x)
    return x


def to_host(a: Any) -> np.ndarray:
    """A NumPy array of ``a`` (copied back from the GPU when it lives there)."""
    if type(a) is np.ndarray:
        return a
    a = native(a)
    if is_cuda_array(a):
        return a.copy_to_host()
    return np.asarray(a)


def to_host_exact(a: Any) -> tuple[np.ndarray, bool]:
    """``a`` as :func:`to_host` gives it, and whether it holds bfloat16 bits.

    A bfloat16 tensor is not widened to float32 here: its bits come back as uint16
    (and ``True``), for files that store bfloat16 as it is.
    """
    if is_torch(a):
        import torch

        if a.dtype == torch.bfloat16:
            return to_host(a.detach().view(torch.int16)).view(np.uint16), True
    return to_host(a), False


def to_gpu(a: Any) -> Any:
    """A numba device array of ``a`` (no copy when it already lives on the GPU)."""
    a = native(a)
    if is_cuda_array(a):
        return a
    from numba import cuda

    return cuda.to_device(np.ascontiguousarray(a))


def for_device(a: Any, device: str) -> Any:
    """``a`` where kernels of ``device`` can read it."""
    return to_gpu(a) if device == "cuda" else to_host(a)


def is_contiguous(a: Any) -> bool:
    """Whether the NumPy or numba device array ``a`` is C-contiguous."""
    return bool(a.flags.c_contiguous) if isinstance(a, np.ndarray) else a.is_c_contiguous()


def contiguous(a: Any, dtype: Any = None) -> Any:
    """``a`` C-contiguous (and of ``dtype``) where it lives: copied only when it is not.

    Host arrays go through ``np.ascontiguousarray``; GPU arrays are copied (and
    cast) on the GPU by the ``contiguous`` kernel, never through the host.
    """
    if not is_cuda_array(a):
        return np.ascontiguousarray(a, dtype)
    a = native(a)
    if a.is_c_contiguous() and (dtype is None or a.dtype == np.dtype(dtype)):
        return a
    return kernel("contiguous", "cuda")(a, dtype)


def flat(a: Any, dtype: Any = None) -> Any:
    """``a`` as a C-contiguous 1-D array (of ``dtype``) where it lives: a view when it can be."""
    a = contiguous(a, dtype)
    return a.reshape(a.size)


def copy_into(target: Any, values: Any) -> None:
    """Write ``values`` (of ``target``'s size) into the caller's C-contiguous ``target``.

    A GPU ``target`` is written by the driver: device to device from GPU ``values``.
    """
    if is_cuda_array(target):
        native(target).copy_to_device(contiguous(values).reshape(tuple(target.shape)))
    else:
        target[...] = to_host(values).reshape(target.shape)


def take(a: Any, key: tuple[Any, ...], lead: int) -> Any:
    """``a[key]`` for a NumPy-style ``key`` on the first ``lead`` axes, where ``a`` lives.

    On the GPU the rows are copied C-contiguous there: integer index arrays in
    ``key`` (host arrays, as :func:`tritnum._validate.leading_key` gives them) are
    resolved to row numbers on the host and the rows gathered by the GPU.
    """
    if not is_cuda_array(a):
        return a[key]
    if not any(isinstance(k, np.ndarray) for k in key):
        return contiguous(a[key])
    head, tail = tuple(a.shape[:lead]), tuple(a.shape[lead:])
    rows = np.arange(math.prod(head), dtype=np.int64).reshape(head)[key]
    out = kernel("take_rows", "cuda")(contiguous(a).reshape(math.prod(head), math.prod(tail)),
                                      to_gpu(rows.reshape(-1)))
    return out.reshape((*rows.shape, *tail))


def copy_of(a: Any) -> Any:
    """A C-contiguous copy of ``a`` where it lives (on the GPU: copied device to device)."""
    if not is_cuda_array(a):
        return np.array(a, order="C")
    from numba import cuda

    out = cuda.device_array(tuple(a.shape), a.dtype)
    copy_into(out, a)
    return out


def as_rows(a: Any, tail: int = 1) -> Any:
    """``a`` reshaped to ``(rows, *a.shape[-tail:])`` (a view whenever NumPy can make one).

    GPU arrays reshape only when contiguous: a strided one is copied first, on the GPU.
    """
    if a.ndim == tail + 1:
        return a
    if is_cuda_array(a):
        a = contiguous(a)
    lead = a.shape[: a.ndim - tail]
    return a.reshape((math.prod(lead), *a.shape[a.ndim - tail:]))


@dataclass(frozen=True)
class Origin:
    """Where an input lived and in which framework, to hand results back in kind.

    ``framework`` is ``"numpy"``, ``"numba"`` (a numba device array), ``"cupy"``
    or ``"torch"``; ``device`` is the torch device of a tensor.
    """

    framework: str = "numpy"
    on_gpu: bool = False
    device: Any = None

    def native(self, result: Any) -> Any:
        """``result`` where the input lived, as kernels hold it (NumPy or numba)."""
        return to_gpu(result) if self.on_gpu else to_host(result)

    def wrap(self, result: Any) -> Any:
        """``result`` (an array, a NumPy scalar or a tuple of them) in the input's framework."""
        if isinstance(result, tuple):
            return tuple(self.wrap(r) for r in result)
        if self.framework == "torch":
            import torch

            if self.on_gpu:
                return torch.as_tensor(to_gpu(result), device=self.device)
            host = to_host(result)
            if host.ndim == 0 or not host.flags.writeable:
                return torch.as_tensor(host.copy())
            return torch.from_numpy(host)
        if not self.on_gpu:
            return result if isinstance(result, (np.ndarray, np.generic)) else to_host(result)
        result = to_gpu(result)
        if self.framework == "cupy":
            import cupy

            return cupy.asarray(result)
        return result


HOST = Origin()


def origin(x: Any) -> Origin:
    """The :class:`Origin` of an input (an ``Origin`` is its own origin)."""
    if type(x) is np.ndarray:  # the common case, first: every public op calls this
        return HOST
    if isinstance(x, Origin):
        return x
    if is_torch(x):
        return Origin("torch", x.device.type == "cuda", x.device)
    if is_cuda_array(x):
        cupy = type(x).__module__.partition(".")[0] == "cupy"
        return Origin("cupy" if cupy else "numba", True)
    return HOST
