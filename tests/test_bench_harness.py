"""The bench harness: each side timed ``repeats`` times, in alternating warmed-up blocks."""

from __future__ import annotations

import itertools

import pytest

from tritnum._bench.harness import Case, measure


def _recorded(repeats_limit: int | None = None) -> tuple[Case, list[str]]:
    calls: list[str] = []
    case = Case("t", "t", lambda: calls.append("ours"), "b", lambda: calls.append("theirs"),
                repeats=repeats_limit)
    return case, calls


@pytest.mark.parametrize("repeats,rounds", [(15, 3), (7, 3), (2, 3), (5, 1)])
def test_sides_alternate_in_rounds(repeats, rounds):
    case, calls = _recorded()
    result = measure(case, repeats, warmup=0.0, rounds=rounds)
    blocks = [(side, len(list(run))) for side, run in itertools.groupby(calls)]
    expected_rounds = min(rounds, repeats)
    assert [side for side, _ in blocks] == ["ours", "theirs"] * expected_rounds
    # each block: one warm-up call, then its share of the repeats
    ours = [n - 1 for side, n in blocks if side == "ours"]
    assert sum(ours) == repeats and max(ours) - min(ours) <= 1
    assert [n for side, n in blocks if side == "theirs"] == [n + 1 for n in ours]
    assert result.seconds > 0 and result.baseline_seconds > 0


def test_a_repeat_limit_takes_one_block():
    case, calls = _recorded(repeats_limit=2)
    measure(case, 15, warmup=0.0, rounds=3)
    assert calls == ["ours"] * 3 + ["theirs"] * 3
