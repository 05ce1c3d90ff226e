"""The classified lossless check on hand-built rows: int_greedy_pairs,
int_baseline_text_pairs, lossless, lossless_divergences, acceptance_natural_end.

Verification checks (repeat 0, dtype bfloat16 -> near_tie_threshold 0.25, eos id 0; the run has
no A/A flip to calibrate from: the baseline's pA at level 2 is a prefix of its level-1 output, a
length difference, and pB, pC, pD are the same at both levels):

    level  prompt    baseline ids     speculative ids   first div  baseline margin there   class
    1      pA code   5 6 7 8          5 6 7 8           -          -                       identical
    1      pB code   1 2 3 4          1 2 30 4          2          -0.30 - -0.35 = 0.05    near_tie (30 = runner-up)
    1      pC code   3 5 0 6          3 5 0 7           3          -0.1 - -1.6 = 1.5       suspect, after the end (2)
    1      pD chat   9 9              9 9               -          -                       identical
    2      pA code   5 6 7            5 6 7 8           3 (prefix) none (baseline ended)   suspect; eos ids unknown
    2      pB, pC    as the baseline at level 1, both arms                                 identical
    2      pD chat   9 9              failed (http_status)                                 no pair
Speculative error rate at level 2: 1 failed of 4 checks = 0.25.

Timed baseline requests, temperature 0, code (R = 2):
    level 1: pA "x" / "x" (identical), pB "y" / "y2" (differ)        -> aa 1 of 2
    level 2: pA "x" / failed, pB "y3" / "y3"                         -> aa 1 of 1
    cross level (repeat 0, level 2 vs level 1): pA x = x, pB y3 != y -> 1 of 2
plus requests that must not count: a baseline pS at temperature 0.7 with equal
texts, and a speculative pA. (The rows are built in tests/support/lossless_run.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec.analytics.build import build
from specdec.arms import by_role_columns
from specdec.schemas.records import GreedyCheck
from tests.support import duck
from tests.support.lossless_run import check, make_checks, make_run, timed
from tests.support.synthetic_run import RUN


def rows(run_dir: Path, sql: str) -> list[dict]:
    """The run's database built, then read."""
    return duck.rows(build(run_dir), sql)


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return make_run(tmp_path)


def test_staging_columns_are_the_record_fields(run):
    cols = [r["column_name"] for r in rows(run, "describe stg_greedy_checks")]
    assert cols == by_role_columns(list(GreedyCheck.model_fields))


def test_greedy_pairs_classify_each_divergence(run):
    got = {(r["level"], r["prompt_id"]): r for r in rows(run, "select * from int_greedy_pairs")}
    assert set(got) == {(1, "pA"), (1, "pB"), (1, "pC"), (1, "pD"), (2, "pA"), (2, "pB"), (2, "pC")}
    assert {k for k, r in got.items() if r["class"] == "identical"} == {(1, "pA"), (1, "pD"), (2, "pB"), (2, "pC")}
    for r in got.values():
        assert r["near_tie_threshold"] == 0.25 and r["pair_index"] == 0
        if r["identical"]:
            assert r["first_divergence_position"] is None and r["baseline_margin"] is None
            assert r["after_natural_end"] is None

    near = got[(1, "pB")]
    assert (near["first_divergence_position"], near["baseline_token_id"], near["speculative_token_id"]) == (2, 3, 30)
    assert near["baseline_margin"] == pytest.approx(0.05) and near["class"] == "near_tie"
    assert near["speculative_took_runner_up"] is True
    assert near["baseline_natural_end_position"] is None and near["after_natural_end"] is False  # never ended

    sus = got[(1, "pC")]
    assert (sus["first_divergence_position"], sus["baseline_token_id"], sus["speculative_token_id"]) == (3, 6, 7)
    assert sus["baseline_margin"] == pytest.approx(1.5) and sus["class"] == "suspect"
    assert sus["speculative_took_runner_up"] is False
    assert sus["baseline_natural_end_position"] == 2 and sus["after_natural_end"] is True

    prefix = got[(2, "pA")]  # the baseline's output is a prefix of the speculative one
    assert (prefix["baseline_tokens"], prefix["speculative_tokens"]) == (3, 4)
    assert prefix["first_divergence_position"] == 3
    assert (prefix["baseline_token_id"], prefix["speculative_token_id"]) == (None, 8)
    assert prefix["baseline_margin"] is None and prefix["class"] == "suspect"  # nothing explains it
    assert prefix["after_natural_end"] is None  # end-of-sequence ids unknown


