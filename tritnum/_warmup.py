"""Compile kernels ahead of their first real call."""

from __future__ import annotations

import time

import numpy as np

from ._dispatch import cuda_available
from ._formats import FORMATS


def warmup(device: str = "auto") -> float:
    """Compile (or load from numba's cache) every packing kernel now.

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
    from .packing import pack

    devices = {"auto": ["cpu", *(["cuda"] if cuda_available() else [])]}.get(device, [device])
    start = time.perf_counter()
    # one row that fills whole units of every format (fast paths), one that does not
    for n in (320, 7):
        trits = np.zeros((2, n), np.int8)
        for dev in devices:
            for name in FORMATS:
                packed = pack(trits, name, device=dev)
                packed.unpack(device=dev)
                for other in FORMATS:
                    packed.to(other, device=dev)
    return time.perf_counter() - start
