"""``python -m tritnum {info,demo,bench,quantize-gguf}``, ``--version`` and ``--help``, run as
a user runs them: a new process. Every test that runs the command line belongs here."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tritnum as tn

ROOT = Path(__file__).resolve().parents[1]  # python -m imports this checkout's tritnum
# the torch family has rows where torch is installed (the test extra)
FAMILIES = ("packing", "quantize", "gguf", "matmul", "vsa", "dask", "compress") + (
    ("torch",) if importlib.util.find_spec("torch") else ())


def tritnum_cli(*args):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    return subprocess.run([sys.executable, "-m", "tritnum", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)


def test_help_lists_the_commands():
    out = tritnum_cli("--help")
    assert out.returncode == 0, out.stderr
    for command in ("info", "demo", "bench"):
        assert command in out.stdout
    assert tritnum_cli().returncode == 2  # a command is required
    assert tritnum_cli("bench", "--device", "tpu").returncode == 2


@pytest.mark.parametrize("command", [(), ("info",), ("demo",), ("bench",), ("quantize-gguf",)])
def test_each_help_says_what_it_does_and_where_the_docs_are(command):
    out = tritnum_cli(*command, "--help")
    assert out.returncode == 0, out.stderr
    usage, description = out.stdout.split("\n\n")[:2]
    assert usage.startswith("usage: python -m tritnum") and len(description.split()) >= 10
    assert "docs/ in the source tree (user guide, API reference)" in out.stdout
    assert "sphinx-build docs docs/_build/html" in out.stdout
    assert "help(tritnum." in out.stdout and "python -m pydoc tritnum." in out.stdout
    assert "pip install tritnum" not in out.stdout  # tritnum is not on the package index
    if command == ("bench",):
        for option in ("--json", "--quick", "--family", "--rows", "--cols", "--device"):
            assert option in out.stdout.split("options:")[1]
        json_help = " ".join(out.stdout.split("--json PATH")[2].split("--family")[0].split())
        for word in ("machine", "versions", "load", "every row"):
            assert word in json_help, json_help


def test_version_and_plain_help():
    out = tritnum_cli("--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"tritnum {tn.__version__}"
    out = tritnum_cli("demo", "--help")
    assert out.returncode == 0, out.stderr
    assert "``" not in out.stdout


def test_info_command():
    out = tritnum_cli("info")
    assert out.returncode == 0, out.stderr
    info = dict(line.split(": ", 1) for line in out.stdout.splitlines())
    info = {k.strip(): v for k, v in info.items()}
    for key in ("tritnum", "python", "numpy", "numba", "cpu", "cores", "threads",
                "cuda available", "default device", "kernel cache", "cache dir"):
        assert key in info
    assert info["tritnum"] == tn.__version__
    assert info["default device"] == "auto"


@pytest.mark.slow
def test_bench_command_reports_every_row(tmp_path):
    path = tmp_path / "bench.json"
    out = tritnum_cli("bench", "--quick", "--rows", "4", "--cols", "640", "--json", str(path))
    assert out.returncode == 0, out.stderr
    report = json.loads(path.read_text())
    results = report["results"]
    names = {(r["name"], r["baseline_name"]) for r in results}
    for fmt in tn.FORMATS:
        assert (f"pack {fmt}", "np.packbits") in names
        assert (f"unpack {fmt}", "numpy reference") in names
    assert all(r["seconds"] > 0 and r["baseline_seconds"] > 0 for r in results)
    assert {r["family"] for r in results} == set(FAMILIES)
    lines = out.stdout.splitlines()
    assert lines[0].startswith("tritnum bench: ") and "speedup" in lines[0]
    assert lines[1].startswith("while measuring: ")  # how busy the machine was
    assert lines[2].split() == ["family", "case", "tritnum", "ms", "baseline", "baseline", "ms",
                                "speedup", "bar", "note"]
    assert len([line for line in lines if line.startswith(FAMILIES)]) == len(results)
    assert {"tritnum", "numba", "threads", "cpu"} <= report["environment"].keys()


def test_bench_family_option_selects_rows(tmp_path):
    path = tmp_path / "bench.json"
    out = tritnum_cli("bench", "--quick", "--rows", "2", "--cols", "64", "--family", "gguf",
                      "--json", str(path))
    assert out.returncode == 0, out.stderr
    families = {r["family"] for r in json.loads(path.read_text())["results"]}
    assert families == {"gguf"}


def test_quick_bench_shows_no_bars_and_reports_progress(tmp_path):
    path = tmp_path / "bench.json"
    out = tritnum_cli("bench", "--quick", "--rows", "2", "--cols", "64", "--family", "packing",
                      "--json", str(path))
    assert out.returncode == 0, out.stderr
    assert "MISSED" not in out.stdout and " ok" not in out.stdout
    assert "while measuring: other processes used" in out.stdout
    report = json.loads(path.read_text())
    progress = [line for line in out.stderr.splitlines() if line.startswith("[")]
    assert len(progress) == len(report["results"]) and progress[-1].startswith(
        f"[{len(progress)}/{len(progress)}]")
    assert all(r["bar"] is None for r in report["results"])
    assert {"others", "steal", "load", "cores"} <= report["environment"]["contention"].keys()


def test_demo_command_prints_every_step():
    pytest.importorskip("sklearn", reason="the test extra installs scikit-learn")
    out = tritnum_cli("demo", "--out-features", "256", "--in-features", "1024", "--dim", "2000",
                      "--repeats", "2")
    assert out.returncode == 0, out.stderr
    for key in ("memory 2bit", "memory base3", "linear GEMV float", "linear GEMV int8",
                "GGUF TQ2_0", "HDC digits", "similarity search"):
        assert key in out.stdout
    assert "trits identical" in out.stdout
    accuracy = float(out.stdout.split("accuracy ")[1].split("%")[0])
    assert accuracy >= 85, out.stdout
    assert " faster" in out.stdout or " slower" in out.stdout


def test_demo_reports_the_cost_of_quantizing():
    """Beside the kernel's error (tiny), the demo says what ternary weights cost (large)."""
    out = tritnum_cli("demo", "--out-features", "128", "--in-features", "512", "--dim", "500",
                      "--repeats", "1", "--seed", "3")
    assert out.returncode == 0, out.stderr
    rows = {line[2:21].strip(): line[23:] for line in out.stdout.splitlines()
            if line.startswith("  ")}
    shown = float(rows["quantization error"].split("rel. error ")[1].split()[0])
    # the demo's layer and input, quantized here in NumPy (BitNet b1.58 absmean, per tensor)
    w = np.random.default_rng(3).standard_normal((128, 512), dtype=np.float32)
    x = np.random.default_rng(4).standard_normal(512, dtype=np.float32).astype(np.float64)
    scale = max(np.float32(np.abs(w).mean()), np.float32(1e-5))
    ternary = np.clip(np.round(w / scale), -1, 1) * np.float64(scale)
    want = np.linalg.norm(x @ ternary.T - x @ w.T.astype(np.float64)) / np.linalg.norm(
        x @ w.T.astype(np.float64))
    assert 0.3 < want < 0.7  # what ternary costs a random Gaussian layer
    assert shown == pytest.approx(want, abs=1.5e-3), out.stdout
    kernel = float(rows["linear GEMV float"].split("rel. error ")[1].split()[0])
    assert kernel < 1e-5 and "same ternary weights" in rows["linear GEMV float"]