def test_a_margin_of_one_bfloat16_step_is_a_near_tie_and_float32_is_stricter(tmp_path):
    # the speculative token 3 is the baseline's runner-up at position 1, so only the margin decides
    checks = [
        check("baseline", 1, "pB", [1, 2], top1=[-0.1, -0.5], top2=[-2.0, -0.7500001], top2_ids=[9, 3]),
        check("speculative", 1, "pB", [1, 3]),
    ]
    got = rows(make_run(tmp_path / "bf16", checks=checks), "select class, baseline_margin from int_greedy_pairs")
    # 0.2500001: one bfloat16 step (0.25) plus float32 rounding of the logprobs -> numerics
    assert [g["class"] for g in got] == ["near_tie"] and got[0]["baseline_margin"] == pytest.approx(0.25)
    checks[0] = check("baseline", 1, "pB", [1, 2], top1=[-0.1, -0.5], top2=[-2.0, -0.7501], top2_ids=[9, 3])
    got = rows(make_run(tmp_path / "bf16b", checks=checks), "select class from int_greedy_pairs")
    assert got == [{"class": "suspect"}]  # 0.2501: beyond one step
    checks[0] = check("baseline", 1, "pB", [1, 2], top1=[-0.1, -0.5], top2=[-2.0, -0.502], top2_ids=[9, 3])
    got = rows(
        make_run(tmp_path / "fp32", checks=checks, dtype="float32"),
        "select class, near_tie_threshold from int_greedy_pairs",
    )
    assert got == [{"class": "suspect", "near_tie_threshold": 0.001}]  # margin 0.002 >= 0.001


def test_lossless_counts_beside_the_aa_floor(run):
    got = {(r["category"], r["level"]): r for r in rows(run, "select * from lossless")}
    assert set(got) == {("code", 1), ("code", 2), ("chat", 1), ("chat", 2)}
    c1, c2 = got[("code", 1)], got[("code", 2)]
    assert c1["dtype"] == "bfloat16" and c1["near_tie_threshold"] == 0.25
    assert (c1["checks"], c1["checks_failed"], c1["pairs"], c1["identical"], c1["near_tie"], c1["suspect"]) == (
        6,
        0,
        3,
        1,
        1,
        1,
    )
    assert c1["identity_share"] == pytest.approx(1 / 3) and c1["excluded_reason"] is None
    # A/A, repeat to repeat: pA x = x, pB y != y2 (the temperature-0.7 pS and the speculative rows do not count)
    assert (c1["repeats"], c1["aa_pairs"], c1["aa_identical"], c1["aa_identity_share"]) == (2, 2, 1, 0.5)
    # the lowest level has nothing to compare across levels
    assert (c1["cross_level_pairs"], c1["cross_level_identical"], c1["cross_level_identity_share"]) == (
        None,
        None,
        None,
    )

    assert (c2["checks"], c2["pairs"], c2["identical"], c2["near_tie"], c2["suspect"]) == (6, 3, 2, 0, 1)
    assert c2["identity_share"] == pytest.approx(2 / 3)
    # pA's repeat 1 failed: only pB y3 = y3 pairs
    assert (c2["aa_pairs"], c2["aa_identical"], c2["aa_identity_share"]) == (1, 1, 1.0)
    # level 2 against level 1 (repeat 0): pA x = x, pB y3 != y
    assert (c2["cross_level_pairs"], c2["cross_level_identical"], c2["cross_level_identity_share"]) == (2, 1, 0.5)

    chat1, chat2 = got[("chat", 1)], got[("chat", 2)]
    assert (chat1["pairs"], chat1["identical"], chat1["identity_share"]) == (1, 1, 1.0)
    assert (chat1["repeats"], chat1["aa_pairs"], chat1["cross_level_pairs"]) == (None, None, None)  # no timed rows
    # the speculative check failed: no pair, the failure counted; 1 of 4 checks at the level
    # failed (0.25 <= max_error_rate 0.5), so the level stands
    assert (chat2["checks"], chat2["checks_failed"], chat2["pairs"], chat2["identity_share"]) == (2, 1, 0, None)
    assert chat2["excluded_reason"] is None


def test_lossless_divergences_list_every_non_identical_pair(run):
    got = rows(run, "select * from lossless_divergences")
    assert [(r["level"], r["prompt_id"], r["class"]) for r in got] == [
        (1, "pB", "near_tie"),
        (1, "pC", "suspect"),
        (2, "pA", "suspect"),
    ]
    summary = rows(run, "select sum(near_tie) as n, sum(suspect) as s from lossless")[0]
    assert (summary["n"], summary["s"]) == (1, 2)  # the same divergences, counted
    by = {r["prompt_id"]: r for r in got}
    assert by["pB"]["baseline_margin"] == pytest.approx(0.05) and by["pB"]["after_natural_end"] is False
    assert by["pC"]["first_divergence_position"] == 3 and by["pC"]["baseline_natural_end_position"] == 2
    assert by["pC"]["after_natural_end"] is True and by["pC"]["baseline_tokens"] == 4
    assert by["pA"]["baseline_margin"] is None and by["pA"]["after_natural_end"] is None
    assert by["pC"]["baseline_request_id"] == f"sd.{RUN}.baseline.c1.r0.pC.lossless"
    assert all(r["excluded_reason"] is None for r in got)


