"""The sequential design's rule (analytics/sequential.py): what each look spends and decides,
and the marts' labels of a sequential run taken from its looks; its error rates and savings on
synthetic runs with noise the intervals do not assume (analytics/sequential_calibration.py)."""

from __future__ import annotations

import math

import pytest

from specdec.analytics.calibration import MEASURED, Design
from specdec.analytics.labels import ALPHA
from specdec.analytics.sequential import Cell, apply_looks, cells_from_rows, decide, spent
from specdec.analytics.sequential_calibration import compare
from specdec.analytics.variance import t_quantile


def test_the_looks_spend_at_most_alpha_and_the_last_spends_what_is_left():
    assert spent(0.0) == 0.0 and spent(1.0) == pytest.approx(ALPHA)
    assert all(spent(a / 10) < spent(b / 10) for a, b in zip(range(1, 10), range(2, 11)))
    before, total = 0.0, 0.0
    for r, final in ((2, False), (3, False), (4, True)):  # a budget that ends the run at 4 of 8
        look = decide({}, r, 8, before, final, 0.05)
        total += look.alpha_look
        before = look.alpha_spent
    assert total == pytest.approx(ALPHA)
    assert decide({}, 2, 8, 0.0, False, 0.05).alpha_look == pytest.approx(spent(2 / 8))


def test_a_large_effect_is_decided_at_the_first_look_and_a_null_is_not_labelled():
    big = Cell(math.log(2.0), 0.02, 6.0)
    null = Cell(0.001, 0.05, 6.0)
    look = decide({("ab", "code", 1): big, ("ab", "chat", 1): null}, 2, 6, 0.0, False, 0.05)
    labels = {(d.category, d.label) for d in look.decided}
    assert ("code", "faster") in labels
    assert ("ab", "chat", 1) in look.open or ("chat", "inconclusive") in labels  # open, or futile
    assert all(d.label != "faster" for d in look.decided if d.category == "chat")


def test_a_cell_that_could_not_be_decided_by_the_last_repeat_leaves_as_futile():
    hopeless = Cell(math.log(1.03), 0.08, 3.0)  # 3% with a 8% standard error: neither way by repeat 4
    look = decide({("ab", "chat", 4): hopeless}, 2, 4, 0.0, False, 0.05)
    (d,) = look.decided
    assert d.label == "inconclusive" and d.futile and d.repeats_needed and d.repeats_needed > 4
    promising = Cell(math.log(1.25), 0.08, 3.0)  # could clear 1 by repeat 8: stays open
    assert decide({("ab", "code", 4): promising}, 2, 8, 0.0, False, 0.05).open == [("ab", "code", 4)]


def test_the_final_look_labels_every_open_cell():
    cells = {("ab", "chat", lv): Cell(0.01, 0.05, 4.0) for lv in (1, 4)}
    look = decide(cells, 5, 5, spent(4 / 5), True, 0.05)
    assert not look.open and {d.label for d in look.decided} == {"inconclusive"}
    assert look.alpha_spent == pytest.approx(ALPHA)


def test_cells_are_read_back_from_the_pointwise_rows():
    q = t_quantile(0.975, 5.0)
    centre, se = math.log(1.3), 0.04
    row = ("ab", "code", 4, None, "measurement", math.exp(centre - q * se), math.exp(centre + q * se), 0.95, 5.0)
    ((key, cell),) = cells_from_rows([row, ("ab", "code", 4, "natural", "measurement", 1, 2, 0.95, 5.0)]).items()
    assert key == ("ab", "code", 4)
    assert cell.centre == pytest.approx(centre) and cell.se == pytest.approx(se) and cell.df == 5.0


def _family(category: str, level: int, label: str) -> tuple:
    return ("ab", category, level, None, "family", 0.9, 1.1, 0.99, 5.0, 0.5, 3, label, None, 0.1, None, 0.05, "m")


def test_a_sequential_runs_labels_are_its_looks_and_an_undecided_cell_is_inconclusive():
    rows = [_family("code", 1, "faster"), _family("chat", 1, "faster"), ("ab", "code", 1, None, "measurement")]
    looks = [
        {
            "repeat": 2,
            "decided": [
                {
                    "comparison": "ab",
                    "category": "code",
                    "level": 1,
                    "label": "faster",
                    "ci_low": 1.8,
                    "ci_high": 2.4,
                    "ci_level": 0.997,
                    "repeats_needed": None,
                    "futile": False,
                }
            ],
        }
    ]
    out = {(r[1], r[4]): r for r in apply_looks(rows, looks, 0.05)}
    code, chat = out["code", "family"], out["chat", "family"]
    assert (code[5], code[6], code[7], code[11], code[12]) == (1.8, 2.4, 0.997, "faster", True)
    assert "look after repeat 2" in code[16]
    assert chat[11] == "inconclusive" and "open when the run stopped" in chat[16]
    assert out["code", "measurement"] == rows[2]  # other rows untouched


