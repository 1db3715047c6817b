"""Plots and Markdown tables from a ``python -m tritnum bench --json`` file.

Used by the performance page (``docs/performance.md``, executed at build time) and
from the command line::

    python docs/plot_bench.py docs/bench/bench.json OUTDIR    # the PNGs, into OUTDIR
    python docs/plot_bench.py --update-readme docs/bench/bench.json

The second form rewrites the text between ``<!-- bench-table:start -->`` and
``<!-- bench-table:end -->`` in README.md with :func:`headline_table`.

Rows are picked by their ``params`` (the schema: ``tritnum._bench.report``), never by
parsing their names.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after the backend

from tritnum._bench.harness import Result as Row
from tritnum._bench.report import Report, load

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
START, END = "<!-- bench-table:start -->", "<!-- bench-table:end -->"
MODES = ("float", "int8", "q8_k")
COLORS = {"float": "tab:blue", "int8": "tab:orange", "q8_k": "tab:green", "blas": "0.3"}


def _report(source: str | Path | Report) -> Report:
    return source if isinstance(source, Report) else load(source)


def _pick(rows: Iterable[Row], family: str | None = None, **params: Any) -> list[Row]:
    """Rows of ``family`` whose params have all of ``params`` (a missing key counts as None)."""
    return [r for r in rows if (family is None or r.family == family)
            and all(r.params.get(k) == v for k, v in params.items())]


def _gmacs(macs: int, seconds: float) -> float:
    return macs / seconds / 1e9


def _size(p: dict[str, Any]) -> str:
    return f"{p['out']}x{p['in']}"


def _machine_line(rep: Report) -> str:
    m, load = rep.machine, rep.load
    line = (f"{m['cpu']}, {m['cores']} cores, {m['threads']} threads, "
            f"{m['isa']} kernels")
    return line + f"; load average {load['before'][0]:.1f} before, {load['after'][0]:.1f} after"


# -- plots ----------------------------------------------------------------------------------

def _gemv_sizes(rep: Report) -> tuple[list[tuple[int, int]], dict[str, dict]]:
    """The GEMV rows against BLAS at the process's thread count, by mode and size."""
    by_mode: dict[str, dict[tuple[int, int], Row]] = defaultdict(dict)
    for r in _pick(rep.rows, "matmul", op="gemv", vs="blas", threads=None):
        by_mode[r.params["mode"]][(r.params["out"], r.params["in"])] = r
    sizes = sorted({s for rows in by_mode.values() for s in rows}, key=lambda s: s[0] * s[1])
    return sizes, by_mode


def plot_gemv(rep: Report, path: Path) -> Path | None:
    """GEMV rate (G multiply-adds/s) against the matrix size, per mode, with BLAS's."""
    sizes, by_mode = _gemv_sizes(rep)
    if not sizes:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    xs = list(range(len(sizes)))
    blas = []
    for s in sizes:  # each mode's row timed BLAS once: their median
        times = [by_mode[m][s].baseline_seconds for m in MODES if s in by_mode[m]]
        blas.append(_gmacs(s[0] * s[1], statistics.median(times)))
    for mode in MODES:
        pts = [(i, _gmacs(r.params["macs"], r.seconds)) for i, s in enumerate(sizes)
               if (r := by_mode[mode].get(s)) is not None]
        if pts:
            ax.plot(*zip(*pts, strict=True), "o-", color=COLORS[mode],
                    label=f"tritnum, {mode} activations")
    ax.plot(xs, blas, "s--", color=COLORS["blas"], label="NumPy float32 x @ W.T (OpenBLAS)")
    ax.set_xticks(xs, [f"{o}x{n}\n{o * n // 4 / 2**20:g} MiB packed" for o, n in sizes],
                  fontsize=8)
    ax.set_yscale("log")
    ax.set_xlabel("weight matrix (out x in)")
    ax.set_ylabel("G multiply-adds / s (log)")
    ax.set_title("Ternary GEMV (one row of activations) against BLAS")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path, rep)