def test_a_failed_or_one_sided_lossless_pass_gives_no_lossless_figure(tmp_path):
    checks = make_checks() + [check("baseline", 4, "pA", [5, 6])]
    run_dir = make_run(tmp_path, checks=checks, max_error_rate=0.05)
    got = {(r["category"], r["level"]): r for r in rows(run_dir, "select * from lossless")}
    reason = "speculative lossless pass failed (error rate 0.250 > max 0.050)"
    for key in (("code", 2), ("chat", 2)):
        r = got[key]
        assert r["excluded_reason"] == reason
        assert (r["pairs"], r["identical"], r["near_tie"], r["suspect"], r["identity_share"]) == (None,) * 5
    assert got[("code", 2)]["aa_pairs"] == 1  # the A/A floor (timed requests) still stands
    assert got[("code", 4)]["excluded_reason"] == "speculative arm has no lossless checks at this level"
    assert got[("code", 1)]["excluded_reason"] is None and got[("code", 1)]["pairs"] == 3
    div = rows(run_dir, "select level, excluded_reason from lossless_divergences where level = 2")
    assert div == [{"level": 2, "excluded_reason": reason}]  # listed, but not counted


def test_one_repeat_and_no_lossless_pass_are_not_applicable(tmp_path):
    # a run without repeats and without a lossless pass (e.g. --no-verify, or an old run)
    requests = [
        timed("baseline", 1, 0, "pA", "x"),
        timed("baseline", 2, 0, "pA", "x"),
        timed("speculative", 1, 0, "pA", "x"),
        timed("speculative", 2, 0, "pA", "x"),
    ]
    got = rows(make_run(tmp_path, checks=False, requests=requests), "select * from lossless order by level")
    assert [(r["level"], r["repeats"], r["aa_pairs"], r["aa_identical"], r["aa_identity_share"]) for r in got] == [
        (1, 1, None, None, None),
        (2, 1, None, None, None),
    ]
    assert [(r["cross_level_pairs"], r["cross_level_identical"]) for r in got] == [(None, None), (1, 1)]
    assert all(
        r["checks"] == 0 and r["pairs"] is None and r["excluded_reason"] == "no lossless pass at this level"
        for r in got
    )
    assert rows(tmp_path, "select count(*) as n from lossless_divergences") == [{"n": 0}]


def test_duplicate_prompts_pair_by_occurrence(tmp_path):
    checks = [check("baseline", 1, "pA", [1, 2]), check("speculative", 1, "pA", [1, 2])]
    twice = [
        c.model_copy(
            update={"request_id": c.request_id + "2", "token_ids": [1, 3] if c.arm == "speculative" else [1, 2]}
        )
        for c in checks
    ]
    got = rows(
        make_run(tmp_path, checks=checks + twice), "select pair_index, class from int_greedy_pairs order by pair_index"
    )
    assert got == [{"pair_index": 0, "class": "identical"}, {"pair_index": 1, "class": "suspect"}]


def test_acceptance_splits_at_the_natural_end(run):
    got = {(r["category"], r["level"], r["segment"]): r for r in rows(run, "select * from acceptance_natural_end")}
    assert set(got) == {("code", 1, "before_natural_end"), ("code", 1, "after_natural_end"), ("code", 2, "unknown")}
    before = got[("code", 1, "before_natural_end")]  # pC's round at position 1, pB's (never ends)
    assert (before["requests"], before["verify_rounds"], before["tokens_proposed"], before["tokens_accepted"]) == (
        2,
        2,
        8,
        3,
    )
    assert before["mean_acceptance_length"] == 2.5 and before["acceptance_rate"] == 0.375
    after = got[("code", 1, "after_natural_end")]  # pC's rounds at positions 4 and 9 (end at 2)
    assert (after["requests"], after["verify_rounds"], after["tokens_proposed"], after["tokens_accepted"]) == (
        1,
        2,
        8,
        7,
    )
    assert after["mean_acceptance_length"] == 4.5 and after["acceptance_rate"] == 0.875
    unknown = got[("code", 2, "unknown")]  # pA at level 2: eos ids unknown
    assert (unknown["verify_rounds"], unknown["mean_acceptance_length"], unknown["acceptance_rate"]) == (1, 3.0, 1.0)