def test_a_cell_left_for_futility_keeps_the_runs_interval_at_its_looks_level():
    # a look after repeat 2 reads on about 1 df at a spent level: its interval can span orders of
    # magnitude (a llama.cpp demo printed 1.07x, 99.9% CI 0.00-3e18); the label says inconclusive
    look = {"comparison": "ab", "category": "chat", "level": 1, "label": "inconclusive", "ci_low": 4e-19}
    look |= {"ci_high": 3e18, "ci_level": 0.9987, "repeats_needed": 101, "futile": True}
    look |= {"tost_low": 0.33, "tost_high": 3.0}  # the look's 90% bar: not drawn beside the run's interval
    row = _family("chat", 1, "faster") + (None, 0.95, 1.05)  # ... equivalence_low, equivalence_high
    (out,) = apply_looks([row], [{"repeat": 2, "decided": [look]}], 0.05)
    # the run's own (0.9-1.1 at 99% on 5 df) redrawn at the look's 99.87%: wider, centred alike
    q, q_look = t_quantile(0.995, 5.0), t_quantile(1 - 0.0013 / 2, 5.0)
    half = math.log(1.1 / 0.9) / 2 * q_look / q
    centre = math.log(1.1 * 0.9) / 2
    assert (out[5], out[6], out[7]) == (
        pytest.approx(math.exp(centre - half)),
        pytest.approx(math.exp(centre + half)),
        0.9987,
    )
    assert out[5] < 0.9 and out[6] > 1.1
    assert (out[18], out[19]) == (0.95, 1.05)  # and its own 90% interval
    assert out[11] == "inconclusive" and out[12] is None and out[14] == 101
    assert "left for futility at the look after repeat 2" in out[16]


def test_a_futile_cell_never_shows_an_interval_that_clears_1():
    """The demo of 2026-12-08 printed (system) c4 inconclusive with 1.13x (98.6% CI 1.003-1.26): a
    cell left for futility at a look, its level run on after it, the run's interval at its end read
    at the run's level. Where the run's figures at the look's level still clear 1, the look's own
    interval (which holds 1: it was not rejected there) is shown."""
    look = {"comparison": "ab", "category": "(system)", "level": 4, "label": "inconclusive", "ci_low": 0.97}
    look |= {"ci_high": 1.31, "ci_level": 0.998, "repeats_needed": 40, "futile": True}
    row = ("ab", "(system)", 4, None, "family", 1.1, 1.15, 0.986, 6.0, 0.01, 12, "faster", None, 0.1, None, 0.05, "m")
    (out,) = apply_looks([row + (None, None, None)], [{"repeat": 3, "decided": [look]}], 0.05)
    assert (out[5], out[6], out[7], out[11]) == (0.97, 1.31, 0.998, "inconclusive")


# noise the intervals do not assume: the order effect, drift, t(3) tails, slow blocks, shocks
ALL = {"order": 0.04, "drift": 0.044, "tails": 3.0, "slow_share": 0.04, "shock": 0.03}


def test_under_aa_with_misfits_the_sequential_design_keeps_its_error_rate_and_no_spending_does_not():
    from dataclasses import replace

    noise = replace(MEASURED, prompt={}, **ALL)
    design = Design(repeats=5)
    ours = compare(design, noise, 1.0, 120, 5, seed=11)
    planted = compare(design, noise, 1.0, 120, 5, seed=11, spend=False)
    # 120 runs: a true rate of 5% gives at most 12 false runs (10%) with probability > 99%
    assert ours.sequential_false_runs <= 0.10, ours
    assert planted.sequential_false_runs > ours.sequential_false_runs, (planted, ours)


def test_large_effects_are_decided_in_fewer_repeats_than_the_fixed_design():
    from dataclasses import replace

    noise = replace(MEASURED, **ALL)
    design = Design(repeats=8)  # the fixed design of the same most repeats
    truth = {(c, lv): {"code": 2.2, "structured": 1.5}.get(c, 1.0) for c in design.categories for lv in design.levels}
    r = compare(design, noise, truth, 20, 8, seed=3)
    assert r.repeats_ratio < 0.75, r  # 0.61 measured (20 runs, seed 3)
    assert r.fixed_decisions_reached >= 0.85, r


