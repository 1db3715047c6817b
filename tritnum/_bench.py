"""``python -m tritnum bench``: each kernel family against its baseline, in one run.

Every row times tritnum and its baseline in the same process and reports the
median of each and the speedup (baseline time / tritnum time).
``bar`` is the speedup the project's issues ask for on 2 CPU cores.
"""

from __future__ import annotations

import functools
import json
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from ._formats import FORMATS


@dataclass
class Case:
    """One measurement: tritnum's ``run`` against ``baseline`` on the same data."""

    family: str
    name: str
    run: Callable[[], Any]
    baseline_name: str
    baseline: Callable[[], Any]
    bar: float | None = None  # required speedup, if any
    repeats: int | None = None  # fewer for slow baselines
    note: Callable[[float], str] | None = None  # more figures from tritnum's median seconds


@dataclass
class Result:
    """The medians of one :class:`Case`."""

    family: str
    name: str
    seconds: float
    baseline_name: str
    baseline_seconds: float
    speedup: float
    bar: float | None
    meets_bar: bool | None
    note: str = ""


def _time(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# Each side first runs untimed for this long. OpenBLAS's and torch's OpenMP threads spin
# for a while after a call (torch's for more than 0.3 s here) on the same two cores, and
# after an idle pause this machine's cores run slower for a while (a short kernel measured
# right after 1 s of sleep takes twice as long): busy warm-up covers both.
WARMUP_SECONDS = 0.5


def _warm(fn: Callable[[], Any], seconds: float) -> None:
    end = time.perf_counter() + seconds
    fn()
    while time.perf_counter() < end:
        fn()


def measure(case: Case, repeats: int, warmup: float = WARMUP_SECONDS) -> Result:
    """Warm each side up (at least once, for ``warmup`` seconds), then time it ``repeats`` times.

    Back-to-back runs of one side keep the other's allocations (the baselines make
    large temporaries) from charging page faults to it.
    """
    repeats = min(repeats, case.repeats or repeats)
    _warm(case.run, warmup)
    ours = [_time(case.run) for _ in range(repeats)]
    _warm(case.baseline, warmup)
    theirs = [_time(case.baseline) for _ in range(repeats)]
    t, b = statistics.median(ours), statistics.median(theirs)
    speedup = b / t
    return Result(case.family, case.name, t, case.baseline_name, b, speedup, case.bar,
                  None if case.bar is None else speedup >= case.bar,
                  case.note(t) if case.note else "")


def _put(a: np.ndarray, device: str) -> Any:
    """``a`` where ``device``'s kernels read it: on the GPU for ``"cuda"`` (no copy is timed)."""
    from ._interop import to_gpu

    return to_gpu(a) if device == "cuda" else a


def _gpu_torch() -> Any:
    """The torch module where it runs on a GPU (the baselines of ``--device cuda``), or None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _synced(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` followed by waiting for the GPU, so that its time is the GPU's work."""
    from numba import cuda

    def run() -> Any:
        result = fn()
        cuda.synchronize()  # numba and torch share the device's primary context
        return result
    return run


def on_gpu(case: Case) -> Case:
    """``case`` timed on the GPU: both sides synchronized, no bar (the bars are for 2 cores)."""
    return replace(case, run=_synced(case.run), baseline=_synced(case.baseline), bar=None)


def packing_cases(rows: int, cols: int, device: str) -> list[Case]:
    """pack/unpack of ``rows x cols`` trits against np.packbits and the NumPy reference."""
    from .packing import pack, unpack

    rng = np.random.default_rng(0)
    host = rng.integers(-1, 2, size=(rows, cols), dtype=np.int8)
    trits = _put(host, device)
    bools = host > 0
    bits = np.packbits(bools)
    cases = []
    for name in FORMATS:
        packed, packed_host = pack(trits, name, device=device), pack(host, name)
        # DESIGN §7 bars: 2bit pack <= 1.25x and unpack <= 1x the bit baselines, others <= 2x
        pack_bar, unpack_bar = (0.8, 1.0) if name == "2bit" else (0.5, 0.5)
        cases += [
            Case("packing", f"pack {name}", lambda n=name: pack(trits, n, device=device),
                 "np.packbits", lambda: np.packbits(bools), pack_bar),
            Case("packing", f"unpack {name}", lambda p=packed: unpack(p, device=device),
                 "np.unpackbits", lambda: np.unpackbits(bits), unpack_bar),
            Case("packing", f"pack {name}", lambda n=name: pack(trits, n, device=device),
                 "numpy reference", lambda n=name: pack(host, n, device="numpy"), 10.0, 3),
            Case("packing", f"unpack {name}", lambda p=packed: unpack(p, device=device),
                 "numpy reference", lambda h=packed_host: unpack(h, device="numpy"),
                 10.0, 3),
        ]
    for src, dst in [("2bit", "base3"), ("base3", "bitplane"), ("bitplane", "2bit")]:
        packed, packed_host = pack(trits, src, device=device), pack(host, src)
        cases.append(Case(
            "packing", f"{src} -> {dst}", lambda p=packed, d=dst: p.to(d, device=device),
            "numpy reference", lambda p=packed_host, d=dst: p.to(d, device="numpy"), None, 3))
    return cases


def _numpy_quantize(w: np.ndarray) -> np.ndarray:
    """The straightforward NumPy expression of BitNet absmean, then NumPy 2bit packing."""
    scale = max(np.abs(w).mean(), 1e-5)
    trits = np.clip(np.rint(w / scale), -1, 1).astype(np.int8)
    codes = (trits + 1).astype(np.uint8).reshape(w.shape[0], -1, 4)
    return codes[..., 0] | codes[..., 1] << 2 | codes[..., 2] << 4 | codes[..., 3] << 6


def quantization_cases(side: int, device: str) -> list[Case]:
    """tn.quantize and the GGUF block codecs on a ``side x side`` float32 matrix."""
    from .io import from_gguf_blocks, to_gguf_blocks
    from .quantize import quantize

    w = np.random.default_rng(1).standard_normal((side, side), dtype=np.float32)
    wd = _put(w, device)
    values = np.empty_like(w)  # the decoders' reused output (out=)
    bufs = {}
    cases = [Case("quantize", "quantize 2bit", lambda: quantize(wd, device=device),
                  "numpy expression", lambda: _numpy_quantize(w), 5.0, 3)]
    try:
        from gguf import GGMLQuantizationType, quants
    except ImportError:
        return cases
    for qtype, bar in (("TQ2_0", 10.0), ("TQ1_0", 20.0)):
        kind = getattr(GGMLQuantizationType, qtype)
        buf = quants.quantize(w, kind)
        buf_on = bufs[qtype] = _put(buf, device)
        cases += [
            Case("gguf", f"to_gguf_blocks {qtype}",
                 lambda q=qtype: to_gguf_blocks(wd, q, device=device),
                 "gguf.quants.quantize", lambda k=kind: quants.quantize(w, k), bar, 3),
            Case("gguf", f"from_gguf_blocks {qtype}",
                 lambda q=qtype, b=buf_on: from_gguf_blocks(b, q, w.shape, device=device),
                 "gguf.quants.dequantize", lambda k=kind, b=buf: quants.dequantize(b, k), bar, 3),
            Case("gguf", f"from_gguf_blocks {qtype} out=",
                 lambda q=qtype, b=buf_on: from_gguf_blocks(b, q, w.shape, out=values,
                                                            device=device),
                 "gguf.quants.dequantize", lambda k=kind, b=buf: quants.dequantize(b, k), bar, 3),
        ]
    # the floors: reading the float32 input once (encoders), writing the float32 values
    # once on every core, into fresh memory and into out= (decoders); speedup = how far
    # tritnum is from them
    if device != "cuda":
        cases += [
            Case("gguf", "read the input (floor)", lambda: w.max(), "to_gguf_blocks "
                 "TQ2_0", lambda: to_gguf_blocks(w, "TQ2_0", device=device)),
            Case("gguf", "write fresh values (floor)",
                 lambda: _fill_on_all_cores(np.empty_like(w)),
                 "from_gguf_blocks TQ2_0", lambda: from_gguf_blocks(
                     bufs["TQ2_0"], "TQ2_0", w.shape, device=device)),
            Case("gguf", "write values to out= (floor)", lambda: _fill_on_all_cores(values),
                 "from_gguf_blocks TQ1_0 out=", lambda: from_gguf_blocks(
                     bufs["TQ1_0"], "TQ1_0", w.shape, out=values, device=device)),
        ]
    return cases


def _fill_on_all_cores(out: np.ndarray) -> np.ndarray:
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


def copy_bandwidth() -> float:
    """Bytes per second read plus written by a 256 MiB ``np.copyto`` (median of 5)."""
    src = np.ones(1 << 26, np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    return 2 * src.nbytes / statistics.median(_time(lambda: np.copyto(dst, src))
                                              for _ in range(5))


def peak_extra_bytes(fn: Callable[[], Any]) -> int:
    """Peak bytes that ``fn`` allocates through Python and NumPy while it runs (tracemalloc)."""
    import tracemalloc

    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _gemv_note(w: Any, threads: int, bandwidth: float | None,
               memory: str) -> Callable[[float], str]:
    """Effective GB/s of packed weights (vs copy bandwidth) and multiply-adds per core.

    Without ``bandwidth`` (on the GPU) only the GB/s.
    """
    def note(seconds: float) -> str:
        rate = w.packed.nbytes / seconds
        if bandwidth is None:
            return f"{rate / 1e9:.1f} GB/s packed"
        return (f"{rate / 1e9:.1f} GB/s packed ({rate / bandwidth:.0%} of copy), "
                f"{w.packed.size / seconds / threads / 1e9:.1f} G MAC/s/core{memory}")
    return note


def matmul_cases(quick: bool, device: str) -> list[Case]:
    """tn.linear against float32 ``x @ W.T`` with the dense matrix.

    The baseline is NumPy's (OpenBLAS); with ``device="cuda"`` it is torch's on the GPU
    (cuBLAS) where torch sees one, and both sides' data live on the GPU.
    """
    import numba

    from .matmul import linear
    from .packing import pack
    from .quantize import TernaryTensor

    rng = np.random.default_rng(2)
    threads = numba.get_num_threads()
    gpu = device == "cuda"
    torch = _gpu_torch() if gpu else None
    bandwidth = None if gpu else copy_bandwidth()
    # the bars hold for the sizes; --quick only checks that everything runs
    sizes = [(1, 2048, 2048, (None, None)), (64, 2048, 2048, (None, None))] if quick else [
        (1, 4096, 4096, (3.0, 5.0)), (1, 16384, 8192, (None, 6.0)),
        (256, 4096, 4096, (0.85, 0.85))]
    cases = []
    for rows, out, n, bars in sizes:
        trits = rng.integers(-1, 2, (out, n), dtype=np.int8)
        w = TernaryTensor(pack(_put(trits, device)), np.float32(0.05))
        dense = trits * np.float32(0.05)
        del trits
        x = rng.standard_normal((rows, n), dtype=np.float32)
        x = x[0] if rows == 1 else x
        base_name, base = "x @ W.T (BLAS)", lambda x=x, d=dense: x @ d.T
        if torch is not None:
            tx, td = torch.from_numpy(x).cuda(), torch.from_numpy(dense).cuda()
            base_name, base = "x @ W.T (torch, cuBLAS)", lambda x=tx, d=td: x @ d.T
        xd = _put(x, device)
        kind = "GEMV" if rows == 1 else f"GEMM {rows} rows"
        for act, bar in zip(("float", "int8"), bars, strict=True):
            memory = ""
            if rows == 1 and out * n >= 1 << 27 and not gpu:  # peak-memory bar: <= 10% of W
                linear(x, w, activations=act, device=device)  # compiled, weights checked
                peak = peak_extra_bytes(lambda x=x, w=w, a=act: linear(x, w, activations=a,
                                                                          device=device))
                memory = f", peak extra {peak / 2**20:.2f} MiB ({peak / dense.nbytes:.3%} of W)"
            note = _gemv_note(w, threads, bandwidth, memory) if rows == 1 else None
            cases.append(Case(
                "matmul", f"linear {kind} {out}x{n} {act}",
                lambda x=xd, w=w, a=act: linear(x, w, activations=a, device=device),
                base_name, base, bar, 5 if rows > 1 else None, note))
    return cases


def _torchhd() -> Any:
    """The torchhd module (torch set to tritnum's threads), or None without the bench extra."""
    try:
        import torch
        import torchhd
    except ImportError:
        return None
    import numba

    torch.set_num_threads(numba.get_num_threads())
    return torchhd


def vsa_cases(d: int, device: str) -> list[Case]:
    """tn.vsa against torchhd's MAP model on the same hypervectors (DESIGN §7 VSA bars).

    Without torchhd (the ``bench`` extra) the bars are reported as skipped against
    NumPy expressions of the same operations.
    """
    from .packing import pack
    from .vsa import bind, bundle, random, search

    n_bind, n_memory = 1000, 10_000
    mem = random(n_memory, d, seed=1)
    a, b = mem[:n_bind], random(n_bind, d, seed=2)
    q = random(1, d, seed=3)
    da, db, dmem, dq = (_put(x, device) for x in (a, b, mem, q))
    pa, pb, pmem, pq = (pack(x, "bitplane") for x in (da, db, dmem, dq))
    th = _torchhd()
    per_hv = pack(q[0], "bitplane").nbytes

    def memory_note(seconds: float) -> str:
        return f"{per_hv} B per hypervector (bitplane) vs float32 {4 * d} B, int8 {d} B"

    ours = {
        "search 1 x 10k (dot)": (lambda: search(pq, pmem, 1, "dot", device=device), 10.0),
        "bundle 1000": (lambda: bundle(pa, device=device), 5.0),
        "bind 1000 pairs": (lambda: bind(pa, pb, device=device), 3.0),
        "random 1000": (lambda: random(n_bind, d, format="bitplane", device=device), 10.0),
    }
    if th is None:
        skipped = {
            "search 1 x 10k (dot)": ("numpy int8 dot", lambda: mem @ q[0]),
            "bundle 1000": ("numpy sign(sum)", lambda: np.sign(a.sum(0, dtype=np.int32))),
            "bind 1000 pairs": ("numpy int8 multiply", lambda: a * b),
            "random 1000": ("numpy integers", lambda: np.random.default_rng(0).integers(
                -1, 2, (n_bind, d), dtype=np.int8)),
        }
        return [Case("vsa", f"{name} bitplane", fn, base_name, base, None, 3,
                     lambda s: "torchhd not installed (pip install tritnum[bench]): bar skipped")
                for name, (fn, _), (base_name, base) in
                ((k, ours[k], skipped[k]) for k in ours)]
    import torch

    on = "cuda" if device == "cuda" and _gpu_torch() is not None else "cpu"
    ta, tmem, tq = (torch.from_numpy(x.astype(np.float32)).to(on) for x in (a, mem, q))
    ia, ib = torch.from_numpy(a).to(on), torch.from_numpy(b).to(on)
    baselines = {
        "search 1 x 10k (dot)": ("torchhd dot_similarity f32",
                                 lambda: th.dot_similarity(tq, tmem)),
        "bundle 1000": ("torchhd multiset f32", lambda: th.multiset(ta)),
        "bind 1000 pairs": ("torchhd bind int8", lambda: th.bind(ia, ib)),
        "random 1000": ("torchhd random MAP",
                        lambda: th.random(n_bind, d, "MAP", device=on)),
    }
    cases = [Case("vsa", f"{name} bitplane", fn, baselines[name][0], baselines[name][1], bar,
                  5, memory_note if name.startswith("random") else None)
             for name, (fn, bar) in ours.items()]
    dense_runs = {
        "search 1 x 10k (dot)": lambda: search(dq, dmem, 1, "dot", device=device),
        "bundle 1000": lambda: bundle(da, device=device),
        "bind 1000 pairs": lambda: bind(da, db, device=device),
        "random 1000": lambda: random(n_bind, d, device=device),
    }
    cases += [Case("vsa", f"{name} dense", fn, baselines[name][0], baselines[name][1], None, 5)
              for name, fn in dense_runs.items()]
    return cases


FAMILIES = ("packing", "quantize", "gguf", "matmul", "vsa")


def run(*, quick: bool = False, device: str = "auto", cols: int = 16000,
        rows: int | None = None, families: tuple[str, ...] = FAMILIES) -> list[Result]:
    """Measure the cases of ``families``; ``quick``: less data, 3 repeats, one warm-up call."""
    rows = rows or (1024 if quick else 4096)
    repeats = 3 if quick else 15
    builders = {
        "packing": lambda: packing_cases(rows, cols, device),
        "quantize": lambda: quantization_cases(
            max(256, 256 * round(np.sqrt(rows * cols / 4) / 256)), device),
        "matmul": lambda: matmul_cases(quick, device),
        "vsa": lambda: vsa_cases(10_000, device),
    }
    wanted = set(families)
    if "gguf" in wanted:  # built with the quantization cases
        wanted.add("quantize")
    cases = [case for name, build in builders.items() if name in wanted for case in build()]
    if device == "cuda":
        cases = [on_gpu(case) for case in cases]
    warmup = 0.0 if quick else WARMUP_SECONDS
    return [measure(case, repeats, warmup) for case in cases if case.family in families]


def table(results: list[Result]) -> str:
    """The results as a plain-text table."""
    head = ("family", "case", "tritnum ms", "baseline", "baseline ms", "speedup", "bar", "note")
    rows = [head] + [
        (r.family, r.name, f"{r.seconds * 1e3:.2f}", r.baseline_name,
         f"{r.baseline_seconds * 1e3:.2f}", f"{r.speedup:.2f}x",
         "" if r.bar is None else f">={r.bar:g}x {'ok' if r.meets_bar else 'MISSED'}",
         r.note)
        for r in results
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cpu_times() -> list[int] | None:
    """The machine's CPU time counters (``/proc/stat``), or None where there are none."""
    try:
        with open("/proc/stat") as f:
            return [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None


def _steal_fraction(before: list[int] | None, after: list[int] | None) -> float | None:
    """Share of CPU time a hypervisor gave to other machines between two readings."""
    if not before or not after or len(before) < 8:
        return None
    delta = [b - a for a, b in zip(before, after, strict=False)]
    total = sum(delta[:8])
    return delta[7] / total if total > 0 else None


def main(args: Any) -> int:
    """Entry point of ``python -m tritnum bench``."""
    from .__main__ import environment

    env = environment()
    print(f"tritnum bench: {env['cpu']}, {env['threads']} threads, numpy {env['numpy']}, "
          f"numba {env['numba']}; speedup = baseline time / tritnum time (median)")
    if args.device == "cuda":
        from numba import cuda

        name = cuda.get_current_device().name  # bytes in older numba-cuda
        name = name.decode() if isinstance(name, bytes) else name
        print(f"on the GPU: {name}; each side's data lives "
              "where it runs and its time includes waiting for the GPU; no bars (2 CPU cores)")
    before = _cpu_times()
    results = run(quick=args.quick, device=args.device, cols=args.cols, rows=args.rows,
                  families=tuple(args.family or FAMILIES))
    print(table(results))
    steal = _steal_fraction(before, _cpu_times())
    if steal is not None:
        env["steal"] = steal
        print(f"CPU time stolen by the hypervisor during the run: {steal:.0%}"
              + (" (ratios are unreliable: rerun when the host is quieter)" if steal > 0.05
                 else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "results": [asdict(r) for r in results]}, f,
                      indent=2)
    return 0