def plot_gemm(rep: Report, path: Path) -> Path | None:
    """GEMM rate per mode against BLAS, one group of bars per shape."""
    rows = _pick(rep.rows, "matmul", op="gemm", vs="blas", threads=None)
    if not rows:
        return None
    shapes = sorted({(r.params["rows"], r.params["out"], r.params["in"]) for r in rows})
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / (len(MODES) + 1)
    for j, shape in enumerate(shapes):
        here = [r for r in rows if (r.params["rows"], r.params["out"], r.params["in"]) == shape]
        macs = here[0].params["macs"]
        bars = [(m, _gmacs(macs, r.seconds)) for m in MODES for r in here
                if r.params["mode"] == m]
        bars.append(("blas", _gmacs(macs, statistics.median(r.baseline_seconds for r in here))))
        for k, (label, value) in enumerate(bars):
            ax.bar(j + k * width, value, width, color=COLORS[label],
                   label=(f"tritnum, {label} activations" if label != "blas"
                          else "NumPy float32 x @ W.T (OpenBLAS)") if j == 0 else None)
            ax.annotate(f"{value:.0f}", (j + k * width, value), ha="center", va="bottom",
                        fontsize=8)
    ax.set_xticks([j + width * len(MODES) / 2 for j in range(len(shapes))],
                  [f"{n} rows x {o}x{i}" for n, o, i in shapes])
    ax.set_ylabel("G multiply-adds / s")
    ax.set_title("Ternary GEMM against BLAS")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path, rep)


