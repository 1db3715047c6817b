"""The matmul bench's thread and group-scale rows: present, runnable, and fair.

Each row's two sides compute the same product (1 vs 2 threads: equal; a scale per
256 against one scale: the same codes), so the ratio measures speed alone. No
timing is asserted.
"""

from __future__ import annotations

import numpy as np

from tritnum import _threads
from tritnum._bench.matmul import group_cases, thread_cases


def test_thread_rows():
    cases = thread_cases(True, np.random.default_rng(0))
    names = [c.name for c in cases]
    for act in ("int8", "float"):
        assert f"linear GEMV 2048x2048 {act}, 1 thread" in names
        if _threads.available() >= 2:
            assert f"linear GEMV 2048x2048 {act}, 2 threads" in names
    for c in cases:
        if c.name.endswith("2 threads"):
            assert c.bar in (None, 1.8) and c.baseline_name == "same, 1 thread"
            ours, theirs = c.run(), c.baseline()
            if ours is not None:
                np.testing.assert_array_equal(ours, theirs)
        else:
            c.run(), c.baseline()
        assert "GMAC/s per core" in (c.note(1e-3) if c.note else "GMAC/s per core")


def test_group_rows():
    cases = group_cases(True, "cpu", np.random.default_rng(0))
    assert [c.name for c in cases] == [
        f"linear {kind} 2048x2048 {act}, scale per 256"
        for kind in ("GEMV", "GEMM 64 rows") for act in ("int8", "float")]
    for c in cases:
        assert c.bar == 0.9 and c.baseline_name == "same, one scale"
        assert c.run().shape == c.baseline().shape
