"""Compile kernels ahead of their first real call."""

from __future__ import annotations

import time

import numpy as np

from ._dispatch import cuda_available, kernel
from ._formats import FORMATS
from .typing import Device


def warmup(device: Device = "auto") -> float:
    """Compile (or load from numba's cache) the kernels of every family.

    Parameters
    ----------
    device : {"auto", "cpu", "cuda"}
        ``"auto"`` warms the CPU kernels, and the CUDA ones when a GPU is usable.

    Returns
    -------
    float
        Seconds spent.

    Examples
    --------
    >>> import tritnum as tn
    >>> tn.warmup("cpu") >= 0
    True
    """
    from .io import from_gguf_blocks, to_gguf_blocks
    from .matmul import linear
    from .packing import pack
    from .quantize import quantize, quantize_activations

    devices = {"auto": ["cpu", *(["cuda"] if cuda_available() else [])]}.get(device, [device])
    start = time.perf_counter()
    # rows that fill whole units of every format and rows that do not; int64 trits are
    # what np.random.Generator.integers gives
    for n, dtype in ((320, np.int8), (7, np.int8), (7, np.int64)):
        trits = np.zeros((2, n), dtype)
        for dev in devices:
            for name in FORMATS:
                packed = pack(trits, name, device=dev)
                packed.unpack(device=dev)
                for other in FORMATS:
                    packed.to(other, device=dev)
    weights = np.ones((2, 256), np.float32)
    for dev in devices:
        for name in FORMATS:
            quantize(weights, format=name, device=dev)
        for x in (weights, weights.astype(np.float64)):  # float32 and float64 absmax kernels
            for axis in (-1, None):  # per row (one fused pass) and per tensor
                quantize_activations(x, axis=axis, device=dev)
        for qtype in ("TQ2_0", "TQ1_0", "I2_S"):
            to_gguf_blocks(weights.astype(np.float16), qtype, device=dev)  # float16 widening
            blocks = to_gguf_blocks(weights, qtype, device=dev)
            for ternary in (False, True):
                from_gguf_blocks(blocks, qtype, weights.shape, ternary=ternary, device=dev)
        for name in FORMATS:  # one activation row, a few (GEMV) and many (GEMM), every path
            w = quantize(weights, format=name, device=dev)
            for rows in (1, 4, 64):
                for activations in ("float", "int8", "q8_k"):
                    linear(np.ones((rows, 256), np.float32), w, activations=activations,
                           device=dev)
        _warm_vsa(dev)
        _warm_compress(dev)
    for dev in devices:  # the CPU thread pool's spin-waits: the inputs above are too small for it
        kernel("warm_threads", dev)()
    return time.perf_counter() - start


def _warm_vsa(dev: str) -> None:
    """Every VSA kernel, dense and bitplane (int8 and int64 trits for the check)."""
    from . import vsa

    for fmt in ("dense", "bitplane"):
        v = vsa.random(2, 70, format=fmt, device=dev)
        vsa.level(3, 70, format=fmt, device=dev)  # the vsa.mixed kernel, circular's too
        for rule in ("mul", "mod3"):
            vsa.unbind(vsa.bind(v, v, rule=rule, device=dev), v, rule=rule, device=dev)
        for weights in (None, [1, 2], [0.5, 1.0]):
            vsa.bundle(v, weights=weights, device=dev)
        vsa.permute(v, 3, device=dev)
        vsa.similarity(v, v, device=dev)
        vsa.search(v, v, 1, device=dev)
        vsa.Centroid(device=dev).fit(v, [0, 1])  # the vsa.class_sums kernel
    vsa.negate(np.zeros((2, 3), np.int64), device=dev)


def _warm_compress(dev: str) -> None:
    """The sketch kernels for float32 and float64 gradients, with and without error feedback."""
    from .compress import ErrorFeedback, compress, decompress

    for dtype in (np.float32, np.float64):
        g = np.ones(70, dtype)
        decompress(compress(g, 4, 0, device=dev), device=dev)
        ErrorFeedback(4, 0, device=dev)(g)
