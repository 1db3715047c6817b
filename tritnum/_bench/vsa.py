"""VSA cases: tn.vsa against torchhd's MAP model (or NumPy expressions without torchhd)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._extras import install_hint
from .gpu import Work, gpu_torch, put
from .harness import Case


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
    from ..packing import pack
    from ..vsa import bind, bundle, random, search

    n_bind, n_memory = 1000, 10_000
    mem = random(n_memory, d, seed=1)
    a, b = mem[:n_bind], random(n_bind, d, seed=2)
    q = random(1, d, seed=3)
    da, db, dmem, dq = (put(x, device) for x in (a, b, mem, q))
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
                     lambda s: f"torchhd not installed ({install_hint('bench')}): bar skipped",
                     params=_params(name, "bitplane", d, "numpy"))
                for name, (fn, _), (base_name, base) in
                ((k, ours[k], skipped[k]) for k in ours)]
    import torch

    on = "cuda" if device == "cuda" and gpu_torch() is not None else "cpu"
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
                  5, memory_note if name.startswith("random") else None,
                  _work(name, pmem.nbytes // n_memory, n_memory, n_bind),
                  _params(name, "bitplane", d, "torchhd"))
             for name, (fn, bar) in ours.items()]
    dense_runs = {
        "search 1 x 10k (dot)": lambda: search(dq, dmem, 1, "dot", device=device),
        "bundle 1000": lambda: bundle(da, device=device),
        "bind 1000 pairs": lambda: bind(da, db, device=device),
        "random 1000": lambda: random(n_bind, d, device=device),
    }
    cases += [Case("vsa", f"{name} dense", fn, baselines[name][0], baselines[name][1], None, 5,
                   None, _work(name, d, n_memory, n_bind, planes=False),
                   _params(name, "dense", d, "torchhd"))
              for name, fn in dense_runs.items()]
    if on == "cuda":  # the batched rows on the CPU are vsa_torch.batch_search_cases
        cases.append(_batch_search_case(th, d))
    return cases


def _params(name: str, fmt: str, d: int, vs: str) -> dict[str, Any]:
    """A row's ``params`` (see ``report``): the op, the format, its sizes and baseline kind."""
    op = name.split()[0]
    count = {"search": 10_000, "bundle": 1000, "bind": 1000, "random": 1000}[op]
    return {"op": op, "format": fmt, "d": d, "n": count, "queries": 1 if op == "search" else None,
            "threads": None, "vs": vs}


def _work(name: str, row: int, n_memory: int, n: int, planes: bool = True) -> Work:
    """The floor of a VSA row of ``row`` bytes per hypervector.

    A dot search on bit planes also counts 2 popcounts per word column and row; the
    other rows (and int8 rows) are bound by memory alone.
    """
    if name.startswith("search"):
        return Work(row * (n_memory + 1), n_memory * row // 8 if planes else 0, "popc")
    moved = {"bundle": n + 1, "bind": 3 * n, "random": n}[name.split()[0]]
    return Work(row * moved)


def _batch_search_case(th: Any, d: int) -> Case:
    """1,000 queries x 100,000 rows on the GPU against torchhd's dot (one float32 GEMM)."""
    import torch

    from ..packing import pack
    from ..vsa import random, search

    nq, m = 1000, 100_000
    mem, q = random(m, d, seed=11, device="cuda"), random(nq, d, seed=12, device="cuda")
    pmem, pq = pack(mem, "bitplane"), pack(q, "bitplane")
    tmem, tq = (torch.as_tensor(x, device="cuda").float() for x in (mem, q))
    row = pmem.nbytes // m
    return Case("vsa", f"search {nq} x {m // 1000}k (dot) bitplane",
                lambda: search(pq, pmem, 1, "dot", device="cuda"),
                "torchhd dot_similarity f32", lambda: th.dot_similarity(tq, tmem), None, 3,
                None, Work(row * (m + nq), nq * m * row // 8, "popc"))

