"""Quantization cases: tn.quantize and the GGUF block codecs against NumPy and ``gguf``."""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .gpu import put
from .harness import Case


def _numpy_quantize(w: np.ndarray) -> np.ndarray:
    """The straightforward NumPy expression of BitNet absmean, then NumPy 2bit packing."""
    scale = max(np.abs(w).mean(), 1e-5)
    trits = np.clip(np.rint(w / scale), -1, 1).astype(np.int8)
    codes = (trits + 1).astype(np.uint8).reshape(w.shape[0], -1, 4)
    return codes[..., 0] | codes[..., 1] << 2 | codes[..., 2] << 4 | codes[..., 3] << 6


def quantization_cases(side: int, device: str) -> list[Case]:
    """tn.quantize and the GGUF block codecs on a ``side x side`` float32 matrix."""
    from ..io import from_gguf_blocks, to_gguf_blocks
    from ..quantize import quantize

    w = np.random.default_rng(1).standard_normal((side, side), dtype=np.float32)
    wd = put(w, device)
    values = np.empty_like(w)  # the decoders' reused output (out=)
    bufs = {}
    cases = [Case("quantize", "quantize 2bit", lambda: quantize(wd, device=device),
                  "numpy expression", lambda: _numpy_quantize(w), 5.0, 3,
                  params={"op": "quantize", "format": "2bit", "values": w.size,
                          "vs": "numpy expression"})]
    try:
        from gguf import GGMLQuantizationType, quants
    except ImportError:
        return cases
    for qtype, bar in (("TQ2_0", 10.0), ("TQ1_0", 20.0)):
        kind = getattr(GGMLQuantizationType, qtype)
        buf = quants.quantize(w, kind)
        buf_on = bufs[qtype] = put(buf, device)
        cases += [
            Case("gguf", f"to_gguf_blocks {qtype}",
                 lambda q=qtype: to_gguf_blocks(wd, q, device=device),
                 "gguf.quants.quantize", lambda k=kind: quants.quantize(w, k), bar, 3,
                 params={"op": "encode", "format": qtype, "values": w.size, "vs": "gguf"}),
            Case("gguf", f"from_gguf_blocks {qtype}",
                 lambda q=qtype, b=buf_on: from_gguf_blocks(b, q, w.shape, device=device),
                 "gguf.quants.dequantize", lambda k=kind, b=buf: quants.dequantize(b, k), bar, 3,
                 params={"op": "decode", "format": qtype, "values": w.size, "vs": "gguf"}),
            Case("gguf", f"from_gguf_blocks {qtype} out=",
                 lambda q=qtype, b=buf_on: from_gguf_blocks(b, q, w.shape, out=values,
                                                            device=device),
                 "gguf.quants.dequantize", lambda k=kind, b=buf: quants.dequantize(b, k), bar, 3,
                 params={"op": "decode out=", "format": qtype, "values": w.size, "vs": "gguf"}),
        ]
    # the floors: reading the float32 input once (encoders), writing the float32 values
    # once on every core, into fresh memory and into out= (decoders); speedup = how far
    # tritnum is from them
    if device != "cuda":
        cases += [
            Case("gguf", "read the input (floor)", lambda: w.max(), "to_gguf_blocks "
                 "TQ2_0", lambda: to_gguf_blocks(w, "TQ2_0", device=device)),
            Case("gguf", "write fresh values (floor)",
                 lambda: fill_on_all_cores(np.empty_like(w)),
                 "from_gguf_blocks TQ2_0", lambda: from_gguf_blocks(
                     bufs["TQ2_0"], "TQ2_0", w.shape, device=device)),
            Case("gguf", "write values to out= (floor)", lambda: fill_on_all_cores(values),
                 "from_gguf_blocks TQ1_0 out=", lambda: from_gguf_blocks(
                     bufs["TQ1_0"], "TQ1_0", w.shape, out=values, device=device)),
        ]
    return cases


def fill_on_all_cores(out: np.ndarray) -> np.ndarray:
    """``out.fill(1)``, one contiguous part per thread (``numba.get_num_threads()``)."""
    import numba

    parts = np.array_split(out.reshape(-1), numba.get_num_threads())
    pool = _thread_pool(len(parts))
    for f in [pool.submit(p.fill, 1) for p in parts]:
        f.result()
    return out


@functools.cache
def _thread_pool(threads: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(threads)

