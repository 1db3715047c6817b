"""Gradient compression: compress + decompress against the same projection in torch dense ops."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .gpu import gpu_torch, put
from .harness import Case
from .matmul import copy_bandwidth

RATIO = 16
SEED = 0


def torch_round_trip(torch: Any, key: int, m: int) -> Callable[[Any], Any]:
    """``g -> P^T P g`` for tritnum's projection ``P`` in torch tensor ops.

    ``P`` has ``m`` rows and signs keyed ``key``. The hash runs in int64 arithmetic
    (wrapping products; logical shifts by masking), the signs are expanded to float32 and
    the stripes summed through an ``(r, m)`` view. The signs are made once for both
    directions (a torch user would keep them for the step).
    """
    from .._kernels.shared import vsa as hv

    def signed(c: Any) -> int:  # an unsigned 64-bit constant as the int64 of its bits
        c = int(c)
        return c - (1 << 64) if c >= 1 << 63 else c

    low31 = (1 << 31) - 1

    def fmix(x: Any) -> Any:
        for multiplier in (hv._M1, hv._M2):
            x = (x ^ ((x >> 33) & low31)) * signed(multiplier)
        return x ^ ((x >> 33) & low31)

    def run(g: Any) -> Any:
        n = g.numel()
        r = -(-n // m)
        words = fmix(torch.arange(-(-n // 64), device=g.device) * signed(hv.COLUMN)
                     + signed(key))
        j = torch.arange(n, device=g.device)
        signs = ((words.repeat_interleave(64)[:n] >> (j & 63)) & 1).float() * 2 - 1
        s = torch.nn.functional.pad(g * signs, (0, r * m - n)).view(r, m).sum(0)
        return s.repeat(r)[:n] * signs

    return run


def compression_cases(quick: bool, device: str) -> list[Case]:
    """``decompress(compress(g, 16))`` of a float32 gradient against :func:`torch_round_trip`.

    100 M elements (4 M with ``quick``), torch on the same cores; the issue's bar is 5x.
    """
    from ..compress import _key, compress, decompress

    n = 1 << 22 if quick else 100_000_000
    m = math.ceil(n / RATIO)
    g = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    dg = put(g, device)
    out = put(np.empty(n, np.float32), device)
    sketch = compress(dg, RATIO, SEED, device=device)
    bandwidth = None if device == "cuda" else copy_bandwidth()
    moved = 4 * n + 4 * n + 8 * m  # read g, write the estimate; write and read the sketch

    def note(seconds: float) -> str:
        from .harness import time_call

        into = min(time_call(lambda: decompress(sketch, out=out, device=device))
                   + time_call(lambda: compress(dg, RATIO, SEED, device=device))
                   for _ in range(3))
        text = (f"{moved / seconds / 1e9:.1f} GB/s moved ({moved / 2**20:.0f} MiB); "
                f"with out= {into * 1e3:.1f} ms")
        if bandwidth is not None:
            text += f"; floor at copy bandwidth {moved / bandwidth * 1e3:.1f} ms"
        return text

    def ours() -> Any:
        return decompress(compress(dg, RATIO, SEED, device=device), device=device)

    try:
        import torch
    except ImportError:
        return [Case("compress", f"compress+decompress {n // 10**6} M x{RATIO}", ours,
                     "numpy reference", lambda: decompress(compress(
                         g, RATIO, SEED, device="numpy"), device="numpy"), None, 3, note)]
    import numba

    on = "cuda" if device == "cuda" and gpu_torch() is not None else "cpu"
    torch.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    tg = torch.from_numpy(g).to(on)
    baseline = torch_round_trip(torch, _key(SEED), m)
    return [Case("compress", f"compress+decompress {n // 10**6} M x{RATIO}", ours,
                 "torch dense ops, same P", lambda: baseline(tg), 5.0, 5, note)]