def test_demo_without_scikit_learn_says_what_it_skipped():
    """The base install runs the main job: without scikit-learn the digits step says so."""
    code = ("import sys, runpy; sys.modules['sklearn'] = None; "
            "sys.argv = ['tritnum', 'demo', '--out-features', '64', '--in-features', '256', "
            "'--dim', '500', '--repeats', '1']; runpy.run_module('tritnum', run_name='__main__')")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert "HDC digits           skipped" in out.stdout
    assert "pip install scikit-learn" in out.stdout and "tritnum[" not in out.stdout
    assert "similarity search" in out.stdout
    assert out.stdout.rstrip().splitlines()[-1].startswith("done in")


def test_quantize_gguf_command(tmp_path):
    gguf = pytest.importorskip("gguf", reason="the test extra installs gguf")
    from test_gguf_quantize import write_llama  # a tiny llama model, written by gguf

    src, dst = tmp_path / "src.gguf", tmp_path / "dst.gguf"
    write_llama(src)
    done = tritnum_cli("quantize-gguf", str(src), str(dst), "--qtype", "TQ1_0", "--include",
                       "output.weight", "--no-progress")
    assert done.returncode == 0, done.stderr
    assert "15 TQ1_0" in done.stdout and "output.weight" in done.stdout
    types = {t.name: t.tensor_type for t in gguf.GGUFReader(dst).tensors}
    tq1 = gguf.GGMLQuantizationType.TQ1_0
    assert types["output.weight"] == tq1 and types["blk.1.ffn_down.weight"] == tq1
    missing = tritnum_cli("quantize-gguf", str(tmp_path / "no"), str(dst))  # the OS error
    assert missing.returncode == 1 and "No such file or directory" in missing.stderr
    (tmp_path / "bad.gguf").write_bytes(b"not a gguf file")
    bad = tritnum_cli("quantize-gguf", str(tmp_path / "bad.gguf"), str(dst))
    assert bad.returncode == 1 and "cannot read GGUF file" in bad.stderr


