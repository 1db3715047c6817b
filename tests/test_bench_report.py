"""The bench's JSON file: its schema round-trips, a malformed file is refused, and the
performance page's plots and README table come from it (docs/plot_bench.py)."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

from tritnum._bench import report, run
from tritnum._environment import environment

ROOT = Path(__file__).resolve().parent.parent
BENCH_JSON = ROOT / "docs" / "bench" / "bench.json"

pytest.importorskip("matplotlib", reason="docs/plot_bench.py draws with matplotlib")
sys.path.insert(0, str(ROOT / "docs"))
import plot_bench  # noqa: E402  (from docs/)

LOAD = {"before": [0.5, 0.4, 0.3], "after": [1.0, 0.6, 0.4],
        "contention": {"others": 0.01, "steal": 0.0, "load": 1.0, "cores": 2, "noisy": False}}
OPTIONS = {"quick": True, "device": "cpu", "rows": 2, "cols": 64, "families": ["gguf"]}


@pytest.fixture(scope="module")
def real_run() -> dict:
    """A real (tiny) bench run's JSON object, as ``main`` builds it."""
    results = run(quick=True, device="cpu", rows=2, cols=64, families=("gguf",))
    return report.build(results, environment(), LOAD, OPTIONS)


def test_a_run_round_trips(tmp_path, real_run):
    path = tmp_path / "bench.json"
    report.write(path, real_run)
    back = report.load(path)
    assert back.schema_version == report.SCHEMA_VERSION == json.loads(
        path.read_text())["schema_version"]
    assert [r.name for r in back.rows] == [r["name"] for r in real_run["results"]]
    assert back.rows[0].seconds == real_run["results"][0]["seconds"]
    assert {r.params["op"] for r in back.rows if r.params} >= {"encode", "decode"}
    assert back.machine["cores"] >= 1 and back.machine["isa"]
    assert back.load == LOAD and back.options == OPTIONS
    assert back.versions["numpy"] and back.versions["blas"]
    assert json.loads(path.read_text()) == real_run


def _broken(data: dict) -> list[tuple[str, dict | list]]:
    out: list[tuple[str, dict | list]] = [("top level is a list", [])]
    for what, edit in [
        ("schema_version", lambda d: d.pop("schema_version")),
        ("schema_version 2", lambda d: d.update(schema_version=2)),
        ("'machine'", lambda d: d.pop("machine")),
        ("machine has no 'cpu'", lambda d: d["machine"].pop("cpu")),
        ("load.before", lambda d: d["load"].update(before=[1.0])),
        ("has no 'seconds'", lambda d: d["results"][0].pop("seconds")),
        ("speedup", lambda d: d["results"][0].update(speedup="fast")),
        ("positive", lambda d: d["results"][0].update(seconds=0.0)),
        ("meets_bar", lambda d: d["results"][0].update(meets_bar="yes")),
        ("params", lambda d: d["results"][0].update(params=None)),
    ]:
        broken = copy.deepcopy(data)
        edit(broken)
        out.append((what, broken))
    return out


def test_malformed_files_raise(tmp_path, real_run):
    assert real_run["results"], "the run has rows"
    for what, data in _broken(real_run):
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(data))
        with pytest.raises(ValueError, match=what.split()[0].strip("'")):
            report.load(path)
    path = tmp_path / "truncated.json"
    path.write_text(json.dumps(real_run)[:-20])
    with pytest.raises(ValueError, match="not JSON"):
        report.load(path)


def _row(family: str, name: str, seconds: float, base: float, params: dict) -> dict:
    return {"family": family, "name": name, "seconds": seconds, "baseline_name": "base",
            "baseline_seconds": base, "speedup": base / seconds, "bar": None,
            "meets_bar": None, "note": "", "params": params}


