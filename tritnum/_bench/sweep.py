"""The sweep: every public op over its modes, each row against NumPy's dense equivalent.

``python -m tritnum bench --family sweep``. Where the other families measure the sizes
the issues name, the sweep looks for slow paths nobody measured: ``tn.linear`` over
formats ("2bit", "base3", "bitplane") x scale kinds (per tensor, per row, groups of 32 ...
4096) x activation modes (float, int8, q8_k) x batch (1, 16, 256) x threads (1, 2) x
widths (64 ... 8192), a covering subset of that product in which every pair of two factors'
values occurs in some row (:func:`pairwise`); ``BitLinear``, ``quantize``,
``quantize_activations``, ``dequantize``, ``pack``/``unpack`` and the VSA ops (dense
and bit-plane, one pair and batched) on small and large inputs.

Each row's baseline is NumPy on the dense equivalent, timed in the same run (BLAS on
the same number of threads for the matmul rows: :func:`tritnum._blas.limit`), and its
``bar`` is the row's *floor*: the least speedup it may have (``FLOORS``). A row below
its floor is marked ("MISSED" in the table, ``meets_bar`` false in the JSON):

============================  =======  ============================================
rows                          floor    why
============================  =======  ============================================
``linear``, batch > 16        0.87     a decode plus the same sgemm: within 15 % of
                                       BLAS (DESIGN §7)
``linear``, batch <= 16       0.67     ``BitLinear`` at least NumPy's speed, ``linear``
                                       within 1.5x of it (issue 29)
``linear`` at width 64        0.33     ``BitLinear`` within 2x of NumPy there
``BitLinear``, batch 1        1.0      (0.5 at width 64; issue 29)
one-pair ``similarity``       0.67     within 1.5x of NumPy's cosine (issue 29)
other small calls             0.125    one-pair ``bind`` within 8x of ``a * b``
large ``pack``/``unpack``     0.8      about ``np.packbits``' speed (DESIGN §7)
other large calls             1.0      packed ternary never slower than dense NumPy
============================  =======  ============================================

A small call moves under 64 KiB (one pair of hypervectors, a layer of width 64).

``--quick`` keeps the floors (ratios hold at every size) and times each row in
:data:`QUICK_TIMING` (repeats, warm-up seconds, rounds): the other families' one
round of 3 calls left single-call outliers in a third of the rows.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .harness import Case, Result, table

FAMILY = "sweep"
GEMM_FLOOR = 1 / 1.15
SMALL_BYTES = 1 << 16
FLOORS = {"gemm": GEMM_FLOOR, "gemv": 1 / 1.5, "gemv64": 1 / 3, "layer": 1.0, "layer64": 0.5,
          "similarity1": 1 / 1.5, "small": 1 / 8, "packing": 0.8, "large": 1.0}

# the linear sweep's factors: full, quick (a minute) and tiny (a test)
LINEAR = {
    "format": ("2bit", "base3", "bitplane"),
    "scales": ("tensor", "row", 32, 64, 128, 256, 4096),
    "activations": ("float", "int8", "q8_k"),
    "batch": (1, 16, 256),
    "threads": (1, 2),
    "width": (64, 256, 1024, 4096, 8192),
}
QUICK_TIMING = (9, 0.05, 3)
MAX_MACS = 1 << 30  # batch x width^2 above this is left out (minutes per row of BLAS)
QUICK = {"width": (64, 256, 1024), "batch": (1, 16, 64)}
TINY = {"scales": ("tensor", 32, 256), "width": (64, 256), "batch": (1, 32), "threads": (1,)}


def pairwise(factors: dict[str, tuple[Any, ...]],
             valid: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    """Rows of ``valid`` combinations in which every pair of two factors' values occurs.

    Greedy: each row is the valid combination that covers the most pairs not yet
    covered (the first such, in the order of the product). Pairs no valid
    combination holds are left out.
    """
    names = list(factors)
    candidates = [dict(zip(names, values, strict=True))
                  for values in itertools.product(*factors.values())]
    candidates = [c for c in candidates if valid(c)]

    def pairs(c: dict[str, Any]) -> set[tuple[Any, ...]]:
        return {(a, c[a], b, c[b]) for a, b in itertools.combinations(names, 2)}

    covers = [pairs(c) for c in candidates]
    left = set().union(*covers)
    rows = []
    while left:
        best = max(range(len(candidates)), key=lambda i: len(covers[i] & left))
        rows.append(candidates[best])
        left -= covers[best]
    return rows


def _valid(c: dict[str, Any]) -> bool:
    """A combination ``tn.linear`` takes, of a size the sweep's time allows."""
    width, scales = c["width"], c["scales"]
    if isinstance(scales, int) and (scales > width or width % scales):
        return False
    if c["activations"] == "q8_k" and (width % 256 or (isinstance(scales, int) and scales % 256)):
        return False
    return c["batch"] * width * width <= MAX_MACS


