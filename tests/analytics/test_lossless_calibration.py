"""The lossless classes on hand-built rows: a near-tie needs the baseline's
runner-up, the near-tie margin is calibrated from the run's own A/A flips,
and a lossless pass during which the speculative arm did not speculate is
invalid (int_baseline_greedy_pairs, int_lossless_settings, int_passes_checked,
int_greedy_pairs, lossless).

Every check has 4 tokens and, unless a row says otherwise, top-1 logprob -0.1
and top-2 -3.0 (margin 2.9) with runner-up id 99. dtype bfloat16 (reasoned
near-tie threshold 0.25). Margins are binary fractions, so they are exact.

Baseline checks of the lossless pass (the A/A flips; * = position 1 as listed):

    prompt  level  ids          position 1: top1, top2 (margin), runner-up id
    pA      1      5 6 7 8      -0.25, -0.375   (0.125),  16
    pA      2      5 16 7 8     -0.25, -0.3125  (0.0625),  6
    pA      4      5 6 7 8      -0.25, -0.375   (0.125),  16
    pB      1, 2   1 2 3 4      (identical at both levels)
    pB      4      1 2 3        (a prefix: a length difference, not a flip)

    A/A flips (int_baseline_greedy_pairs, flipped): pA c1-c2 and pA c2-c4, each
    at position 1 with aa_margin = max(0.125, 0.0625) = 0.125; pA c1-c4 and pB
    c1-c2 identical; pB c1-c4 and c2-c4 not flips. -> 2 divergences, largest
    margin 0.125, within bfloat16's 0.25: near_tie_threshold 0.25, source 'dtype_floor'
    (flips widen the threshold, never narrow it); in float32 (0.001) the same flips
    widen it to 0.125, source 'aa_divergences'.

Speculative checks at level 1 (the baseline's as above; pC, pD, pE below):

    prompt  baseline ids  position 2 of the baseline: margin, runner-up   speculative ids   class
    pC      1 2 3 4       0.0625, runner-up 30                            1 2 31 4          suspect (31 not runner-up)
    pD      1 2 3 4       0.0625, runner-up 30                            1 2 30 4          near_tie (0.0625 <= 0.125)
    pE      1 2 3 4       0.1875, runner-up 30                            1 2 30 4          near_tie under 0.25
                                                                                            (suspect in float32: > 0.125)
"""

from __future__ import annotations

from pathlib import Path

from specdec.analytics.build import build
from specdec.runfolder import record_file
from specdec.schemas.arrow import table_from_records, write_parquet_atomic
from specdec.schemas.records import GreedyCheck, PassCounters
from tests.support import duck
from tests.support.synthetic_run import RUN, T0, make_manifest, write_run


def check(
    arm: str,
    level: int,
    prompt: str,
    ids: list[int],
    at: dict[int, tuple[float, float, int]] | None = None,
) -> GreedyCheck:
    """A successful check; ``at``: position -> (top1, top2, runner-up id) where they differ from the default."""
    at = at or {}
    top1 = [at.get(i, (-0.1, -3.0, 99))[0] for i in range(len(ids))]
    top2 = [at.get(i, (-0.1, -3.0, 99))[1] for i in range(len(ids))]
    top2_ids = [at.get(i, (-0.1, -3.0, 99))[2] for i in range(len(ids))]
    return GreedyCheck(
        run_id=RUN,
        arm=arm,
        level=level,
        repeat=0,
        request_id=f"sd.{RUN}.{arm}.c{level}.r0.{prompt}.lossless",
        prompt_id=prompt,
        category="code",
        success=True,
        error_type=None,
        token_ids=ids,
        top1_logprobs=top1,
        top2_logprobs=top2,
        top2_token_ids=top2_ids,
        natural_end_position=None,
        eos_token_ids=None,
    )