def test_an_equivalent_cell_keeps_the_tost_interval_its_look_read_and_the_marts_draw_it():
    # a tiny spread: the look's 1 - 2 alpha interval lies inside +-5% while its Holm interval is
    # wider; the bar drawn for `equivalent` must be the one read (issue 41: a llama.cpp demo showed
    # chat c1 `equivalent` with the end-of-run 90% bar outside the band). On 1 df it is not read.
    one_df = decide({("ab", "chat", 1): Cell(math.log(0.99), 0.0012, 1.0)}, 2, 5, 0.0, False, 0.05)
    assert all(d.label != "equivalent" for d in one_df.decided)
    cell = Cell(math.log(0.99), 0.004, 2.0)
    look = decide({("ab", "chat", 1): cell}, 2, 5, 0.0, False, 0.05)
    (d,) = look.decided
    assert d.label == "equivalent" and d.tost_low is not None and d.tost_high is not None
    assert 1 / 1.05 <= d.tost_low < 0.99 < d.tost_high <= 1.05
    assert d.ci_high - d.ci_low > d.tost_high - d.tost_low
    from dataclasses import asdict

    row = (*_family("chat", 1, "inconclusive"), 1.0, 0.5, 1.5)  # end-of-run TOST 0.5-1.5
    (out,) = apply_looks([row], [{"repeat": 2, "decided": [asdict(d)]}], 0.05)
    assert out[11] == "equivalent" and (out[18], out[19]) == (d.tost_low, d.tost_high)


def test_an_arm_below_another_by_more_than_the_margin_everywhere_leaves_and_the_rest_stay():
    """A sweep's k2 is measured at 1.10x where k8 is decided at 2.0x at both levels: k2 leaves
    (inconclusive, ``dominated_by`` k8); k4, whose interval at c4 reaches k8's, stays; a
    comparison against another reference is never compared."""
    from specdec.analytics.sequential import Look, leave_dominated

    noisy = Cell(math.log(1.10), 0.02, 8.0)
    close = Cell(math.log(1.95), 0.02, 8.0)
    cells = {
        ("r/k2", "code", 1): noisy,
        ("r/k2", "code", 4): noisy,
        ("r/k4", "code", 1): Cell(math.log(1.5), 0.02, 8.0),
        ("r/k4", "code", 4): close,
        ("r/x", "code", 1): noisy,
        ("r/x", "code", 4): noisy,
    }
    look = decide(cells, 3, 6, spent(2 / 6), False, 0.05)
    # force k2, k4 and x open, as if undecided, and k8 decided earlier at 2.0x everywhere
    look.decided = [d for d in look.decided if d.comparison not in ("r/k2", "r/k4", "r/x")]
    look.open = list(cells)
    past = [
        {
            "decided": [
                {"comparison": "r/k8", "category": "code", "level": lv, "ci_low": 1.9, "ci_high": 2.1} for lv in (1, 4)
            ]
        }
    ]
    refs = {"r/k2": "k0", "r/k4": "k0", "r/k8": "k0", "r/x": "other"}
    beaten = leave_dominated(look, cells, past, refs, 0.05)
    assert beaten == {"r/k2": "r/k8"}
    left = [d for d in look.decided if d.comparison == "r/k2"]
    assert {d.level for d in left} == {1, 4} and all(
        d.label == "inconclusive" and d.dominated_by == "r/k8" for d in left
    )
    assert all(d.ci_high * 1.05 < 1.9 for d in left)  # the interval it was read from clears k8's low by the margin
    assert set(look.open) == {("r/k4", "code", 1), ("r/k4", "code", 4), ("r/x", "code", 1), ("r/x", "code", 4)}
    # a rival missing one of the arm's cells does not beat it there
    look2 = decide(cells, 3, 6, spent(2 / 6), False, 0.05)
    look2.decided, look2.open = [], [("r/k2", "code", 1), ("r/k2", "code", 4)]
    assert leave_dominated(look2, cells, [{"decided": past[0]["decided"][:1]}], refs, 0.05) == {}
    # and at a look that spends nothing, no open interval is finite: nothing leaves
    look3 = Look(3, 0.0, ALPHA, False, [], [("r/k2", "code", 1), ("r/k2", "code", 4)])
    assert leave_dominated(look3, cells, past, refs, 0.05) == {}


def test_a_cell_that_left_with_its_arm_keeps_the_runs_interval_and_says_why():
    row = ("ab", "code", 1, None, "family", 0.9, 1.3, 0.95, 1.1, 4.0, None, "inconclusive", None, None, None,
           None, "t interval", None, None, None)  # fmt: skip
    d = {"comparison": "r/k2", "category": "code", "level": 1, "label": "inconclusive", "ci_low": 1.0,
         "ci_high": 1.2, "ci_level": 0.99, "dominated_by": "r/k8"}  # fmt: skip
    (out,) = apply_looks([row], [{"repeat": 3, "decided": [d]}], 0.05, "r/k2", True)
    assert out[11] == "inconclusive" and (out[5], out[6]) == (0.9, 1.3)  # the run's, not the look's
    assert "left with its arm, below r/k8" in out[16]


