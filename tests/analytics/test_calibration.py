"""A small version of benchmarks/calibration.py: the project's own interval and
label code on synthetic runs with this machine's noise components, with fixed
seeds and enough runs that a wrong method fails. The two planted methods (df
counted per level; the old double hurdle) must fail it."""

from __future__ import annotations

import math
from dataclasses import replace

import duckdb
import numpy as np
import pytest

from specdec.analytics import intervals
from specdec.analytics.calibration import MEASURED, PLANTED, Design, Noise, estimate, evaluate, simulate

#: The components of the quietest demo-sized run measured here (3 repeats x 128 tokens; its
#: `--estimate` line in BENCHMARKS.md), fixed so that the test checks the method, not the host.
QUIET = Noise(
    process=0.015,
    block=0.02,
    request={"chat": 0.03, "code": 0.045, "structured": 0.04},
    prompt={"chat": 0.10, "code": 0.44, "structured": 0.41},
)
#: A large per-process shift (10%): the case the old method under-covered.
SHIFTED = Noise(process=0.10, block=QUIET.block, request=dict(QUIET.request), prompt=dict(QUIET.prompt))


@pytest.fixture(scope="module")
def no_effect():
    return evaluate(Design(repeats=3), SHIFTED, 1.0, 150, seed=42)


def test_intervals_cover_with_a_large_process_shift_and_unequal_categories(no_effect):
    # code's request noise is 1.5x chat's in QUIET; each category has its own variance
    assert 0.92 <= no_effect.coverage <= 0.985, no_effect.line()
    assert all(c >= 0.9 for c in no_effect.coverage_by_category.values()), no_effect.line()
    assert 0.9 <= no_effect.prompts_coverage <= 0.99


def test_labels_keep_the_family_wise_error_rate_under_aa(no_effect):
    assert no_effect.false_label_runs <= 0.05, no_effect.line()


def test_df_counted_per_level_fails_the_coverage_goal():
    planted = evaluate(Design(repeats=3), SHIFTED, 1.0, 150, seed=42, method=PLANTED["df counted per level"])
    assert planted.coverage < 0.9, planted.line()


#: The noise structure the issue's review simulated (process 3%, block 2%, request 5-10%).
REVIEWED = Noise(
    process=0.03, block=0.02, request={"chat": 0.10, "code": 0.05, "structured": 0.05}, prompt=dict(QUIET.prompt)
)


def test_power_of_the_demo_design():
    ours = evaluate(Design(), QUIET, 1.2, 150, seed=43)
    assert ours.faster_share >= 0.8, ours.line()


def test_the_double_hurdle_gives_up_power_the_interval_alone_has():
    """The old rule also asked the interval to clear the mirrored A/A interval,
    counting the noise twice: with the reviewed noise it labels a true 1.20x
    faster far less often than the interval alone, at no gain in coverage."""
    ours = evaluate(Design(), REVIEWED, 1.2, 150, seed=43)
    hurdle = evaluate(Design(), REVIEWED, 1.2, 150, seed=43, method=PLANTED["old double hurdle"])
    assert hurdle.faster_share < ours.faster_share - 0.2, (ours.line(), hurdle.line())
    assert ours.false_label_runs == hurdle.false_label_runs == 0.0


def test_simulate_truths_and_shapes():
    pairs, blocks, prompt_set, category = simulate(
        Design(repeats=2, prompts=3), QUIET, 1.5, np.random.default_rng(0), centred=False
    )
    assert len([p for p in pairs if p[0] == "ab"]) == 3 * 3 * 2 * 3  # categories x levels x repeats x prompts
    assert len([p for p in pairs if p[0] == "aa"]) == 3 * 3 * 1 * 3
    assert len(blocks) == 3 * (2 + 1)
    assert category["code", 1] == pytest.approx(math.log(1.5))
    assert prompt_set["code", 1] != category["code", 1]  # this prompt set's own mean effect
    _p, _b, centred, _c = simulate(Design(repeats=2, prompts=3), QUIET, 1.5, np.random.default_rng(0))
    assert centred["code", 1] == pytest.approx(math.log(1.5))  # centred: the prompt set's truth is the ratio


def test_estimate_reads_components_back(tmp_path):
    """Components planted in a synthetic run come back from its pairs, in
    the same order of size (a sanity check of the estimator, not a precision test)."""
    noise = Noise(process=0.0, block=0.05, request={"code": 0.02}, prompt={"code": 0.3})
    pairs, _blocks, _ps, _cat = simulate(
        Design(categories=("code",), prompts=16, repeats=5), noise, 1.2, np.random.default_rng(1), centred=False
    )
    got = estimate(_built(pairs))["r"]["code"]
    assert 0.01 < got["request_sd"] < 0.04 and 0.15 < got["prompt_sd"] < 0.5
    assert 0.03 < got["block_sd"] < 0.08 and got["process_sd"] < 0.04