AA_CHECKS = [
    check("baseline", 1, "pA", [5, 6, 7, 8], {1: (-0.25, -0.375, 16)}),
    check("baseline", 2, "pA", [5, 16, 7, 8], {1: (-0.25, -0.3125, 6)}),
    check("baseline", 4, "pA", [5, 6, 7, 8], {1: (-0.25, -0.375, 16)}),
    check("baseline", 1, "pB", [1, 2, 3, 4]),
    check("baseline", 2, "pB", [1, 2, 3, 4]),
    check("baseline", 4, "pB", [1, 2, 3]),
]

SPEC_CHECKS = [
    check("baseline", 1, "pC", [1, 2, 3, 4], {2: (-0.25, -0.3125, 30)}),
    check("speculative", 1, "pC", [1, 2, 31, 4]),
    check("baseline", 1, "pD", [1, 2, 3, 4], {2: (-0.25, -0.3125, 30)}),
    check("speculative", 1, "pD", [1, 2, 30, 4]),
    check("baseline", 1, "pE", [1, 2, 3, 4], {2: (-0.25, -0.4375, 30)}),
    check("speculative", 1, "pE", [1, 2, 30, 4]),
]


def at_level(c: GreedyCheck, level: int) -> GreedyCheck:
    """The same check sent at another level."""
    return c.model_copy(update={"level": level, "request_id": c.request_id.replace(".c1.", f".c{level}.")})


def counters(arm: str, level: int, before: tuple, after: tuple, kind: str = "lossless_pass") -> list[PassCounters]:
    """(drafts, draft_tokens, accepted_tokens, generation_tokens) before and after a pass."""
    keys = ("spec_num_drafts", "spec_num_draft_tokens", "spec_num_accepted_tokens", "generation_tokens")
    return [
        PassCounters(
            run_id=RUN,
            arm=arm,
            level=level,
            pass_kind=kind,
            position=pos,
            wall_time_ns=T0 + i,
            **dict(zip(keys, values)),
        )
        for i, (pos, values) in enumerate((("before", before), ("after", after)))
    ]


def make_run(
    run_dir: Path, checks: list[GreedyCheck], passes: list[PassCounters] | None = None, dtype: str = "bfloat16"
) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    write_run(run_dir, manifest=make_manifest(dtype=dtype, max_error_rate=0.5))
    write_parquet_atomic(table_from_records(GreedyCheck, checks), run_dir / record_file("greedy_checks").consolidated)
    if passes is not None:
        write_parquet_atomic(
            table_from_records(PassCounters, passes), run_dir / record_file("pass_counters").consolidated
        )
    return run_dir


def rows(run_dir: Path, sql: str) -> list[dict]:
    """The run's database built, then read."""
    return duck.rows(build(run_dir), sql)


def test_a_speculative_token_that_is_not_the_runner_up_is_suspect_even_at_a_small_margin(tmp_path):
    got = {r["prompt_id"]: r for r in rows(make_run(tmp_path, SPEC_CHECKS), "select * from int_greedy_pairs")}
    # no A/A flip in this run: the bfloat16 default 0.25
    assert {r["near_tie_threshold"] for r in got.values()} == {0.25}
    pc, pd, pe = got["pC"], got["pD"], got["pE"]
    assert (pc["first_divergence_position"], pc["baseline_margin"], pc["speculative_took_runner_up"]) == (
        2,
        0.0625,
        False,
    )
    assert pc["class"] == "suspect"  # 0.0625 is well inside 0.25, but 31 is not the baseline's runner-up (30)
    assert (pd["baseline_margin"], pd["speculative_took_runner_up"], pd["class"]) == (0.0625, True, "near_tie")
    assert (pe["baseline_margin"], pe["speculative_took_runner_up"], pe["class"]) == (0.1875, True, "near_tie")
    lossless = rows(tmp_path, "select * from lossless where level = 1 and category = 'code'")[0]
    assert (lossless["pairs"], lossless["identical"], lossless["near_tie"], lossless["suspect"]) == (3, 0, 2, 1)


