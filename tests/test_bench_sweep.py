"""The sweep bench family at a tiny size: its rows and marks come from measured medians."""

import itertools
import time

import pytest

from tritnum._bench import harness, sweep


def test_pairwise_covers_every_valid_pair_of_two_factors():
    factors = {"a": (1, 2, 3), "b": ("x", "y"), "c": (True, False), "d": (0, 1, 2)}

    def valid(c):
        return not (c["a"] == 3 and c["d"] == 2)

    rows = sweep.pairwise(factors, valid)
    assert all(valid(r) for r in rows)
    combos = [dict(zip(factors, v, strict=True)) for v in itertools.product(*factors.values())]
    for f, g in itertools.combinations(factors, 2):
        for u, v in itertools.product(factors[f], factors[g]):
            if any(valid(c) and c[f] == u and c[g] == v for c in combos):
                assert any(r[f] == u and r[g] == v for r in rows), (f, u, g, v)
    assert len(rows) < len([c for c in combos if valid(c)])  # a subset, not the product


def test_linear_rows_are_valid_calls():
    for c in sweep.pairwise(sweep.LINEAR, sweep._valid):
        scales = c["scales"]
        if isinstance(scales, int):
            assert c["width"] % scales == 0
        if c["activations"] == "q8_k":
            assert c["width"] % 256 == 0
        assert c["batch"] * c["width"] ** 2 <= sweep.MAX_MACS


@pytest.fixture(scope="module")
def tiny_results():
    cases = sweep.sweep_cases(tiny=True, device="cpu")
    return cases, [harness.measure(c, repeats=1, warmup=0.0, rounds=1) for c in cases]


def test_the_tiny_sweep_runs_every_op_against_numpy(tiny_results):
    _, results = tiny_results
    ops = {r.params["op"] for r in results}
    assert {"linear", "BitLinear", "quantize", "quantize_activations", "dequantize", "pack",
            "unpack", "bind", "bundle", "permute", "similarity", "search"} <= ops
    for r in results:
        assert r.family == "sweep" and r.bar is not None
        assert r.speedup == pytest.approx(r.baseline_seconds / r.seconds)
        assert r.meets_bar == (r.speedup >= r.bar)
    assert sweep.marked(results) == [r for r in results if r.speedup < r.bar]
    text = sweep.summary(results)
    assert text.startswith(f"sweep: {len(results)} rows, {len(sweep.marked(results))} below")


def test_a_slow_op_is_marked_from_its_measured_time(monkeypatch):
    import tritnum as tn

    real = tn.linear

    def slow(*args, **kwargs):
        time.sleep(0.02)  # far slower than NumPy's dense product at width 64
        return real(*args, **kwargs)

    monkeypatch.setattr(tn, "linear", slow)
    cases = sweep.linear_cases({**sweep.LINEAR, **sweep.TINY, "width": (64,)}, "cpu")
    results = [harness.measure(c, repeats=1, warmup=0.0, rounds=1) for c in cases]
    assert results and sweep.marked(results) == results
    assert all(r.seconds >= 0.02 for r in results)
    assert "rows below their floor:" in sweep.summary(results)
