"""The calibration check (analytics/fit.py) on synthetic runs of the demo's
design (5 repeats, levels 1, 4 and 8; code, structured and chat) with the
noise measured on this machine: quiet under monotone host drift, which the
paired design cancels, and where the model is exactly right; firing, at the
right level, when one level is noisier than the others. Seeded, so the rates
are fixed; each threshold sits at least 3.5 standard errors of its rate away
from the rate measured (BENCHMARKS.md), so no seed could fail it by chance
more than about 1 in 1000."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specdec.analytics import intervals
from specdec.analytics.calibration import MEASURED, Design, Noise, old_aa_check, simulate
from specdec.analytics.fit import level_fit

RUNS = 150  # 300 before issue 40's second round: each threshold still >= 3.9 standard errors away
#: the demo's measured noise, no prompt-specific effect (an A/A: the arms are the same server)
BASE = dict(process=MEASURED.process, block=MEASURED.block, request=dict(MEASURED.request), prompt={})
#: the demo's own drift (issue 41): the baseline's c1 geometric mean went from 1415 to 1689 ms over five
#: repeats (+0.044 a repeat on the log scale), the speculative arm's from 937 to 1060 (+0.031)
#: runs per noisier level (200 before): at the measured 87.7%, 0.7 is 5 standard errors away, and the
#: pooled 80% 3.5 (0.877 - 0.8 over sqrt(0.877 * 0.123 / 300))
PER_LEVEL = 100
DEMO_DRIFT = dict(drift=0.044, drift_speculative=0.031)


def _rates(noise: Noise, seed: int, runs: int = RUNS, old_check: bool = True) -> dict:
    """Per run: the levels the check flags (any category row 'noisier'), and whether the old A/A line warned."""
    rng = np.random.default_rng(seed)
    flagged: list[set[int]] = []
    old = 0
    for _ in range(runs):
        pairs, blocks, *_ = simulate(Design(), noise, 1.0, rng)
        rows = intervals.compute(pairs, blocks)
        flagged.append({r[2] for r in rows if r[4] == "fit" and r[11] == "noisier"})
        old += old_check and old_aa_check(pairs, blocks)
    return {
        "fired": sum(bool(f) for f in flagged) / runs,
        "by_level": {lv: sum(lv in f for f in flagged) / runs for lv in Design().levels},
        "old": old / runs,
    }


@pytest.fixture(scope="module")
def exact():
    return _rates(Noise(**BASE), 411)


@pytest.fixture(scope="module")
def drift():
    return _rates(Noise(**BASE, drift=0.044), 412)


@pytest.fixture(scope="module")
def demo_drift():
    return _rates(Noise(**BASE, **DEMO_DRIFT), 413)


def test_quiet_where_the_model_is_right(exact):
    # measured 0.7% (150 runs, seed 411; 3.7% at 300 runs before issue 41 item 2): a 5% family-wise test,
    # conservative by the shared noise it counts
    assert exact["fired"] <= 0.10, exact


def test_quiet_under_monotone_drift_the_old_check_cried_wolf_at(drift, demo_drift):
    """Drift common to both arms cancels in the A/B block figures; the demo's
    unequal drift moves every level of a repeat together (the repeat's shared
    noise). Neither is a misfit, and the check stays quiet; the old A/A line
    (first repeat against last) warned in most such runs (82-86% here; the check: 2.7-3.3%)."""
    for rates in (drift, demo_drift):
        assert rates["fired"] <= 0.10, rates
        assert rates["old"] >= 0.7, rates


def test_fires_at_the_level_that_is_noisier():
    """One level with 3 times the block and request noise of the others (every
    category, both arms; its block figures then vary about 2.6x as much):
    the check flags that level in at least 80% of runs, pooled over the three
    places it can be (PER_LEVEL runs each), and hardly ever another level."""
    hits = 0
    for level in Design().levels:
        rates = _rates(Noise(**BASE, level_factor={level: 3.0}), 420 + level, runs=PER_LEVEL, old_check=False)
        hits += rates["by_level"][level] * PER_LEVEL
        assert rates["by_level"][level] >= 0.7, (level, rates)
        assert max(v for lv, v in rates["by_level"].items() if lv != level) <= 0.05, (level, rates)
    assert hits / (3 * PER_LEVEL) >= 0.8, hits


def test_the_verdict_rows_say_which_category_and_how_much():
    """A run built so that level 4 is far noisier: every category's row at
    c4 is 'noisier' with its own SD ratio, the other levels 'fit', and the
    p-value and Holm family come with them."""
    rng = np.random.default_rng(8)
    pairs, blocks, *_ = simulate(Design(), Noise(**BASE, level_factor={4: 6.0}), 1.0, rng)
    fit = {(r[1], r[2]): r for r in intervals.compute(pairs, blocks) if r[4] == "fit"}
    assert set(fit) == {(c, lv) for c in ("chat", "code", "structured") for lv in (1, 4, 8)}  # no (system)
    assert {fit[c, 4][11] for c in ("chat", "code", "structured")} == {"noisier"}
    assert {fit[c, lv][11] for c in ("chat", "code", "structured") for lv in (1, 8)} == {"fits"}
    for c in ("chat", "code", "structured"):
        row = fit[c, 4]
        assert row[17] > 2.0 and row[9] < 0.05 / 3 and row[10] == 3 and row[5] is None
        assert row[7] == pytest.approx(1 - 0.05 / 3)  # Holm's level for the smallest p of 3


def test_level_fit_counts_a_shift_shared_by_the_levels_and_needs_two_levels():
    # a repeat shift shared by every level and category and nothing else: no level is noisier
    shift = [0.05, -0.03, 0.01, 0.04, -0.07]
    series = {c: {(lv, r): 0.2 * i + s for lv in (1, 4, 8) for r, s in enumerate(shift)} for i, c in enumerate("ab")}
    found = level_fit(series)
    assert set(found) == {1, 4, 8} and not any(f.noisier for f in found.values())
    assert all(math.isclose(v, 1.0) for f in found.values() for v in f.ratio.values())
    assert level_fit({"a": {(1, r): s for r, s in enumerate(shift)}}) == {}  # one level: nothing to compare
