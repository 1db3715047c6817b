"""Compile kernels ahead of their first real call."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ._config import CACHE
from ._dispatch import cuda_available, kernel
from ._formats import FORMATS
from .typing import Device

WEIGHTS = np.ones((2, 256), np.float32)
# rows of 256 inputs past the CPU's small layers (``_kernels/cpu/small_linear.py``, 2**20
# weights), which take a route of their own
LARGE_LAYER_ROWS = 4100
# rows of 1024 inputs past the weights of other formats the CPU keeps a "2bit" copy of
# (``small_linear.KEEP_2BIT_TRITS``, 2**22)
LARGE_WEIGHTS_ROWS = 4097


def warmup(device: Device = "auto") -> float:
    """Compile (or load from numba's cache) the kernels of every family.

    With the disk cache on and more than one CPU thread, the CPU kernels compile in
    as many processes at once (each family in one of them, into the cache); this
    process then loads them all.

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
    devices = {"auto": ["cpu", *(["cuda"] if cuda_available() else [])]}.get(device, [device])
    start = time.perf_counter()
    if "cpu" in devices:
        _compile_apart()
    for step in STEPS:
        for dev in devices:
            step(dev)
    for dev in devices:  # the CPU thread pool's spin-waits: the inputs above are too small for it
        kernel("warm_threads", dev)()
    return time.perf_counter() - start


def _compile_apart() -> None:
    """Run the CPU steps in :func:`_parts` at once, all but the first in child processes.

    Only with numba's disk cache on (the children compile into it) and more than one
    thread; a child that fails leaves its kernels to this process's own pass.
    """
    from ._isa import CACHEABLE
    from ._threads import threads

    parts = min(threads(), len(STEPS))
    if not (CACHE and CACHEABLE) or parts < 2:
        return
    children = [_start(i, parts) for i in range(1, parts)]
    try:
        _part(0, parts)
    finally:
        for child in children:
            child.wait()


def _start(index: int, parts: int) -> subprocess.Popen:
    """A child process running :func:`_part` ``(index, parts)`` with this tritnum.

    Run in the folder above this package, whose ``tritnum`` it imports first.
    """
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, "-c", f"from tritnum._warmup import _part; _part({index}, {parts})"],
        cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _part(index: int, parts: int) -> None:
    """The CPU steps ``index``, ``index + parts``, ... of :data:`STEPS`."""
    for step in STEPS[index::parts]:
        step("cpu")


def _warm_packing(dev: str) -> None:
    """Rows that fill whole units of every format and rows that do not.

    int64 trits are what ``np.random.Generator.integers`` gives.
    """
    from .packing import pack

    for n, dtype in ((320, np.int8), (7, np.int8), (7, np.int64)):
        trits = np.zeros((2, n), dtype)
        for name in FORMATS:
            packed = pack(trits, name, device=dev)
            packed.unpack(device=dev)
            for other in FORMATS:
                packed.to(other, device=dev)


def _warm_quantize(dev: str) -> None:
    """Quantize float32 and float64 weights in every format; absmax per row and per tensor."""
    from .quantize import quantize, quantize_activations

    for x in (WEIGHTS, WEIGHTS.astype(np.float64)):  # float64: NumPy's random numbers
        for name in FORMATS:
            quantize(x, format=name, device=dev).dequantize(device=dev)
        for axis in (-1, None):  # per row (one fused pass) and per tensor
            quantize_activations(x, axis=axis, device=dev)


def _warm_gguf(dev: str) -> None:
    """Every GGUF block type both ways, float16 input widened."""
    from .io import from_gguf_blocks, to_gguf_blocks

    for qtype in ("TQ2_0", "TQ1_0", "I2_S"):
        to_gguf_blocks(WEIGHTS.astype(np.float16), qtype, device=dev)
        blocks = to_gguf_blocks(WEIGHTS, qtype, device=dev)
        for ternary in (False, True):
            from_gguf_blocks(blocks, qtype, WEIGHTS.shape, ternary=ternary, device=dev)


