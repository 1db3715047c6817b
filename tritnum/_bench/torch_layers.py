"""tritnum.torch: a frozen BitLinear against ``nn.Linear``, and what the torch boundary costs."""

from __future__ import annotations

import statistics
from typing import Any

from .harness import Case, time_call


def _interleaved_medians(a: Any, b: Any, repeats: int) -> tuple[float, float]:
    """Median seconds of ``a`` and of ``b``, timed alternately (drift hits both alike)."""
    a(), b()
    ta, tb = [], []
    for _ in range(repeats):
        ta.append(time_call(a))
        tb.append(time_call(b))
    return statistics.median(ta), statistics.median(tb)


def torch_cases(quick: bool, device: str) -> list[Case]:
    """Frozen BitLinear forward (batch 1, int8 activations) against float32 ``nn.Linear``.

    The note gives the cost of the torch boundary per call: the layer's median time
    minus that of :func:`tritnum.linear` on NumPy arrays of the same data, the two timed
    alternately. No rows without torch, or on the GPU (the bars are for CPU cores).
    """
    try:
        import torch
    except ImportError:
        return []
    if device == "cuda":
        return []
    import numba

    from ..matmul import linear
    from ..torch import BitLinear

    torch.set_num_threads(numba.get_num_threads())
    n = 2048 if quick else 4096
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        dense = torch.nn.Linear(n, n, bias=False)
        dense.weight.copy_(torch.randn(n, n, generator=gen))
    layer = BitLinear.from_linear(dense).eval()
    w = layer.ternary_weight()
    x = torch.randn(1, n, generator=gen)
    xn = x.numpy()

    def frozen() -> Any:
        with torch.no_grad():
            return layer(x)

    def float_linear() -> Any:
        with torch.no_grad():
            return dense(x)

    def boundary(seconds: float) -> str:
        ours, plain = _interleaved_medians(frozen, lambda: linear(xn, w, activations="int8"),
                                           5 if quick else 200)
        return (f"torch boundary {(ours - plain) * 1e6:.0f} us per call "
                f"(tn.linear on NumPy {plain * 1e3:.3f} ms)")

    return [Case("torch", f"BitLinear eval batch 1 {n}x{n} int8", frozen,
                 "nn.Linear float32 (torch)", float_linear, 5.0, None, boundary)]