def test_quantize_gguf_command_reads_big_endian_files(tmp_path):
    """A big-endian source (the gguf package writes them): the command's output is the one
    from the little-endian file, not all-zero weights and byte-swapped kept tensors."""
    gguf = pytest.importorskip("gguf", reason="the test extra installs gguf")
    from test_gguf_quantize import write_llama

    write_llama(tmp_path / "le.gguf")
    write_llama(tmp_path / "be.gguf", endian=gguf.GGUFEndian.BIG)
    for name in ("le", "be"):
        done = tritnum_cli("quantize-gguf", str(tmp_path / f"{name}.gguf"),
                           str(tmp_path / f"{name}.tq2.gguf"), "--no-progress")
        assert done.returncode == 0, done.stderr
    assert (tmp_path / "be.tq2.gguf").read_bytes() == (tmp_path / "le.tq2.gguf").read_bytes()


def test_convert_reads_a_hugging_face_directory(tmp_path):
    """``convert SRC DST``: an HF bitnet directory to tritnum's .safetensors, trits and scale
    kept; a missing source exits 1 naming it (the conversions' own tests: test_hf_bitnet*)."""
    w = np.random.default_rng(0).integers(-1, 2, (8, 32)).astype(np.float32) * 0.5
    tw = tn.quantize(w)
    tn.io.write_hf_bitnet(tmp_path / "hf", {"model.layers.0.mlp.up_proj.weight": tw,
                                            "model.norm.weight": np.ones(32, np.float32)},
                          {"model_type": "bitnet", "hidden_size": 32},
                          linear_class="autobitlinear", scale_dtype="float32")
    out = tritnum_cli("convert", str(tmp_path / "hf"), str(tmp_path / "m.safetensors"))
    assert out.returncode == 0, out.stderr
    back = tn.load(tmp_path / "m.safetensors")["model.layers.0.mlp.up_proj.weight"]
    assert np.array_equal(back.packed.unpack(), tw.packed.unpack())
    assert back.scales == tw.scales
    out = tritnum_cli("convert", str(tmp_path / "hf"), str(tmp_path / "sharded"),
                      "--linear-class", "bitlinear", "--scale-dtype", "bfloat16",
                      "--max-shard-size", "100", "--requantize")
    assert out.returncode == 0, out.stderr
    assert "model.safetensors.index.json" in os.listdir(tmp_path / "sharded")
    config = json.loads((tmp_path / "sharded" / "config.json").read_text())
    assert config["quantization_config"]["linear_class"] == "bitlinear"
    out = tritnum_cli("convert", str(tmp_path / "missing"), str(tmp_path / "x.gguf"))
    assert out.returncode == 1 and "no such file" in out.stderr
    # GGUF's tokenizer: the source's by default (this one has none: a warning), a
    # directory named, or none (this model's config lacks what a GGUF needs: exit 1 after)
    args = ("convert", str(tmp_path / "hf"), str(tmp_path / "x.gguf"), "--no-progress")
    default, named, none = (tritnum_cli(*args, *more) for more in (
        (), ("--tokenizer", str(tmp_path / "sharded")), ("--no-tokenizer",)))
    assert default.returncode == 1 and "has no tokenizer.json" in default.stderr
    assert named.returncode == 1 and "sharded' has no tokenizer.json" in named.stderr
    assert none.returncode == 1 and "tokenizer" not in none.stderr
    both = tritnum_cli(*args, "--no-tokenizer", "--tokenizer", str(tmp_path))
    assert both.returncode == 2 and "not allowed with" in both.stderr


def test_hdc_family_says_when_torchhd_is_missing(monkeypatch, capsys):
    """In-process (torch-hd hidden from the import system): the family still exits 0."""
    pytest.importorskip("sklearn")
    from tritnum.__main__ import main

    monkeypatch.setitem(sys.modules, "torchhd", None)  # import torchhd raises ImportError
    assert main(["bench", "--family", "hdc", "--quick"]) == 0
    assert "torch-hd not installed" in capsys.readouterr().out


def test_firstcall_family_times_fresh_processes_with_an_empty_cache(tmp_path, capsys):
    """Its children compile: the five calls cost more than numba's trivial function.

    With the disk cache in use (filled by this test process's kernels) they would load
    in a fraction of it.
    """
    from tritnum.__main__ import main

    path = tmp_path / "run.json"
    assert main(["bench", "--family", "firstcall", "--quick", "--json", str(path)]) == 0
    (row,) = json.loads(path.read_text())["results"]
    calls = row["params"]["calls"]
    assert row["family"] == "firstcall" and row["params"]["n"] == 256
    assert list(calls) == ["quantize", "int8 GEMV", "float GEMV", "int8 GEMM", "float GEMM"]
    assert row["seconds"] == pytest.approx(sum(calls.values()))
    assert row["seconds"] > 2 * row["baseline_seconds"] > 0
    assert row["speedup"] == pytest.approx(row["baseline_seconds"] / row["seconds"])
    assert "the trivial function" in capsys.readouterr().out