def test_the_look_names_the_arms_its_open_cells_need(tmp_path):
    """``look_fn`` on a run of named arms (plain; ngram and ngram2 against it): its comparisons
    are the ids the intervals carry, and ``open_arms`` holds each open cell's treatment and its
    reference, in the run's order."""
    from specdec.analytics import sequential_look
    from tests.support.named_run import write_named_run

    run_dir = write_named_run(tmp_path / "run")
    arms, pairs = sequential_look._comparisons(run_dir)
    assert arms == ["plain", "ngram", "ngram2"]
    assert {t: r for t, r in pairs.values()} == {"ngram": "plain", "ngram2": "plain"}
    import duckdb

    from specdec.analytics.build import build

    con = duckdb.connect(str(build(run_dir, db_path=tmp_path / "x.duckdb")), read_only=True)
    ids = {r[0] for r in con.execute("select distinct run_id from int_requests_paired").fetchall()}
    con.close()
    assert ids == set(pairs)  # the analysis runs of the paired rows (and the intervals) are the look's keys
    # one repeat: no interval yet, so no open cell and no arm needed; the look says so
    out = sequential_look.look_fn(run_dir, 8, 0.05, [])(2, [1, 2], False)
    assert out["open_cells"] == [] and out["open_arms"] == [] and out["open_levels"] == []


def test_each_comparison_of_named_arms_reads_its_own_decisions_from_the_runs_looks():
    """The looks of a sweep name each cell by its analysis run (t/k2, t/k4); the interval rows of
    each name it 'ab'. Before 2026-12-06 the look keyed cells by 'ab' alone, so the comparisons'
    cells collided, and the labels of a sequential run of named arms were never its looks'."""

    def row(label="faster"):
        # comparison, category, level, segment, interval, ci_low, ci_high, ci_level, df, p_value, family_size,
        # label, clears_margin, detectable_effect, repeats_needed, margin, method, noise_ratio, equivalence
        return ("ab", "code", 1, None, "family", 1.1, 1.5, 0.95, 4.0, 0.01, 1, label, None, None, None, 0.05,
                "t interval", None, None, None)  # fmt: skip

    def d(comparison, label, low):
        return {"comparison": comparison, "category": "code", "level": 1, "label": label, "ci_low": low,
                "ci_high": low + 0.2, "ci_level": 0.99}  # fmt: skip

    looks = [
        {"repeat": 2, "decided": [d("t/k2", "faster", 1.2), d("t/k4", "equivalent", 0.97), d("ab", "slower", 0.5)]}
    ]
    (k2,) = apply_looks([row()], looks, 0.05, "t/k2", True)
    (k4,) = apply_looks([row()], looks, 0.05, "t/k4", True)
    (k8,) = apply_looks([row()], looks, 0.05, "t/k8", True)
    assert (k2[11], k2[5]) == ("faster", 1.2) and (k4[11], k4[5]) == ("equivalent", 0.97)
    assert k8[11] == "inconclusive" and "no look decided it" in k8[16]  # an old look's 'ab' is not k8's
    # a classic run reads its own id and, from older manifests, 'ab'
    (classic,) = apply_looks([row()], [{"repeat": 2, "decided": [d("ab", "slower", 0.5)]}], 0.05, "run1")
    assert (classic[11], classic[5]) == ("slower", 0.5)


def test_each_analysis_run_of_a_sequential_run_of_named_arms_finds_the_runs_looks(tmp_path):
    """The looks live in the run's manifest; each comparison (``<run>/<treatment>``) finds them
    through the roles table, marked as one comparison of several; the run itself, unmarked."""
    import json

    import duckdb

    from specdec.analytics.build import build
    from specdec.analytics.intervals import sequential_looks
    from tests.support.named_run import write_named_run

    run_dir = write_named_run(tmp_path / "run")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    looks = [{"repeat": 2, "decided": [], "open_cells": []}]
    (run_dir / "manifest.json").write_text(json.dumps({**manifest, "looks": looks}))
    con = duckdb.connect(str(build(run_dir, db_path=tmp_path / "x.duckdb")), read_only=True)
    try:
        found = sequential_looks(con)
    finally:
        con.close()
    assert found == {"t": (looks, False), "t/ngram": (looks, True), "t/ngram2": (looks, True)}
