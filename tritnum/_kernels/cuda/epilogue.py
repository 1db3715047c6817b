"""The last step of every CUDA linear kernel: a row's float64 sum to its float32 output."""

from __future__ import annotations

from numba import cuda, float32, float64


@cuda.jit(device=True, inline="always")
def finish(acc, xscale, r, bias, o):
    """The float32 output from a row's float64 sum: times ``xscale[r]``, plus ``bias[o]``.

    An empty ``xscale`` or ``bias`` is absent.
    """
    if xscale.shape[0] != 0:
        acc *= float64(xscale[r])
    if bias.shape[0] != 0:
        acc += float64(bias[o])
    return float32(acc)
