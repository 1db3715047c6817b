"""Packing cases: pack/unpack/convert against np.packbits and the NumPy reference."""

from __future__ import annotations

import numpy as np

from .._formats import FORMATS
from .gpu import Work, put
from .harness import Case
from .quantize import fill_on_all_cores


def packing_cases(rows: int, cols: int, device: str) -> list[Case]:
    """pack/unpack of ``rows x cols`` trits against np.packbits and the NumPy reference."""
    from ..packing import pack, unpack

    rng = np.random.default_rng(0)
    host = rng.integers(-1, 2, size=(rows, cols), dtype=np.int8)
    trits = put(host, device)
    bools = host > 0
    bits = np.packbits(bools)
    cases = []
    for name in FORMATS:
        packed, packed_host = pack(trits, name, device=device), pack(host, name)
        work = Work(host.nbytes + packed_host.nbytes)  # trits read, codes written (or back)
        # DESIGN §7 bars: 2bit pack <= 1.25x and unpack <= 1x the bit baselines, others <= 2x
        pack_bar, unpack_bar = (0.8, 1.0) if name == "2bit" else (0.5, 0.5)
        cases += [
            Case("packing", f"pack {name}", lambda n=name: pack(trits, n, device=device),
                 "np.packbits", lambda: np.packbits(bools), pack_bar, work=work,
                 params={"op": "pack", "format": name, "trits": host.size, "vs": "numpy bits"}),
            Case("packing", f"unpack {name}", lambda p=packed: unpack(p, device=device),
                 "np.unpackbits", lambda: np.unpackbits(bits), unpack_bar, work=work,
                 params={"op": "unpack", "format": name, "trits": host.size,
                         "vs": "numpy bits"}),
            Case("packing", f"pack {name}", lambda n=name: pack(trits, n, device=device),
                 "numpy reference", lambda n=name: pack(host, n, device="numpy"), 10.0, 3,
                 work=work, params={"op": "pack", "format": name, "trits": host.size,
                                    "vs": "numpy reference"}),
            Case("packing", f"unpack {name}", lambda p=packed: unpack(p, device=device),
                 "numpy reference", lambda h=packed_host: unpack(h, device="numpy"),
                 10.0, 3, work=work, params={"op": "unpack", "format": name,
                                             "trits": host.size, "vs": "numpy reference"}),
        ]
    if device != "cuda":
        packed2 = pack(host, "2bit")
        # the floors: reading the int8 trits once (packers) and writing them once, on every
        # core, into fresh memory (unpackers; np.unpackbits writes as many fresh bytes);
        # speedup = how far tritnum is from them
        cases += [
            Case("packing", "read the trits (floor)", lambda: host.max(), "pack 2bit",
                 lambda: pack(host, "2bit", device=device)),
            Case("packing", "write fresh trits (floor)",
                 lambda: fill_on_all_cores(np.empty_like(host)), "unpack 2bit",
                 lambda: unpack(packed2, device=device)),
        ]
    for src, dst in [("2bit", "base3"), ("base3", "bitplane"), ("bitplane", "2bit")]:
        packed, packed_host = pack(trits, src, device=device), pack(host, src)
        cases.append(Case(
            "packing", f"{src} -> {dst}", lambda p=packed, d=dst: p.to(d, device=device),
            "numpy reference", lambda p=packed_host, d=dst: p.to(d, device="numpy"), None, 3,
            work=Work(packed_host.nbytes + packed_host.to(dst).nbytes),
            params={"op": "convert", "format": f"{src} -> {dst}", "trits": host.size,
                    "vs": "numpy reference"}))
    return cases