def test_an_unknown_runner_up_is_no_near_tie(tmp_path):
    base = check("baseline", 1, "pD", [1, 2, 3, 4], {2: (-0.25, -0.3125, 30)})
    base = base.model_copy(update={"top2_token_ids": []})  # a file written before top2_token_ids existed
    got = rows(
        make_run(tmp_path, [base, check("speculative", 1, "pD", [1, 2, 30, 4])]),
        "select speculative_took_runner_up, class from int_greedy_pairs",
    )
    assert got == [{"speculative_took_runner_up": None, "class": "suspect"}]


def test_planted_aa_flips_set_the_threshold(tmp_path):
    run_dir = make_run(tmp_path, AA_CHECKS + SPEC_CHECKS)
    aa = rows(
        run_dir,
        "select * from int_baseline_greedy_pairs where prompt_id in ('pA', 'pB') "
        "order by prompt_id, level, other_level",
    )
    got = {(r["prompt_id"], r["level"], r["other_level"]): r for r in aa}
    assert set(got) == {("pA", 1, 2), ("pA", 1, 4), ("pA", 2, 4), ("pB", 1, 2), ("pB", 1, 4), ("pB", 2, 4)}
    for key in (("pA", 1, 2), ("pA", 2, 4)):
        r = got[key]
        assert (r["first_divergence_position"], r["flipped"], r["runner_up_flip"]) == (1, True, True)
        assert {r["margin"], r["other_margin"]} == {0.125, 0.0625} and r["aa_margin"] == 0.125
    assert got[("pA", 1, 4)]["identical"] and got[("pA", 1, 4)]["aa_margin"] is None
    assert got[("pB", 1, 2)]["identical"]
    prefix = got[("pB", 1, 4)]  # the level-4 output is a prefix: a length difference, not a flip
    assert (prefix["first_divergence_position"], prefix["flipped"], prefix["aa_margin"]) == (3, False, None)

    settings = rows(run_dir, "select * from int_lossless_settings")[0]
    assert (settings["dtype"], settings["dtype_threshold"]) == ("bfloat16", 0.25)
    assert (settings["aa_divergences"], settings["aa_max_margin"]) == (2, 0.125)
    # two flips within one bfloat16 step do not narrow the threshold below it
    assert (settings["near_tie_threshold"], settings["near_tie_threshold_source"]) == (0.25, "dtype_floor")

    classes = {r["prompt_id"]: r["class"] for r in rows(run_dir, "select * from int_greedy_pairs")}
    # pD's 0.0625 and pE's 0.1875 are within 0.25; pC's token is not the runner-up
    assert (classes["pC"], classes["pD"], classes["pE"]) == ("suspect", "near_tie", "near_tie")

    c1 = rows(run_dir, "select * from lossless where level = 1 and category = 'code'")[0]
    assert (c1["near_tie_threshold"], c1["near_tie_threshold_source"], c1["near_tie_threshold_divergences"]) == (
        0.25,
        "dtype_floor",
        2,
    )
    assert (c1["near_tie"], c1["suspect"]) == (2, 1)


def test_aa_flips_above_the_dtypes_value_widen_the_threshold(tmp_path):
    # float32's reasoned 0.001 is below the run's flips (largest 0.125): they set it
    run_dir = make_run(tmp_path, AA_CHECKS + SPEC_CHECKS, dtype="float32")
    settings = rows(run_dir, "select * from int_lossless_settings")[0]
    assert (settings["dtype_threshold"], settings["near_tie_threshold"]) == (0.001, 0.125)
    assert settings["near_tie_threshold_source"] == "aa_divergences"
    classes = {r["prompt_id"]: r["class"] for r in rows(run_dir, "select * from int_greedy_pairs")}
    assert (classes["pC"], classes["pD"], classes["pE"]) == ("suspect", "near_tie", "suspect")


def test_without_aa_flips_the_dtype_default_is_used_and_said(tmp_path):
    c1 = rows(make_run(tmp_path, SPEC_CHECKS), "select * from lossless where level = 1 and category = 'code'")[0]
    assert (c1["near_tie_threshold"], c1["near_tie_threshold_source"], c1["near_tie_threshold_divergences"]) == (
        0.25,
        "dtype_default",
        0,
    )


