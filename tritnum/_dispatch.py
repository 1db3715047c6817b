"""Device policy, and calls into the kernel registry with arguments where kernels read them.

Kernels register per ``(operation, device)`` (:mod:`tritnum._registry`). Backend
modules are imported on first use, so ``import tritnum`` neither imports numba nor
touches CUDA.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from . import _config
from ._interop import HOST, for_device, is_cuda_array, origin
from ._registry import _BACKENDS, _REGISTRY, kernel, register  # noqa: F401  (tables read by tests)
from ._validate import choice
from .errors import DeviceUnavailableError
from .typing import Device

__all__ = [
    "call",
    "cuda_available",
    "get_device",
    "implementation",
    "implements",
    "kernel",
    "place",
    "register",
    "resolve_device",
    "set_device",
    "use_device",
]

# public functions behind Python operators of classes defined in other modules (x @ w.T)
_OPERATORS: dict[str, Callable[..., Any]] = {}

_default_device: str = _config.DEFAULT_DEVICE  # process-wide, set by set_device
# use_device overrides it for the code inside a with block (this thread or task only)
_override: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "tritnum_device_override", default=None
)
_warned_fallback = False


def call(op: str, device: str, *args: Any, **buffers: Any) -> Any:
    """Run ``op`` on the resolved ``device``, its array arguments moved where the kernel reads.

    Positional NumPy and GPU arrays are inputs: moved to ``device`` (no copy
    when they already live there); other positional arguments (formats, sizes,
    None) pass as they are. Keyword arguments are buffers the kernel writes
    into where they are (a host ``out=``), passed untouched.
    """
    fn = kernel(op, device)
    if device != "cuda" and all(type(a) is np.ndarray
                                or not (isinstance(a, np.ndarray) or is_cuda_array(a))
                                for a in args):
        return fn(*args, **buffers)  # host arrays for a host kernel: nothing to move
    return fn(*(
        for_device(a, device) if isinstance(a, np.ndarray) or is_cuda_array(a) else a
        for a in args
    ), **buffers)


def place(result: Any, like: Any, shape: tuple[int, ...] | None = None) -> Any:
    """``result`` handed back where, and in the framework in which, ``like`` lives.

    ``like`` is the caller's input (or its :class:`~tritnum._interop.Origin`):
    NumPy in gives NumPy out, GPU arrays stay on the GPU (CuPy as CuPy), and
    PyTorch tensors give tensors on their device. ``shape`` reshapes the
    kernel's output (rows) on the way.
    """
    like = origin(like)
    if like is HOST and type(result) is np.ndarray:  # NumPy in, NumPy out: nothing to move
        return result if shape is None else result.reshape(shape)
    if shape is not None:
        result = like.native(result).reshape(shape)
    return like.wrap(result)


def implements(operator: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``fn`` as the public function behind ``operator`` (e.g. ``"matmul"``).

    A class's operator method looks its function up with :func:`implementation`, so
    the module of the class need not import the module of the function.
    """

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        _OPERATORS[operator] = fn
        return fn

    return decorate


def implementation(name: str) -> Callable[..., Any]:
    """The public function registered for the Python operator ``name``."""
    return _OPERATORS[name]


@functools.cache
def cuda_available() -> bool:
    """Whether a CUDA GPU (or numba's CUDA simulator) can run tritnum's kernels.

    Returns
    -------
    bool
        False when numba-cuda is not installed or no GPU is visible.

    Examples
    --------
    >>> import tritnum as tn
    >>> isinstance(tn.cuda_available(), bool)
    True
    """
    try:
        from numba import cuda
    except ImportError:
        return False
    try:
        return bool(cuda.is_available())
    except Exception:  # a broken driver is "not available", not a crash
        return False


def _cuda_hint() -> str:
    """What to do about a missing GPU: install numba-cuda, or (installed) check the driver."""
    import importlib.util

    if importlib.util.find_spec("numba_cuda") is None:
        from ._extras import missing

        return missing("tritnum's CUDA kernels", "cuda")
    return "numba-cuda is installed: check the NVIDIA driver (nvidia-smi)"


def _check_name(device: str) -> str:
    return choice(device, "device", _config.DEVICES)


def set_device(device: Device) -> None:
    """Set the default device of every tritnum operation, in every thread.

    Parameters
    ----------
    device : {"auto", "cpu", "cuda", "numpy"}
        ``"auto"`` follows the data: arrays on the GPU run there, NumPy arrays
        on the CPU kernels. ``"numpy"`` is the pure-NumPy reference.

    Examples
    --------
    >>> import tritnum as tn
    >>> tn.set_device("cpu")
    >>> tn.get_device()
    'cpu'
    >>> tn.set_device("auto")
    """
    global _default_device
    _default_device = _check_name(device)


def get_device() -> Device:
    """The current default device (see :func:`set_device`).

    Examples
    --------
    >>> import tritnum as tn
    >>> tn.get_device() in ("auto", "cpu", "cuda", "numpy")
    True
    """
    override = _override.get()
    return _default_device if override is None else override


def host_cpu(device: str) -> bool:
    """Whether ``device`` sends host data to the CPU kernels (as :func:`resolve_device` does).

    The check of the host routes that skip the general dispatch (a few µs a call).
    """
    return device == "cpu" or (device == "auto" and get_device() in ("auto", "cpu"))


@contextlib.contextmanager
def use_device(device: Device) -> Iterator[None]:
    """Context manager that overrides the default device inside a ``with`` block.

    The override holds for the code in the block (in this thread, or this
    asyncio task); :func:`set_device` changes the default of the whole process.

    Parameters
    ----------
    device : {"auto", "cpu", "cuda", "numpy"}
        The default device inside the block (as for :func:`set_device`).

    Yields
    ------
    None
        The previous default comes back when the block exits, even on an exception.

    Raises
    ------
    ValueError
        An unknown device name.

    Examples
    --------
    >>> import tritnum as tn
    >>> with tn.use_device("numpy"):
    ...     tn.get_device()
    'numpy'
    """
    token = _override.set(_check_name(device))
    try:
        yield
    finally:
        _override.reset(token)


def _fallback_warning() -> None:
    global _warned_fallback
    if not _warned_fallback:
        _warned_fallback = True
        warnings.warn(
            "tritnum's default device is 'cuda' but no usable GPU was found; running on "
            "the CPU instead. Silence this with tn.set_device('auto') or TRITNUM_DEVICE=auto.",
            RuntimeWarning,
            stacklevel=4,
        )


def resolve_device(device: str, *arrays: Any) -> str:
    """The concrete device (``numpy``, ``cpu`` or ``cuda``) an operation runs on.

    An explicit ``device`` argument wins and ``"cuda"`` without a GPU raises
    :class:`DeviceUnavailableError`. ``"auto"`` defers to the default device;
    a default of ``"auto"`` follows the data, and a default of ``"cuda"``
    without a GPU falls back to the CPU with one warning per process.
    """
    if _check_name(device) != "auto":
        if device == "cuda" and not cuda_available():
            raise DeviceUnavailableError(
                "device='cuda' was requested but no usable CUDA GPU was found "
                f"({_cuda_hint()}, or use device='cpu')"
            )
        return device
    default = get_device()
    if default == "auto":
        return "cuda" if any(is_cuda_array(a) for a in arrays) else "cpu"
    if default == "cuda" and not cuda_available():
        _fallback_warning()
        return "cpu"
    return default
