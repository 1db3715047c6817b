"""``linear`` with many rows on CUDA through PyTorch's cuBLAS: weights decoded once, then GEMMs.

Opt-in (``TRITNUM_CUDA_GEMM=torch``; the default ``numba`` keeps :func:`.matmul.gemm_tiles`),
because it trades memory for speed: the packed weights are decoded on the GPU once
(:func:`.packing.unpack`) into a dense ``(out, in)`` matrix that is kept while the packed
device array lives: 1 byte per weight (int8 trits) for int8 activations, 4 bytes
(float32 trits) for float ones, against 2 bits packed. Weights copied to the GPU on every
call (host weights, ``device="cuda"``) are decoded on every call.

The rule, checked by :func:`use_torch`: the GEMM branch (more than
``GEMV_MAX_ROWS`` activation rows), PyTorch with a CUDA device, and a scale-group size
(``in / groups``) that is a multiple of 8; the int8 path also needs ``out % 8 == 0`` and
more than 16 rows (``torch._int_mm``'s cuBLASLt shapes). Otherwise the numba kernel runs.

Arithmetic (:func:`linear`): per scale group one matmul of the group's columns on the
tensor cores, then :func:`scale_group` (one pass, numba) adds it times the group's scales
into a float64 sum and, after the last group, multiplies by ``xscale``, adds ``bias`` in
float64 and rounds to float32 once into ``y``: the order of the numba kernels.

- int8: ``torch._int_mm`` (int8 tensor cores, exact int32 sums while ``in * 127 < 2**31``),
  so the result equals the numba kernels' bit for bit.
- float: ``torch.matmul`` in float32 on float32 trits; its precision is PyTorch's
  ``torch.set_float32_matmul_precision`` ("highest": float32 FMA, the default; "high":
  TF32 tensor cores; "medium": bfloat16), the caller's choice. The group sums are float32,
  so the result differs from the numba kernel's by float32 rounding.

Floors (H100 SXM: 1979 int8 TOPS, 989 fp16/bf16 TFLOP/s, 495 TF32, 67 fp32; 3.35 TB/s
HBM): the matmuls ``2 m in out`` operations and ``in out`` (int8) or ``4 in out`` (float32)
weight bytes; :func:`scale_group` ``8 m out`` bytes for one group, ``20 m out`` per group
with more (the float64 sum read and written), and a contiguous copy of each group's
columns of ``x``. At 4096 x 4096 x 4096 int8, one group:
69 µs of tensor cores and 40 µs of epilogue. The decode, once: ``in out / 4`` bytes read,
``in out`` written.

Untested on a GPU until one is lent: the zero-copy hand-over (``__cuda_array_interface__``
both ways), the streams (numba's and torch's default streams, the legacy stream, both) and
the timing. :func:`linear` runs in the CUDA simulator lane with CPU torch tensors standing
in for CUDA ones (:class:`Bridge`).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import cuda, float64

from ..._config import CUDA_GEMM
from ..._formats import Format
from ..._interop import native
from ._launch import THREADS, blocks
from .epilogue import finish
from .packing import unpack

INT_MM_MIN_ROWS = 17  # torch._int_mm on CUDA needs m > 16, in and out multiples of 8
ALIGN = 8

_decoded: dict[int, dict[str, Any]] = {}  # by id() of the packed device array, while it lives


@dataclass(frozen=True)
class Bridge:
    """torch, and the hand-over of arrays between numba and torch (zero-copy on a GPU)."""

    torch: Any
    to_torch: Callable[[Any], Any]
    to_numba: Callable[[Any], Any]


@functools.cache
def cuda_bridge() -> Bridge | None:
    """The bridge to torch on the GPU, or None without torch or without a CUDA device."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return Bridge(torch, lambda a: torch.as_tensor(a, device="cuda"), native)


def use_torch(m: int, n: int, out: int, groups: int, int8: bool, backend: str = CUDA_GEMM,
              bridge: Bridge | None = None) -> bool:
    """Whether :func:`linear` runs (see the module's rule); ``bridge`` defaults to the GPU's."""
    if backend != "torch" or (bridge or cuda_bridge()) is None or (n // groups) % ALIGN:
        return False
    return not int8 or (m >= INT_MM_MIN_ROWS and out % ALIGN == 0)


@cuda.jit
def scale_group(part, scales, gi, xscale, bias, acc, y):
    """Add group ``gi``'s sums ``part`` (int32 or float32 ``(m, out)``) times its scales.

    Into the float64 ``acc`` (empty with one group), or after the last group into ``y``
    through :func:`.epilogue.finish` (``xscale``, ``bias``; empty where absent).
    """
    m, out = y.shape
    last = gi == scales.shape[1] - 1
    for i in range(cuda.grid(1), m * out, cuda.gridsize(1)):
        r = i // out
        o = i - r * out
        a = float64(scales[o, gi]) * float64(part[r, o])
        if gi != 0:
            a += acc[r, o]
        if last:
            y[r, o] = finish(a, xscale, r, bias, o)
        else:
            acc[r, o] = a


def _weights(bridge: Bridge, w: Any, fmt: Format, n: int, groups: int, int8: bool) -> Any:
    """The decoded trits of the packed device weights ``w``, made once: ``(groups, out, g)``.

    Each group's block is contiguous, so that every matmul gets the ``x @ W.T`` layout
    of ``torch.nn.functional.linear``.
    """
    key = ("int8" if int8 else "float32", groups)
    if id(w) not in _decoded:  # device arrays need not hash: by id, dropped when w goes
        _decoded[id(w)] = {}
        weakref.finalize(w, _decoded.pop, id(w), None)
    cache = _decoded[id(w)]
    if key not in cache:
        trits, _ = unpack(w, fmt, n)  # linear validated the weights before
        t = bridge.to_torch(trits)
        t = t if int8 else t.to(bridge.torch.float32)
        cache[key] = t.reshape(t.shape[0], groups, n // groups).transpose(0, 1).contiguous()
    return cache[key]


def linear(x: Any, xscale: Any, w: Any, fmt: Format, n: int, scales: Any, bias: Any, y: Any,
           bridge: Bridge | None = None) -> None:
    """``y[:] = linear(...)``: the matmuls in torch, the epilogue here (see the module).

    Arguments as :func:`.matmul.gemv_rows` (``xscale`` and ``bias`` empty where absent).
    """
    bridge = bridge or cuda_bridge()
    m, out = y.shape
    groups = scales.shape[1]
    g = n // groups
    int8 = xscale.shape[0] != 0
    mm = bridge.torch._int_mm if int8 else bridge.torch.matmul
    xt = bridge.to_torch(x)
    wt = _weights(bridge, w, fmt, n, groups, int8)
    acc = cuda.device_array((m, out) if groups > 1 else (0, 0), np.float64)
    for gi in range(groups):
        xg = xt if groups == 1 else xt[:, gi * g:(gi + 1) * g].contiguous()
        part = bridge.to_numba(mm(xg, wt[gi].t()))
        scale_group[blocks(m * out), THREADS](part, scales, gi, xscale, bias, acc, y)