def synthetic() -> dict:
    """A small file in the real schema with a row for each plot."""
    data = report.build([], environment(), LOAD, OPTIONS, command=["bench", "--json", "x.json"])
    rows = []
    for out, n in ((1024, 1024), (4096, 4096)):
        for i, mode in enumerate(("float", "int8", "q8_k")):
            rows.append(_row("matmul", f"gemv {out} {mode}", 1e-4 * (3 - i), 5e-4, {
                "op": "gemv", "rows": 1, "out": out, "in": n, "mode": mode, "threads": None,
                "macs": out * n, "weight_bytes": out * n // 4, "vs": "blas"}))
    for mode in ("float", "int8"):
        rows.append(_row("matmul", f"gemm {mode}", 0.02, 0.03, {
            "op": "gemm", "rows": 256, "out": 4096, "in": 4096, "mode": mode, "threads": None,
            "macs": 256 * 4096 * 4096, "weight_bytes": 4096 * 1024, "vs": "blas"}))
        for t in (1, 2):
            rows.append(_row("matmul", f"gemv {mode}, {t} threads", 1e-3 / t, 1e-3, {
                "op": "gemv", "rows": 1, "out": 4096, "in": 4096, "mode": mode,
                "threads": t, "macs": 4096 * 4096, "weight_bytes": 4096 * 1024,
                "vs": "1 thread" if t == 2 else "blas"}))
    rows.append(_row("vsa", "search 1 x 10k (dot) bitplane", 1e-4, 1e-2, {
        "op": "search", "format": "bitplane", "d": 10_000, "n": 10_000, "queries": 1,
        "threads": None, "vs": "torchhd"}))
    rows.append(_row("packing", "pack 2bit", 1e-3, 1e-3, {
        "op": "pack", "format": "2bit", "trits": 1000, "vs": "numpy bits"}))
    data["results"] = rows
    return data


def test_render_makes_every_plot(tmp_path):
    path = tmp_path / "bench.json"
    report.write(path, synthetic())
    made = plot_bench.render(path, tmp_path / "out")
    assert {p.name for p in made} == {f"bench_{n}.png" for n in plot_bench.PLOTS}
    for p in made:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000
    table = plot_bench.headline_table(path)
    assert "GEMV 4096x4096, int8 activations" in table and "**1.67x**" in table
    assert "| pack 2bit |" in table and table.count("\n| ") <= 9
    everything = plot_bench.tables(path)
    assert everything.count("\n| ") == len(synthetic()["results"]) + 3  # + 3 header rows
    # the command line: PNGs into a folder
    assert plot_bench.main([str(path), str(tmp_path / "cli")]) == 0
    assert len(list((tmp_path / "cli").glob("*.png"))) == len(plot_bench.PLOTS)


def test_update_readme_rewrites_only_between_the_markers(tmp_path):
    path = tmp_path / "bench.json"
    report.write(path, synthetic())
    readme = tmp_path / "README.md"
    readme.write_text(f"# t\n\nbefore\n{plot_bench.START}\nold\n{plot_bench.END}\nafter\n")
    assert plot_bench.update_readme(path, readme)
    text = readme.read_text()
    assert text.startswith("# t\n\nbefore\n") and text.endswith(f"{plot_bench.END}\nafter\n")
    assert plot_bench.readme_table(readme) == plot_bench.headline_table(path)
    unmarked = tmp_path / "plain.md"
    unmarked.write_text("no markers\n")
    assert not plot_bench.update_readme(path, unmarked)
    assert unmarked.read_text() == "no markers\n"


def test_committed_bench_file_is_valid_and_in_the_readme():
    rep = report.load(BENCH_JSON)
    families = {r.family for r in rep.rows}
    assert {"packing", "quantize", "gguf", "matmul", "vsa"} <= families
    sizes = {(r.params["out"], r.params["in"]) for r in rep.rows
             if r.params.get("op") == "gemv" and r.params.get("vs") == "blas"}
    assert len(sizes) >= 4, "the GEMV size sweep"
    in_readme = plot_bench.readme_table()
    if in_readme is None:
        pytest.skip("README.md has no <!-- bench-table:start/end --> markers yet")
    assert in_readme == plot_bench.headline_table(BENCH_JSON), (
        "README's bench table is stale: python docs/plot_bench.py --update-readme "
        "docs/bench/bench.json")
