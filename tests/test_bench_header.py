"""The bench says how busy the machine was and flags a noisy run (its progress lines:
tests/test_cli.py)."""

import os
import subprocess
import sys

from tritnum._bench import header
from tritnum._bench.header import Contention, Snapshot

TICK = os.sysconf("SC_CLK_TCK")


def ticks(user, idle, steal=0):
    return [user, 0, 0, idle, 0, 0, 0, steal]


def test_other_processes_time_is_the_busy_time_we_did_not_use():
    # 10 s of machine CPU time passed: 6 s busy, of which this process used 2 s
    before = Snapshot(ticks(0, 0), ours=1.0)
    after = Snapshot(ticks(6 * TICK, 4 * TICK), ours=3.0)
    c = header.contention(before, after)
    assert abs(c.others - 0.4) < 1e-9 and c.steal == 0
    stolen = header.contention(before, Snapshot(ticks(2 * TICK, 7 * TICK, TICK), ours=3.0))
    assert abs(stolen.steal - 0.1) < 1e-9 and stolen.others == 0


def test_noisy_runs_are_flagged():
    assert not Contention(0.02, 0.0, 1.0, 2).noisy
    for busy in (Contention(0.2, 0.0, 1.0, 2), Contention(0.0, 0.1, 1.0, 2),
                 Contention(0.0, 0.0, 7.0, 2)):
        assert busy.noisy
        assert "NOISY RUN" in header.contention_line(busy)


def test_the_runs_own_children_are_not_contention():
    """A child process the run waited for (a row's fresh process) counts as the run."""
    before = header.snapshot()
    subprocess.run([sys.executable, "-c", "import time\nend = time.process_time() + 0.3\n"
                    "while time.process_time() < end: pass"], check=True)
    assert header.snapshot().ours - before.ours >= 0.3