def test_a_pass_with_unmoved_draft_counters_is_invalid(tmp_path):
    checks = SPEC_CHECKS + [at_level(c, lvl) for lvl in (2, 4) for c in SPEC_CHECKS]
    passes = (
        # level 1: drafts 10 -> 10, draft tokens 40 -> 40 while 12 tokens were generated: did not speculate
        counters("speculative", 1, (10, 40, 30, 100), (10, 40, 30, 112))
        # level 2: 3 drafts of 4 tokens proposed during the pass
        + counters("speculative", 2, (10, 40, 30, 112), (13, 52, 36, 124))
        # level 4: no reads (a run recorded before they existed): not known
        # the baseline exports no speculative counter: not the arm judged
        + counters("baseline", 1, (None, None, None, 100), (None, None, None, 112))
        # the sampling pass at level 1 did speculate: it does not vouch for the lossless pass
        + counters("speculative", 1, (10, 40, 30, 112), (20, 80, 60, 150), kind="sampling_pass")
    )
    run_dir = make_run(tmp_path, checks, passes)
    checked = {(r["arm"], r["level"], r["pass_kind"]): r for r in rows(run_dir, "select * from int_passes_checked")}
    spec1 = checked[("speculative", 1, "lossless_pass")]
    assert (spec1["drafts"], spec1["draft_tokens"], spec1["generation_tokens"], spec1["speculation_ran"]) == (
        0,
        0,
        12,
        False,
    )
    spec2 = checked[("speculative", 2, "lossless_pass")]
    assert (spec2["drafts"], spec2["draft_tokens"], spec2["accepted_tokens"], spec2["speculation_ran"]) == (
        3,
        12,
        6,
        True,
    )
    base1 = checked[("baseline", 1, "lossless_pass")]
    assert (base1["drafts"], base1["metrics_read"], base1["speculation_ran"]) == (None, True, False)
    assert checked[("speculative", 1, "sampling_pass")]["speculation_ran"] is True

    got = {r["level"]: r for r in rows(run_dir, "select * from lossless where category = 'code'")}
    c1, c2, c4 = got[1], got[2], got[4]
    assert (c1["pass_valid"], c1["pass_draft_tokens"]) == (False, 0)
    assert c1["excluded_reason"] == "speculation did not run during the lossless pass (draft counters unchanged)"
    assert (c1["pairs"], c1["near_tie"], c1["suspect"], c1["identity_share"]) == (None,) * 4
    assert (c2["pass_valid"], c2["pass_draft_tokens"], c2["excluded_reason"], c2["pairs"]) == (True, 12, None, 3)
    assert (c4["pass_valid"], c4["pass_draft_tokens"], c4["excluded_reason"], c4["pairs"]) == (None, None, None, 3)
    listed = rows(run_dir, "select level, excluded_reason from lossless_divergences where level = 1")
    assert len(listed) == 3 and all(r["excluded_reason"] == c1["excluded_reason"] for r in listed)


def test_a_speculative_server_without_speculative_counters_did_not_speculate(tmp_path):
    # a /metrics page (generation tokens counted) but no spec_decode counter: the server was
    # not configured to speculate; no /metrics page at all is "not known"
    passes = counters("speculative", 1, (None, None, None, 100), (None, None, None, 112)) + counters(
        "speculative", 2, (None,) * 4, (None,) * 4
    )
    checks = SPEC_CHECKS + [at_level(c, 2) for c in SPEC_CHECKS]
    got = {
        r["level"]: r
        for r in rows(make_run(tmp_path, checks, passes), "select * from lossless where category = 'code'")
    }
    assert (got[1]["pass_valid"], got[1]["pairs"]) == (False, None)
    assert (got[2]["pass_valid"], got[2]["pairs"]) == (None, 3)