def _floor(kind: str, nbytes: int, width: int | None = None) -> float:
    """The least speedup of a row of ``kind`` moving ``nbytes`` (``FLOORS``)."""
    if kind in ("gemm", "gemv", "layer") and width is not None and width < 256:
        return FLOORS["layer64" if kind == "layer" else "gemv64"]
    if nbytes < SMALL_BYTES and kind not in ("gemm", "gemv", "layer", "similarity1"):
        return FLOORS["small"]
    return FLOORS.get(kind, FLOORS["large"])


def _threads(n: int, call: Callable[[], Any]) -> Callable[[], Any]:
    """``call`` on at most ``n`` of tritnum's threads, and of the BLAS's."""
    from .. import _blas
    from .._threads import limit

    def limited() -> Any:
        with limit(n), _blas.limit(n):
            return call()
    return limited


def linear_cases(factors: dict[str, tuple[Any, ...]], device: str) -> list[Case]:
    """``tn.linear`` over :func:`pairwise` rows of ``factors``, against ``x @ W.T`` dense."""
    import tritnum as tn

    from .._threads import available

    factors = {**factors, "threads": tuple(t for t in factors["threads"] if t <= available())}
    rng = np.random.default_rng(7)
    cases = []
    for c in pairwise(factors, _valid):
        width, batch, scales = c["width"], c["batch"], c["scales"]
        w = rng.standard_normal((width, width)).astype(np.float32)
        kw = ({} if scales == "tensor" else {"axis": -1} if scales == "row"
              else {"group_size": scales})
        q = tn.quantize(w, format=c["format"], **kw)
        dense = tn.dequantize(q)
        x = rng.standard_normal((batch, width)).astype(np.float32)
        kind = "gemm" if batch > 16 else "gemv"
        name = (f"linear {batch}x{width}x{width} {c['format']} {scales} {c['activations']}"
                f" {c['threads']}t")
        cases.append(Case(
            FAMILY, name,
            _threads(c["threads"], lambda x=x, q=q, a=c["activations"]: tn.linear(
                x, q, activations=a, device=device)),
            "x @ W.T dense (BLAS, same threads)",
            _threads(c["threads"], lambda x=x, d=dense: x @ d.T),
            _floor(kind, x.nbytes + dense.nbytes, width),
            params={"op": "linear", **c, "kind": kind}))
    return cases


def layer_cases(widths: Iterable[int], device: str) -> list[Case]:
    """``BitLinear`` on one row against NumPy's ``x @ W.T`` on the dense float matrix."""
    import tritnum as tn

    rng = np.random.default_rng(8)
    cases = []
    for width in widths:
        w = rng.standard_normal((width, width)).astype(np.float32)
        layer = tn.BitLinear(w)
        dense = tn.dequantize(tn.quantize(w))
        x = rng.standard_normal((1, width)).astype(np.float32)
        cases.append(Case(FAMILY, f"BitLinear 1x{width}x{width}", lambda x=x, f=layer: f(x),
                          "x @ W.T dense", lambda x=x, d=dense: x @ d.T,
                          _floor("layer", 0, width),
                          params={"op": "BitLinear", "batch": 1, "width": width}))
    return cases