def _linear_step(name: str) -> Callable[[str], None]:
    """``linear`` on weights in format ``name``: one activation row, a few (GEMV) and many."""
    def step(dev: str) -> None:
        from .matmul import linear
        from .quantize import quantize

        # a small layer (the one-call route of a few rows) and one past it (the GEMV)
        for out in (2, LARGE_LAYER_ROWS):
            w = quantize(np.resize(WEIGHTS, (out, 256)), format=name, device=dev)
            for rows in (1, 4, 64):
                for activations in ("float", "int8", "q8_k"):
                    linear(np.ones((rows, 256), np.float32), w, activations=activations,
                           device=dev)
        if name == "2bit":  # the GEMV's group paths of their own: groups of whole lanes
            # (96 inputs), rows not of whole blocks, and each dot of groups inside a block
            for n, size in ((768, 96), (320, 32), (256, 32), (256, 64), (256, 128), (512, 256)):
                w = quantize(np.resize(WEIGHTS, (8, n)), format=name, group_size=size,
                             device=dev)
                for activations in ("float", "int8"):
                    linear(np.ones((1, n), np.float32), w, activations=activations, device=dev)
            # the integer GEMM's partial steps of 16 inputs, a kernel of their own
            w = quantize(np.resize(WEIGHTS, (LARGE_LAYER_ROWS, 264)), format=name, device=dev)
            linear(np.ones((64, 264), np.float32), w, activations="int8", device=dev)
        if name == "base3":  # the CPU's GEMV: a row of groups of 4096+ on weights past 4M trits
            w = quantize(np.resize(WEIGHTS, (1025, 4096)), format=name, device=dev)
            for activations in ("float", "int8"):
                linear(np.ones((1, 4096), np.float32), w, activations=activations, device=dev)
        if name != "2bit":  # weights past 4M trits, transcoded for each call: the int8 GEMV's
            # dots of each group size (on 2bit codes kept, VNNI CPUs with GFNI take another)
            large = np.resize(WEIGHTS, (LARGE_WEIGHTS_ROWS, 1024))
            for size in (32, 64, 128, 256, 512):
                w = quantize(large, format=name, group_size=size, device=dev)
                linear(np.ones((1, 1024), np.float32), w, activations="int8", device=dev)
    return step


def _warm_vsa(dev: str) -> None:
    """Every VSA kernel, dense and bitplane (int8 and int64 trits for the check)."""
    from . import vsa

    for fmt in ("dense", "bitplane"):
        v = vsa.random(2, 70, format=fmt, device=dev)
        vsa.level(3, 70, format=fmt, device=dev)  # the vsa.mixed kernel, circular's too
        for rule in ("mul", "mod3"):
            vsa.unbind(vsa.bind(v, v, rule=rule, device=dev), v, rule=rule, device=dev)
        one = vsa.random(1, 70, format=fmt, device=dev)  # one pair: kernels of its own
        vsa.bind(one, one, device=dev)
        for weights in (None, [1, 2], [0.5, 1.0]):
            vsa.bundle(v, weights=weights, device=dev)
        vsa.permute(v, 3, device=dev)
        vsa.similarity(v, v, device=dev)
        vsa.search(v, v, 1, device=dev)  # small d: the int8 dots
        wide = vsa.random(2, 1100, format=fmt, device=dev)  # past INT8_MAX_D: the bit planes
        vsa.search(wide, wide, 1, device=dev)
        vsa.Centroid(device=dev).fit(v, [0, 1])  # the vsa.class_sums kernel
    vsa.negate(np.zeros((2, 3), np.int64), device=dev)


def _warm_hdc(dev: str) -> None:
    """The HDC classifiers' kernels, with the class vectors' dtypes they take."""
    H = np.ones((2, 70), np.int8)
    kernel("hdc.row_norms", dev)(H)
    kernel("hdc.add_rows", dev)(np.zeros((2, 70), np.int64), H, np.array([0, 1]))
    kernel("hdc.phase_trits", dev)(np.zeros((2, 70), np.float32), np.zeros(70, np.float32),
                                   np.float32(0.25), H)
    norms, t = np.ones(2), np.array([0, 1])
    for W in (np.zeros((2, 70)), np.zeros((2, 70), np.int64)):  # OnlineHD's, SparseHD's
        kernel("hdc.cosines", dev)(H, W, norms)
        kernel("hdc.mistake_pass", dev)(W, H, t, 1.0, 32, False, norms, np.array([3]),
                                        H[:, :1].copy())
    kernel("hdc.near_normal", dev)(np.zeros(70, np.uint64), np.empty(70, np.float32))
    kernel("hdc.project_trits", dev)(np.zeros((2, 3), np.float32), np.zeros((3, 70), np.float32),
                                     np.zeros(70, np.float32), np.float32(0.25), H)


def _warm_compress(dev: str) -> None:
    """The sketch kernels for float32 and float64 gradients, with and without error feedback."""
    from .compress import ErrorFeedback, compress, decompress

    for dtype in (np.float32, np.float64):
        g = np.ones(70, dtype)
        decompress(compress(g, 4, 0, device=dev), device=dev)
        ErrorFeedback(4, 0, device=dev)(g)


# the steps, the heaviest (linear's) first: :func:`_part` deals them out in turn
STEPS: tuple[Callable[[str], None], ...] = (
    *(_linear_step(name) for name in FORMATS), _warm_quantize, _warm_gguf, _warm_packing,
    _warm_vsa, _warm_hdc, _warm_compress)
