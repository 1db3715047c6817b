"""The harness: a :class:`Case` (tritnum against a baseline), its timing and the table."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


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
    work: Any = None  # a gpu.Work: the floor that --device cuda rows are reported against
    # what the row measures, for plots and tables (``report`` lists the keys): op, size, mode...
    params: dict[str, Any] = field(default_factory=dict)


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
    params: dict[str, Any] = field(default_factory=dict)  # the case's, as given


def time_call(fn: Callable[[], Any]) -> float:
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


# Each side is timed in this many alternating blocks (cases without a repeat limit): the
# speed of these virtual machines drifts by 10-25 % over seconds, and timed in one block
# each, a ratio of two fast calls moved by as much between runs (the same 4096x4096 GEMV
# rows: 0.76x-1.16x); in three it falls on both sides alike.
ROUNDS = 3


def measure(case: Case, repeats: int, warmup: float = WARMUP_SECONDS,
            rounds: int = ROUNDS) -> Result:
    """Time each side ``repeats`` times, in ``rounds`` alternating blocks.

    Each block first warms its side up (at least once, for ``warmup`` seconds).
    Back-to-back runs of one side keep the other's allocations (the baselines make
    large temporaries) from charging page faults to it. Cases with a repeat limit
    (slow baselines) take one block.
    """
    rounds = 1 if case.repeats else max(1, min(rounds, repeats))
    repeats = min(repeats, case.repeats or repeats)
    ours: list[float] = []
    theirs: list[float] = []
    for r in range(rounds):
        n = repeats // rounds + (r < repeats % rounds)
        _warm(case.run, warmup)
        ours += [time_call(case.run) for _ in range(n)]
        _warm(case.baseline, warmup)
        theirs += [time_call(case.baseline) for _ in range(n)]
    t, b = statistics.median(ours), statistics.median(theirs)
    speedup = b / t
    return Result(case.family, case.name, t, case.baseline_name, b, speedup, case.bar,
                  None if case.bar is None else speedup >= case.bar,
                  case.note(t) if case.note else "", dict(case.params))


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