def _absmean(w: np.ndarray, axis: int | None) -> np.ndarray:
    scale = np.maximum(np.abs(w).mean(axis=axis, keepdims=axis is not None), 1e-5)
    return np.clip(np.round(w / scale), -1, 1).astype(np.int8)


def _quantize_activations(x: np.ndarray) -> np.ndarray:
    amax = np.maximum(np.abs(x).max(axis=-1, keepdims=True), 1e-5)
    return np.clip(np.rint(x * (127 / amax)), -128, 127).astype(np.int8)


def quantize_cases(sizes: Iterable[int], device: str) -> list[Case]:
    """``quantize`` (tensor, row, groups), ``quantize_activations``, ``dequantize``, in NumPy."""
    import tritnum as tn

    rng = np.random.default_rng(9)
    cases = []
    for n in sizes:
        w = rng.standard_normal((n, n)).astype(np.float32)
        floor = _floor("large", w.nbytes)
        for label, kw, axis in (("tensor", {}, None), ("row", {"axis": -1}, -1),
                                ("groups of 64", {"group_size": 64}, -1)):
            grouped = w.reshape(n, -1, 64) if "group_size" in kw else w
            cases.append(Case(
                FAMILY, f"quantize {n}x{n} {label}",
                lambda w=w, kw=kw: tn.quantize(w, device=device, **kw),
                "absmean in NumPy", lambda g=grouped, a=axis: _absmean(g, a), floor,
                params={"op": "quantize", "width": n, "scales": label}))
        cases.append(Case(
            FAMILY, f"quantize_activations {n}x{n}",
            lambda w=w: tn.quantize_activations(w, device=device),
            "absmax int8 in NumPy", lambda w=w: _quantize_activations(w), floor,
            params={"op": "quantize_activations", "width": n}))
        q = tn.quantize(w)
        trits, scale = tn.unpack(q.packed), np.float32(q.scales)
        cases.append(Case(
            FAMILY, f"dequantize {n}x{n}", lambda q=q: tn.dequantize(q, device=device),
            "int8 trits * scale", lambda t=trits, s=scale: t * s, floor,
            params={"op": "dequantize", "width": n}))
    return cases


def packing_cases(sizes: Iterable[int], device: str) -> list[Case]:
    """``pack``/``unpack`` of each format against ``np.packbits``/``np.unpackbits``."""
    import tritnum as tn

    rng = np.random.default_rng(10)
    cases = []
    for n in sizes:
        t = rng.integers(-1, 2, n, dtype=np.int8)
        bits = t > 0
        packed_bits = np.packbits(bits)
        floor = _floor("packing", t.nbytes)
        for fmt in tn.FORMATS:
            p = tn.pack(t, fmt)
            cases.append(Case(FAMILY, f"pack {n} {fmt}",
                              lambda t=t, f=fmt: tn.pack(t, f, device=device),
                              "np.packbits", lambda b=bits: np.packbits(b), floor,
                              params={"op": "pack", "format": fmt, "size": n}))
            cases.append(Case(FAMILY, f"unpack {n} {fmt}",
                              lambda p=p: tn.unpack(p, device=device),
                              "np.unpackbits", lambda b=packed_bits: np.unpackbits(b), floor,
                              params={"op": "unpack", "format": fmt, "size": n}))
    return cases


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    af, bf = a.astype(np.float32), b.astype(np.float32)
    return (af * bf).sum(-1) / np.sqrt((af * af).sum(-1) * (bf * bf).sum(-1))


def vsa_cases(dims: Iterable[int], batch: int, memory: int, device: str) -> list[Case]:
    """bind, bundle, permute, similarity, search: dense and bit-plane, one pair and batched.

    NumPy works on the dense int8 vectors: ``a * b``, the sign of a sum, ``np.roll``,
    a float32 cosine, and a float32 product with the memory (kept as float32) for search.
    """
    return [case for d, rows, fmt in itertools.product(dims, (1, batch), ("dense", "bitplane"))
            for case in _vsa_ops(d, rows, fmt, memory, device)]


