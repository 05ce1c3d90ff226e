"""The arm order of the replay's schedule (issue 41, item 2): balanced per level
where the repeats allow it, and over the run where they do not."""

from __future__ import annotations

from collections import Counter

import pytest

from specdec.analytics.calibration import Design
from specdec.replay.load.schedule import interleaved

ARMS = ["baseline", "speculative"]


def _first(levels: list[int], repeats: int, restart: bool) -> dict[tuple[int, int], str]:
    seen: dict[tuple[int, int], str] = {}
    for b in interleaved(levels, repeats, ARMS, False, restart=restart):
        if b.kind == "timed":
            seen.setdefault((b.level, b.repeat), b.arm)
    return seen


@pytest.mark.parametrize("restart", [False, True])
@pytest.mark.parametrize("repeats", [2, 3, 4, 5])
def test_each_level_is_as_balanced_as_its_repeats_allow_and_the_run_within_one(repeats, restart):
    levels = [1, 4, 8, 16]
    first = _first(levels, repeats, restart)
    for level in levels:
        per_level = Counter(first[level, r] for r in range(repeats))
        assert abs(per_level["baseline"] - per_level["speculative"]) == repeats % 2
    overall = Counter(first.values())  # an even number of levels: balanced over the run
    assert overall["baseline"] == overall["speculative"]


def test_odd_levels_odd_repeats_off_by_one_block_pair_at_most():
    first = _first([1, 4, 8], 5, restart=False)
    overall = Counter(first.values())
    assert sorted(overall.values()) == [7, 8]


def test_the_calibration_simulator_uses_the_replays_order():
    design = Design()
    first = _first(list(design.levels), design.repeats, restart=True)  # the demo's fresh servers per repeat
    assert {k: ("b" if v == "baseline" else "s") for k, v in first.items()} == {
        (lv, r): design.first_arm(lv, r) for lv in design.levels for r in range(design.repeats)
    }
