"""tn.warmup compiles the CPU steps in several processes at once, then loads them all itself."""

import pytest

import tritnum as tn
from tritnum import _isa, _threads, _warmup


@pytest.fixture
def recorded(monkeypatch):
    """STEPS replaced by steps that record their calls; Popen by one that records commands."""
    calls, children = [], []

    def step(i):
        return lambda dev: calls.append((i, dev))

    class Child:
        def __init__(self, index, parts):
            children.append((index, parts))

        def wait(self):
            return 0

    monkeypatch.setattr(_warmup, "STEPS", tuple(step(i) for i in range(5)))
    monkeypatch.setattr(_warmup, "_start", Child)
    monkeypatch.setattr(_warmup, "kernel", lambda name, dev: lambda: None)
    monkeypatch.setattr(_isa, "CACHEABLE", True)
    return calls, children


def test_steps_are_dealt_to_processes_then_all_run_here(recorded, monkeypatch):
    calls, children = recorded
    monkeypatch.setattr(_warmup, "CACHE", True)
    monkeypatch.setattr(_threads, "available", lambda: 2)
    tn.warmup("cpu")
    assert children == [(1, 2)]
    # this process: its part (steps 0, 2, 4), then every step (loaded from the cache)
    assert calls == [(0, "cpu"), (2, "cpu"), (4, "cpu")] + [(i, "cpu") for i in range(5)]


@pytest.mark.parametrize("cache, threads", [(False, 2), (True, 1)])
def test_no_child_without_the_cache_or_a_second_thread(recorded, monkeypatch, cache, threads):
    calls, children = recorded
    monkeypatch.setattr(_warmup, "CACHE", cache)
    monkeypatch.setattr(_threads, "available", lambda: threads)
    tn.warmup("cpu")
    assert children == []
    assert calls == [(i, "cpu") for i in range(5)]


def test_the_parts_cover_every_step_once():
    parts = 3
    dealt = [s for i in range(parts) for s in _warmup.STEPS[i::parts]]
    assert sorted(map(id, dealt)) == sorted(map(id, _warmup.STEPS))


def test_a_child_runs_its_part(monkeypatch, tmp_path):
    # the child imports this tritnum and runs _part(1, 2): here, a part that writes a file
    monkeypatch.setattr(_warmup, "Path", lambda _: tmp_path / "tritnum" / "_warmup.py")
    package = tmp_path / "tritnum"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "_warmup.py").write_text(
        "def _part(index, parts):\n"
        f"    open({str(tmp_path / 'done')!r}, 'w').write(f'{{index}} of {{parts}}')\n")
    assert _warmup._start(1, 2).wait(timeout=120) == 0
    assert (tmp_path / "done").read_text() == "1 of 2"