def _built(pairs, design: Design | None = None):
    """A database with the two views ``estimate`` reads: the pairs, and (given the design) each
    block's first request per arm, in the design's arm order."""
    con = duckdb.connect()
    con.execute(
        "create table int_requests_paired (run_id varchar, comparison varchar, category varchar, "
        "level integer, prompt_id varchar, repeat integer, log_ratio double)"
    )
    con.executemany("insert into int_requests_paired values ('r', ?, ?, ?, ?, ?, ?)", pairs)
    if design is not None:
        con.execute(
            "create table int_requests_measured (run_id varchar, level integer, repeat integer, "
            "arm varchar, wall_send_ns bigint)"
        )
        for lv in design.levels:
            for r in range(design.repeats):
                first = "baseline" if design.first_arm(lv, r) == "b" else "speculative"
                second = "speculative" if first == "baseline" else "baseline"
                con.execute(
                    "insert into int_requests_measured values ('r', ?, ?, ?, 1), ('r', ?, ?, ?, 2)",
                    [lv, r, first, lv, r, second],
                )
    return con


def test_estimate_is_robust_to_stalled_requests_and_slow_blocks_and_reads_the_order():
    """Issue 41, item 4: the sizes come from real runs 'estimated robustly'. A few requests stalled
    3x and one block 2.5x slow must not set the request and block sizes; the arm order planted is
    read back. The plain mean squares (what ``estimate`` read before) move by several times."""
    design = Design(categories=("code",), prompts=16, repeats=5)
    noise = Noise(process=0.01, block=0.01, request={"code": 0.02}, prompt={"code": 0.3}, order=0.05)
    pairs, _blocks, _ps, _cat = simulate(design, noise, 1.2, np.random.default_rng(5), centred=False)
    clean = estimate(_built(pairs, design))["r"]["code"]
    rng = np.random.default_rng(6)
    hurt = []
    for row in pairs:
        y = row[5]
        if row[0] == "ab" and rng.random() < 0.03:  # a stalled request: 3x its time in one arm
            y += math.log(3.0) * (1 if rng.random() < 0.5 else -1)
        if row[0] == "ab" and row[2] == 4 and row[4] == 2:  # one block of the baseline 2.5x slow
            y += math.log(2.5)
        hurt.append((*row[:5], y))
    got = estimate(_built(hurt, design))["r"]["code"]
    assert 0.01 < clean["request_sd"] < 0.03 and 0.01 < got["request_sd"] < 0.035, (clean, got)
    assert 0.03 < clean["order"] < 0.07 and 0.02 < got["order"] < 0.08, (clean, got)
    assert got["slow_blocks"] == 1.0 and got["block_sd"] < 0.025, got
    # what the mean squares would have said of the same residuals: the stalls dominate
    grid_sd = float(np.std([r[5] for r in hurt if r[0] == "ab" and r[2] == 1], ddof=1))
    assert grid_sd > 3 * got["request_sd"]


#: The A/A engine test's design (tests/integration/test_aa_e2e.py): levels 1 and 2, two
#: repeats (three fresh-server ones before issue 40), 1 prompt per category (4, then 2, before),
#: both arms on one server (no process shift between the arms), so the request noise dominates.
AA_ENGINE = Design(levels=(1, 2), repeats=2, prompts=1)
AA_NOISE = Noise(
    process=0.0,
    block=0.01,
    request={"chat": 0.03, "code": 0.02, "structured": 0.03},
    prompt={"chat": 0.0, "code": 0.0, "structured": 0.0},
)


def test_the_aa_engine_tests_promises_hold_on_its_own_design():
    """What the A/A engine test asserts of one run must hold in nearly every run
    of a calibrated method on that test's design, and the rates it leaves to
    chance must be the nominal ones: here, with the project's interval code on
    600 synthetic A/A runs, at most 5% of runs show any faster/slower label
    (the family-wise rate), no label clears the margin and at most 1% of runs
    flag two series. Simulated on 2026-12-03 at three repeats (1,500-2,000 runs
    each, block noise 0.2-2%): one series flagged in 1.6-2.1% of runs, two in
    0-0.3%, a label clearing the margin in none; pointwise misses at both
    levels, which the engine test used to forbid, in 3.6% of runs, 4 or more of
    the 8 pointwise rows in 0.3-1.3% (so the engine test no longer counts them).
    At two repeats and 2 prompts per category, the engine test's design since
    issue 40 (2026-12-06, 2,000 runs, seed 11): a label in 1.10% of runs, two
    series in 0.05%, a label clearing the margin in none; with the request and
    block noise doubled (16 tokens a request: a larger share of it is TTFT
    jitter), 1.20%, 0.05% and one run in 2,000 (0.05%). Re-simulated with
    today's intervals (2026-12-06 afternoon, the same 2,000 runs): 1.85%, 0.05%
    and none; doubled, 1.90%, 0.05% and 4 runs in 2,000 (0.2%). At 1 prompt per
    category, the design since (2,000 runs, seed 11): 1.80%, 0.10% and none;
    doubled, 2.00%, 0.05% and 0.30%. At one level only (a shorter engine test
    still), 5.65% of runs show a label, over the 5% rate, and doubled noise
    clears the margin in 0.9%: the test keeps two levels. The engine test asserts no count of labels:
    a count fails by chance in more runs than 1 in 1,000; this test holds it."""
    rng = np.random.default_rng(5)
    runs = 600
    any_label = two_series = 0
    for _ in range(runs):
        pairs, blocks, *_ = simulate(AA_ENGINE, AA_NOISE, 1.0, rng)
        flagged = set()
        for row in intervals.compute(pairs, blocks):
            if row[0] != "ab" or row[3] is not None:
                continue
            if row[4] == "family" and row[11] in ("faster", "slower"):
                assert not row[12], row  # clears_margin: an effect of the margin's size, never by chance here
                flagged.add(row[1])
        any_label += bool(flagged)
        two_series += len(flagged) >= 2
    assert any_label / runs <= 0.05, any_label
    assert two_series / runs <= 0.01, two_series