def _vsa_ops(d: int, rows: int, fmt: str, memory: int, device: str) -> list[Case]:
    """:func:`vsa_cases`' rows of ``rows`` pairs of ``d``-trit vectors in format ``fmt``."""
    import tritnum as tn

    a, b = tn.vsa.random(rows, d, seed=1), tn.vsa.random(rows, d, seed=2)
    mem = tn.vsa.random(memory, d, seed=3)
    memf = mem.astype(np.float32)
    norms = np.sqrt((memf * memf).sum(-1))
    pa, pb, pm = (v if fmt == "dense" else tn.pack(v, "bitplane") for v in (a, b, mem))
    size = a.nbytes + b.nbytes
    ops = [
        ("bind", lambda: tn.vsa.bind(pa, pb, device=device), "a * b", lambda: a * b,
         _floor("bind", size)),
        ("permute", lambda: tn.vsa.permute(pa, 1, device=device), "np.roll",
         lambda: np.roll(a, 1, axis=-1), _floor("permute", size)),
        ("similarity", lambda: tn.vsa.similarity(pa, pb, device=device), "float32 cosine",
         lambda: _cosine(a, b), _floor("similarity1" if rows == 1 else "similarity", size)),
        ("search", lambda: tn.vsa.search(pa, pm, device=device),
         f"float32 product with {memory} rows",
         lambda: np.argmax((a.astype(np.float32) @ memf.T) / norms, axis=-1),
         _floor("search", size + mem.nbytes)),
    ]
    if rows > 1:  # a bundle of one vector is itself
        ops.append(("bundle", lambda: tn.vsa.bundle(pa, device=device), "sign of the sum",
                    lambda: np.sign(a.sum(0, dtype=np.int32)).astype(np.int8),
                    _floor("bundle", size)))
    one = "one pair" if rows == 1 else f"{rows} pairs"
    return [Case(FAMILY, f"{op} d={d} {one} {fmt}", run, base_name, base, floor,
                 params={"op": op, "width": d, "batch": rows, "format": fmt})
            for op, run, base_name, base, floor in ops]


def sweep_cases(quick: bool = False, device: str = "auto", tiny: bool = False) -> list[Case]:
    """The sweep's rows; ``quick``: widths up to 1024 (a minute); ``tiny``: a few, for a test."""
    if tiny:
        return (linear_cases({**LINEAR, **TINY}, device) + layer_cases((64,), device)
                + quantize_cases((64,), device) + packing_cases((1000,), device)
                + vsa_cases((256,), 8, 64, device))
    return (linear_cases({**LINEAR, **QUICK} if quick else LINEAR, device)
            + layer_cases((64, 256, 1024) if quick else (64, 256, 1024, 4096), device)
            + quantize_cases((256, 1024) if quick else (256, 4096), device)
            + packing_cases((1 << 10, 1 << 18) if quick else (1 << 10, 1 << 22), device)
            + vsa_cases((256, 10_000), 100 if quick else 1000, 1000, device))


def marked(results: Iterable[Result]) -> list[Result]:
    """The sweep's rows below their floor."""
    return [r for r in results if r.family == FAMILY and r.meets_bar is False]


def summary(results: Iterable[Result]) -> str:
    """How many sweep rows ran, by op, and every row below its floor, as a table."""
    rows = [r for r in results if r.family == FAMILY]
    low = marked(rows)
    ops: dict[str, list[int]] = {}
    for r in rows:
        counts = ops.setdefault(str(r.params.get("op")), [0, 0])
        counts[0] += 1
        counts[1] += r in low
    lines = [f"sweep: {len(rows)} rows, {len(low)} below their floor "
             + "(" + ", ".join(f"{op} {n - m}/{n} ok" for op, (n, m) in ops.items()) + ")"]
    if low:
        lines += ["rows below their floor:", table(low)]
    return "\n".join(lines)