def _speedup_bars(rep: Report, rows: list[Row], label: Callable[[Row], str], title: str,
                  path: Path) -> Path | None:
    """Horizontal bars of speedups (log scale), with each row's bar marked."""
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(10, 0.36 * len(rows) + 1.6))
    ys = list(range(len(rows)))[::-1]
    ax.barh(ys, [r.speedup for r in rows],
            color=[{True: "tab:green", False: "tab:red", None: "tab:blue"}[r.meets_bar]
                   for r in rows])
    for y, r in zip(ys, rows, strict=True):
        ax.annotate(f" {r.speedup:.3g}x", (r.speedup, y), va="center", fontsize=8)
        if r.bar is not None:
            ax.plot([r.bar, r.bar], [y - 0.4, y + 0.4], color="k", lw=1.5)
    ax.set_yticks(ys, [label(r) for r in rows], fontsize=8)
    ax.axvline(1, color="0.3", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("speedup = baseline time / tritnum time (log scale); black tick: the "
                  "target, green: met, red: missed, blue: no target")
    ax.set_title(title)
    ax.grid(True, axis="x", which="both", alpha=0.3)
    return _save(fig, path, rep)


def plot_vsa(rep: Report, path: Path) -> Path | None:
    """VSA speedups against torchhd (or NumPy), torch and NumPy, at d = 10,000."""
    rows = [r for r in rep.rows if r.family == "vsa" and "op" in r.params]
    return _speedup_bars(rep, rows, lambda r: f"{r.name}  vs {r.baseline_name}",
                         "Hypervectors (d = 10,000) against their baselines", path)


def plot_threads(rep: Report, path: Path) -> Path | None:
    """GEMV rate on 1 and 2 threads, per mode, with the scaling written on the bars."""
    rows = _pick(rep.rows, "matmul", op="gemv")
    one = {r.params["mode"]: r for r in rows if r.params.get("threads") == 1}
    two = {r.params["mode"]: r for r in rows if r.params.get("threads") == 2}
    modes = [m for m in MODES if m in one]
    if not modes:
        return None
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, mode in enumerate(modes):
        r1 = one[mode]
        g1 = _gmacs(r1.params["macs"], r1.seconds)
        ax.bar(i - 0.2, g1, 0.4, color="tab:blue", label="1 thread" if i == 0 else None)
        if mode in two:
            r2 = two[mode]
            g2 = _gmacs(r2.params["macs"], r2.seconds)
            ax.bar(i + 0.2, g2, 0.4, color="tab:orange", label="2 threads" if i == 0 else None)
            ax.annotate(f"{r2.speedup:.2f}x", (i + 0.2, g2), ha="center", va="bottom",
                        fontsize=9)
    ax.set_xticks(range(len(modes)), [f"{m} activations" for m in modes])
    ax.set_ylabel("G multiply-adds / s")
    size = _size(one[modes[0]].params)
    ax.set_title(f"GEMV {size} on 1 and 2 threads\n(above the bars: 1-thread time / 2-thread time)",
                 fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path, rep)


def plot_codecs(rep: Report, path: Path) -> Path | None:
    """Packing, quantization and GGUF codec speedups against NumPy and the gguf package."""
    rows = [r for r in rep.rows if r.family in ("packing", "quantize", "gguf")
            and "op" in r.params]
    return _speedup_bars(rep, rows, lambda r: f"{r.name}  vs {r.baseline_name}",
                         "Packing, quantization and GGUF blocks against NumPy and gguf", path)


def _save(fig: Any, path: Path, rep: Report) -> Path:
    fig.text(0.99, 0.005, _machine_line(rep), ha="right", va="bottom", fontsize=6, color="0.4")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


PLOTS = {"gemv": plot_gemv, "gemm": plot_gemm, "vsa": plot_vsa, "threads": plot_threads,
         "codecs": plot_codecs}


def render(json_path: str | Path, out_dir: str | Path) -> list[Path]:
    """Write ``bench_<name>.png`` for each plot the file has rows for; their paths."""
    rep = _report(json_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    made = [plot(rep, out / f"bench_{name}.png") for name, plot in PLOTS.items()]
    return [p for p in made if p is not None]


# -- tables ---------------------------------------------------------------------------------

def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.3g}" if ms < 100 else f"{ms:.0f}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _headline_rows(rep: Report) -> list[tuple[str, Row, str]]:
    """(label, row, rate) of the headline figures present in the file, in order."""
    picks: list[tuple[str, Callable[[Row], bool]]] = []
    for mode in ("float", "int8"):
        picks.append((f"GEMV 4096x4096, {mode} activations",
                      lambda r, m=mode: r.family == "matmul" and r.params.get("op") == "gemv"
                      and r.params.get("vs") == "blas" and r.params.get("threads") is None
                      and r.params.get("mode") == m and r.params.get("out") == 4096
                      and r.params.get("in") == 4096))
    picks.append(("GEMV 16384x8192 (past L3), int8",
                  lambda r: r.family == "matmul" and r.params.get("op") == "gemv"
                  and r.params.get("vs") == "blas" and r.params.get("threads") is None
                  and r.params.get("mode") == "int8" and r.params.get("out") == 16384))
    picks.append(("GEMM 256 rows x 4096x4096, int8",
                  lambda r: r.family == "matmul" and r.params.get("op") == "gemm"
                  and r.params.get("vs") == "blas" and r.params.get("mode") == "int8"))
    picks.append(("pack 2bit",
                  lambda r: r.family == "packing" and r.params.get("op") == "pack"
                  and r.params.get("format") == "2bit" and r.params.get("vs") == "numpy bits"))
    picks.append(("GGUF TQ2_0 decode",
                  lambda r: r.family == "gguf" and r.params.get("op") == "decode"
                  and r.params.get("format") == "TQ2_0"))
    for op, label in (("search", "search 1 x 10,000 (d = 10,000)"),
                      ("bundle", "bundle 1,000 (d = 10,000)")):
        picks.append((label, lambda r, o=op: r.family == "vsa" and r.params.get("op") == o
                      and r.params.get("format") == "bitplane"
                      and r.params.get("vs") in ("torchhd", "numpy")
                      and r.params.get("queries") in (1, None)))
    out = []
    for label, match in picks:
        found = [r for r in rep.rows if r.params and match(r)]
        if found:
            r = found[0]
            rate = (f"{_gmacs(r.params['macs'], r.seconds):.0f} GMAC/s"
                    if "macs" in r.params else "")
            out.append((label, r, rate))
    return out


def headline_table(json_path: str | Path) -> str:
    """The README's table: a few headline rows, tritnum against its baseline, as Markdown."""
    rep = _report(json_path)
    lines = ["| operation | tritnum | baseline | speedup |", "|---|---:|---|---:|"]
    for label, r, rate in _headline_rows(rep):
        ours = f"{_ms(r.seconds)} ms" + (f" ({rate})" if rate else "")
        lines.append(f"| {label} | {ours} | {_cell(r.baseline_name)}: {_ms(r.baseline_seconds)}"
                     f" ms | **{r.speedup:.2f}x** |")
    lines.append("")
    lines.append(f"Medians on {_machine_line(rep)}, from `docs/bench/bench.json` "
                 f"({rep.created[:10]}); speedup = baseline time / tritnum time.")
    c = rep.load.get("contention") or {}
    if c.get("noisy"):
        lines[-1] += (f" A noisy run (other processes used {c['others']:.0%} of the CPU "
                      "time): its ratios can be off either way, the BLAS ones most (OpenBLAS's "
                      "threaded GEMV waits for its threads on a busy machine).")
    return "\n".join(lines)


def tables(json_path: str | Path) -> str:
    """Every row of the file as Markdown, one table per family."""
    rep = _report(json_path)
    families: dict[str, list[Row]] = defaultdict(list)
    for r in rep.rows:
        families[r.family].append(r)
    parts = []
    for family, rows in families.items():
        parts += [f"**{family}**", "",
                  "| case | tritnum ms | baseline | baseline ms | speedup | bar | note |",
                  "|---|---:|---|---:|---:|---|---|"]
        for r in rows:
            bar = "" if r.bar is None else f"≥ {r.bar:g}x {'ok' if r.meets_bar else 'missed'}"
            parts.append(f"| {_cell(r.name)} | {_ms(r.seconds)} | {_cell(r.baseline_name)} | "
                         f"{_ms(r.baseline_seconds)} | {r.speedup:.2f}x | {bar} | "
                         f"{_cell(r.note)} |")
        parts.append("")
    return "\n".join(parts)


def machine_table(json_path: str | Path) -> str:
    """Where and when the file was measured, as a Markdown table."""
    rep = _report(json_path)
    m, v, load = rep.machine, rep.versions, rep.load
    c = load.get("contention") or {}
    rows = [
        ("CPU", f"{m['cpu']} ({m['platform']})"),
        ("cores / kernel threads", f"{m['cores']} / {m['threads']}"),
        ("SIMD level used", f"{m['isa']} (the CPU has {', '.join(m['isa_available'])})"),
        ("GPU", m.get("gpu") or "none used"),
        ("versions", ", ".join(f"{k} {val}" for k, val in v.items())),
        ("load average (1, 5, 15 min)",
         f"before {_loads(load['before'])}; after {_loads(load['after'])}"),
    ]
    if c:
        rows.append(("others' share of the CPU while measuring",
                     f"{c['others']:.0%} (hypervisor steal {c['steal']:.0%})"
                     + ("; flagged noisy: read ratios with care" if c.get("noisy") else "")))
    rows += [("measured", rep.created), ("command", f"`{' '.join(rep.command)}`")]
    return "\n".join(["| | |", "|---|---|"] + [f"| {k} | {_cell(str(val))} |"
                                               for k, val in rows])


def _loads(values: list[float]) -> str:
    return ", ".join(f"{x:.2f}" for x in values)


# -- README ---------------------------------------------------------------------------------

def update_readme(json_path: str | Path, readme: str | Path = README) -> bool:
    """Replace the text between the bench-table markers; False where they are absent."""
    path = Path(readme)
    text = path.read_text()
    if START not in text or END not in text:
        return False
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    path.write_text(f"{head}{START}\n{headline_table(json_path)}\n{END}{tail}")
    return True


def readme_table(readme: str | Path = README) -> str | None:
    """The text between the markers (stripped), or None where they are absent."""
    text = Path(readme).read_text()
    if START not in text or END not in text:
        return None
    return text.split(START, 1)[1].split(END, 1)[0].strip()


def main(argv: list[str] | None = None) -> int:
    """The command line (module docstring); 1 where --update-readme finds no markers."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="a python -m tritnum bench --json file")
    parser.add_argument("outdir", nargs="?", help="folder for the PNGs")
    parser.add_argument("--update-readme", action="store_true",
                        help="rewrite README.md's headline table from the file")
    args = parser.parse_args(argv)
    if not args.update_readme and not args.outdir:
        parser.error("give OUTDIR or --update-readme")
    if args.outdir:
        for path in render(args.json, args.outdir):
            print(path)
    if args.update_readme:
        if not update_readme(args.json):
            print(f"{README}: no {START} / {END} lines: left as it is", file=sys.stderr)
            return 1
        print(f"{README}: table updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())