# --- issue 41, item 4: noise the intervals do not assume (benchmarks/calibration.py in small) ---

#: The demo's measured components with the order effect of the demo run of 2026-12-06 (4%).
ORDERED = replace(MEASURED, prompt={}, order=0.04)


def _min_level(result) -> float:
    return min(result.coverage_by_level.values())


@pytest.mark.parametrize(
    ("name", "misfit", "seed"),
    [
        ("order", {}, 51),
        ("t(3) tails", {"tails": 3.0}, 52),
        ("slow blocks", {"slow_share": 0.04}, 53),
        ("c4 3x", {"level_factor": {4: 3.0}}, 54),
    ],
)
def test_coverage_holds_at_every_level_under_noise_the_model_does_not_assume(name, misfit, seed):
    """60 runs: 240 intervals a level; at a true 95% (within-run correlation counted twice) the
    chance of 88% or less is below 1 in 1,000."""
    result = evaluate(Design(), replace(ORDERED, **misfit), 1.0, 60, seed=seed)
    assert _min_level(result) >= 0.88, (name, result.line())
    assert result.false_label_runs <= 0.15, (name, result.line())  # <= 5% expected: 9 of 60 at most by chance


def test_one_pooled_variance_fails_at_the_noisier_level():
    """The model before issue 41 (one variance for every level, no arm order): with c4 3x noisier
    its c4 intervals cover about 83% (benchmarks/calibration.py); the project's own about 95%."""
    noise = replace(ORDERED, level_factor={4: 3.0})
    pooled = evaluate(Design(), noise, 1.0, 100, seed=61, method=PLANTED["one pooled variance"])
    ours = evaluate(Design(), noise, 1.0, 100, seed=61)
    assert pooled.coverage_by_level[4] < 0.88, pooled.line()
    assert ours.coverage_by_level[4] >= 0.9, ours.line()


def test_power_with_an_effect_in_one_category_only():
    """Code at 1.50x, the others at 1.00x: its rows labelled faster in nearly every run, and no
    other category labelled (the family-wise rate)."""
    design = Design()
    truth = {(c, lv): (1.5 if c == "code" else 1.0) for c in design.categories for lv in design.levels}
    result = evaluate(design, replace(ORDERED, prompt=dict(MEASURED.prompt)), truth, 60, seed=62)
    assert result.power >= 0.85, result.line()
    assert result.false_label_runs <= 0.15, result.line()


def test_equivalent_is_reachable_at_a_true_one():
    """At a 10% margin and the demo's noise, a true 1.00x reads equivalent in about 54% of rows
    (benchmarks/calibration.py), now that it reads the 90% interval instead of Holm's."""
    result = evaluate(Design(), ORDERED, 1.0, 60, seed=63, margin=0.10)
    assert result.null_equivalent >= 0.4, result.line()


def test_counting_how_a_levels_rows_move_together_buys_power():
    """The same synthetic runs (code at 1.20x, the others at 1.00x, the demo's design and measured
    noise with the arm order), labelled twice: the step-down that counts the correlation of a
    level's rows labels code faster more often than one that counts every row independent (the
    rule before 2026-12-07), with no more false labels than the family-wise 5% allows."""
    design = Design()
    truth = {(c, lv): (1.2 if c == "code" else 1.0) for c in design.categories for lv in design.levels}
    noise = replace(MEASURED, order=0.04)
    ours = evaluate(design, noise, truth, 80, seed=64)
    independent = evaluate(design, noise, truth, 80, seed=64, method=PLANTED["rows counted independent"])
    assert ours.power >= independent.power + 0.04, (ours.line(), independent.line())
    assert ours.false_label_runs <= 0.05, ours.line()
