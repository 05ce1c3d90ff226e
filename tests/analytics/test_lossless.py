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
texts, and a speculative pA.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec.analytics.build import build
from specdec.arms import by_role_columns
from specdec.runfolder import record_file
from specdec.schemas.arrow import table_from_records, write_parquet_atomic
from specdec.schemas.records import GreedyCheck, RequestResult, RoundTrace
from tests.analytics.conftest import RUN, T0, failed, make_manifest, write_run
from tests.support import duck

EOS = [0]


def check(arm: str, level: int, prompt: str, ids: list[int], top1=None, top2=None, top2_ids=None, *,
          category: str = "code", eos: list[int] | None = EOS, success: bool = True) -> GreedyCheck:
    n = len(ids)
    top1 = top1 or [-0.1] * n
    top2 = top2 or [-3.0] * n
    end = next((i for i, t in enumerate(ids) if t in eos), None) if eos else None
    return GreedyCheck(
        run_id=RUN, arm=arm, concurrency=level, repeat=0,
        request_id=f"sd.{RUN}.{arm}.c{level}.r0.{prompt}.verify", prompt_id=prompt, category=category,
        success=success, error_type=None if success else "http_status",
        token_ids=ids if success else [], top1_logprobs=top1 if success else [],
        top2_logprobs=top2 if success else [], top2_token_ids=(top2_ids or [99] * n) if success else [],
        natural_end_position=end if success else None, eos_token_ids=eos)


def make_checks() -> list[GreedyCheck]:
    pb = dict(ids=[1, 2, 3, 4], top1=[-0.1, -0.2, -0.30, -0.4], top2=[-2.0, -2.2, -0.35, -3.0],
              top2_ids=[9, 9, 30, 9])
    pc = dict(ids=[3, 5, 0, 6], top1=[-0.1, -0.1, -0.1, -0.1], top2=[-2.0, -2.0, -2.0, -1.6],
              top2_ids=[9, 9, 9, 9])
    rows = [
        check("baseline", 1, "pA", [5, 6, 7, 8]), check("speculative", 1, "pA", [5, 6, 7, 8]),
        check("baseline", 1, "pB", **pb), check("speculative", 1, "pB", [1, 2, 30, 4]),
        check("baseline", 1, "pC", **pc), check("speculative", 1, "pC", [3, 5, 0, 7]),
        check("baseline", 1, "pD", [9, 9], category="chat"), check("speculative", 1, "pD", [9, 9], category="chat"),
        check("baseline", 2, "pA", [5, 6, 7], eos=None), check("speculative", 2, "pA", [5, 6, 7, 8], eos=None),
        check("baseline", 2, "pD", [9, 9], category="chat"),
        check("speculative", 2, "pD", [9, 9], category="chat", success=False),
    ]
    for arm in ("baseline", "speculative"):
        rows += [check(arm, 2, "pB", **pb), check(arm, 2, "pC", **pc)]
    return rows


def timed(arm: str, level: int, repeat: int, prompt: str, text: str, temperature: float = 0.0,
          prompt_tokens: int = 10) -> RequestResult:
    return RequestResult(
        run_id=RUN, arm=arm, concurrency=level, repeat=repeat,
        request_id=f"sd.{RUN}.{arm}.c{level}.r{repeat}.{prompt}", prompt_id=prompt, category="code",
        max_tokens=4, temperature=temperature, success=True, error_type=None, error_message=None,
        wall_send_ns=T0 + level * 10**9, ttft_ms=10.0, e2e_ms=100.0, chunk_offsets_ms=[10.0, 100.0],
        prompt_tokens=prompt_tokens, output_tokens=4, output_text=text, finish_reason="length",
        spec_num_steps=None, spec_num_draft_tokens=None, spec_num_accepted_tokens=None)


def make_timed() -> list[RequestResult]:
    return [
        timed("baseline", 1, 0, "pA", "x"), timed("baseline", 1, 1, "pA", "x"),
        timed("baseline", 1, 0, "pB", "y"), timed("baseline", 1, 1, "pB", "y2"),
        timed("baseline", 2, 0, "pA", "x"), failed(timed("baseline", 2, 1, "pA", "x")),
        timed("baseline", 2, 0, "pB", "y3"), timed("baseline", 2, 1, "pB", "y3"),
        timed("baseline", 1, 0, "pS", "s", temperature=0.7), timed("baseline", 1, 1, "pS", "s", temperature=0.7),
        timed("speculative", 1, 0, "pA", "different"),
        timed("speculative", 1, 0, "pB", "y"), timed("speculative", 1, 0, "pC", "c"),
        timed("speculative", 2, 0, "pA", "x"), timed("speculative", 1, 0, "pS", "s", temperature=0.7),
    ]


def _round(request_id: str, step: int, k: int, a: int, context: int, phase: str = "decode") -> RoundTrace:
    return RoundTrace(
        run_id=RUN, engine_request_id=f"chatcmpl-{request_id}-0123abcd", pid=2, process_token="2-cafe0001",
        step_index=step, round_index=step, phase=phase, tokens_proposed=k, tokens_accepted=a,
        tokens_emitted=a + 1, batch_size=1, num_scheduled_tokens=1 + k, context_len=context,
        draft_ms=1.0 if k else None, verify_ms=10.0, wall_time_ns=T0 + step)


def make_rounds() -> list[RoundTrace]:
    """Speculative rounds, prompt_tokens 10: first drafted position = context_len - 10 + 1.
    pC at c1 (natural end 2): positions 1 (before), 4 and 9 (after).
    pB at c1 (never ends): position 1 (before). pA at c2 (eos ids unknown): unknown."""
    rid = {p: f"sd.{RUN}.speculative.c{c}.r0.{p}" for p, c in (("pA", 2), ("pB", 1), ("pC", 1), ("pS", 1))}
    return [
        _round(rid["pC"], 0, 0, 0, 0, phase="prefill"),
        _round(rid["pC"], 1, 4, 2, 10), _round(rid["pC"], 2, 4, 4, 13), _round(rid["pC"], 3, 4, 3, 18),
        _round(rid["pC"], 4, 0, 0, 22),  # a decode step with no draft: not a verify round
        _round(rid["pB"], 5, 4, 1, 10),
        _round(rid["pA"], 6, 2, 2, 10),
        _round(rid["pS"], 7, 4, 4, 10),  # temperature 0.7: not split
        _round(f"sd.{RUN}.baseline.c1.r0.pB", 8, 0, 0, 10),
    ]


def write_greedy(run_dir: Path, rows: list[GreedyCheck]) -> None:
    write_parquet_atomic(table_from_records(GreedyCheck, rows), run_dir / record_file("greedy_checks").consolidated)


def make_run(run_dir: Path, *, checks=None, requests=None, max_error_rate: float = 0.5,
             dtype: str = "bfloat16") -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    write_run(run_dir, requests=make_timed() if requests is None else requests, rounds=make_rounds(),
              manifest=make_manifest(dtype=dtype, max_error_rate=max_error_rate))
    if checks is not False:
        write_greedy(run_dir, make_checks() if checks is None else checks)
    return run_dir


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
    got = {(r["concurrency"], r["prompt_id"]): r for r in rows(run, "select * from int_greedy_pairs")}
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
    checks = [check("baseline", 1, "pB", [1, 2], top1=[-0.1, -0.5], top2=[-2.0, -0.7500001], top2_ids=[9, 3]),
              check("speculative", 1, "pB", [1, 3])]
    got = rows(make_run(tmp_path / "bf16", checks=checks), "select class, baseline_margin from int_greedy_pairs")
    # 0.2500001: one bfloat16 step (0.25) plus float32 rounding of the logprobs -> numerics
    assert [g["class"] for g in got] == ["near_tie"] and got[0]["baseline_margin"] == pytest.approx(0.25)
    checks[0] = check("baseline", 1, "pB", [1, 2], top1=[-0.1, -0.5], top2=[-2.0, -0.7501], top2_ids=[9, 3])
    got = rows(make_run(tmp_path / "bf16b", checks=checks), "select class from int_greedy_pairs")
    assert got == [{"class": "suspect"}]  # 0.2501: beyond one step
    checks[0] = check("baseline", 1, "pB", [1, 2], top1=[-0.1, -0.5], top2=[-2.0, -0.502], top2_ids=[9, 3])
    got = rows(make_run(tmp_path / "fp32", checks=checks, dtype="float32"),
               "select class, near_tie_threshold from int_greedy_pairs")
    assert got == [{"class": "suspect", "near_tie_threshold": 0.001}]  # margin 0.002 >= 0.001


def test_lossless_counts_beside_the_aa_floor(run):
    got = {(r["category"], r["concurrency"]): r for r in rows(run, "select * from lossless")}
    assert set(got) == {("code", 1), ("code", 2), ("chat", 1), ("chat", 2)}
    c1, c2 = got[("code", 1)], got[("code", 2)]
    assert c1["dtype"] == "bfloat16" and c1["near_tie_threshold"] == 0.25
    assert (c1["checks"], c1["checks_failed"], c1["pairs"], c1["identical"], c1["near_tie"], c1["suspect"]) == \
        (6, 0, 3, 1, 1, 1)
    assert c1["identity_share"] == pytest.approx(1 / 3) and c1["excluded_reason"] is None
    # A/A, repeat to repeat: pA x = x, pB y != y2 (the temperature-0.7 pS and the speculative rows do not count)
    assert (c1["repeats"], c1["aa_pairs"], c1["aa_identical"], c1["aa_identity_share"]) == (2, 2, 1, 0.5)
    # the lowest level has nothing to compare across levels
    assert (c1["cross_level_pairs"], c1["cross_level_identical"], c1["cross_level_identity_share"]) == \
        (None, None, None)

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
    assert [(r["concurrency"], r["prompt_id"], r["class"]) for r in got] == \
        [(1, "pB", "near_tie"), (1, "pC", "suspect"), (2, "pA", "suspect")]
    summary = rows(run, "select sum(near_tie) as n, sum(suspect) as s from lossless")[0]
    assert (summary["n"], summary["s"]) == (1, 2)  # the same divergences, counted
    by = {r["prompt_id"]: r for r in got}
    assert by["pB"]["baseline_margin"] == pytest.approx(0.05) and by["pB"]["after_natural_end"] is False
    assert by["pC"]["first_divergence_position"] == 3 and by["pC"]["baseline_natural_end_position"] == 2
    assert by["pC"]["after_natural_end"] is True and by["pC"]["baseline_tokens"] == 4
    assert by["pA"]["baseline_margin"] is None and by["pA"]["after_natural_end"] is None
    assert by["pC"]["baseline_request_id"] == f"sd.{RUN}.baseline.c1.r0.pC.verify"
    assert all(r["excluded_reason"] is None for r in got)


def test_a_failed_or_one_sided_verification_pass_gives_no_lossless_figure(tmp_path):
    checks = make_checks() + [check("baseline", 4, "pA", [5, 6])]
    run_dir = make_run(tmp_path, checks=checks, max_error_rate=0.05)
    got = {(r["category"], r["concurrency"]): r for r in rows(run_dir, "select * from lossless")}
    reason = "speculative verification pass failed (error rate 0.250 > max 0.050)"
    for key in (("code", 2), ("chat", 2)):
        r = got[key]
        assert r["excluded_reason"] == reason
        assert (r["pairs"], r["identical"], r["near_tie"], r["suspect"], r["identity_share"]) == (None,) * 5
    assert got[("code", 2)]["aa_pairs"] == 1  # the A/A floor (timed requests) still stands
    assert got[("code", 4)]["excluded_reason"] == "speculative arm has no verification checks at this level"
    assert got[("code", 1)]["excluded_reason"] is None and got[("code", 1)]["pairs"] == 3
    div = rows(run_dir, "select concurrency, excluded_reason from lossless_divergences where concurrency = 2")
    assert div == [{"concurrency": 2, "excluded_reason": reason}]  # listed, but not counted


def test_one_repeat_and_no_verification_pass_are_not_applicable(tmp_path):
    # a run without repeats and without a verification pass (e.g. --no-verify, or an old run)
    requests = [timed("baseline", 1, 0, "pA", "x"), timed("baseline", 2, 0, "pA", "x"),
                timed("speculative", 1, 0, "pA", "x"), timed("speculative", 2, 0, "pA", "x")]
    got = rows(make_run(tmp_path, checks=False, requests=requests), "select * from lossless order by concurrency")
    assert [(r["concurrency"], r["repeats"], r["aa_pairs"], r["aa_identical"], r["aa_identity_share"])
            for r in got] == [(1, 1, None, None, None), (2, 1, None, None, None)]
    assert [(r["cross_level_pairs"], r["cross_level_identical"]) for r in got] == [(None, None), (1, 1)]
    assert all(r["checks"] == 0 and r["pairs"] is None and r["excluded_reason"] == "no verification pass at this level"
               for r in got)
    assert rows(tmp_path, "select count(*) as n from lossless_divergences") == [{"n": 0}]


def test_duplicate_prompts_pair_by_occurrence(tmp_path):
    checks = [check("baseline", 1, "pA", [1, 2]), check("speculative", 1, "pA", [1, 2])]
    twice = [c.model_copy(update={"request_id": c.request_id + "2", "token_ids": [1, 3] if c.arm == "speculative"
                                  else [1, 2]}) for c in checks]
    got = rows(make_run(tmp_path, checks=checks + twice),
               "select pair_index, class from int_greedy_pairs order by pair_index")
    assert got == [{"pair_index": 0, "class": "identical"}, {"pair_index": 1, "class": "suspect"}]


def test_acceptance_splits_at_the_natural_end(run):
    got = {(r["category"], r["concurrency"], r["segment"]): r for r in rows(run, "select * from acceptance_natural_end")}
    assert set(got) == {("code", 1, "before_natural_end"), ("code", 1, "after_natural_end"),
                        ("code", 2, "unknown")}
    before = got[("code", 1, "before_natural_end")]  # pC's round at position 1, pB's (never ends)
    assert (before["requests"], before["verify_rounds"], before["tokens_proposed"], before["tokens_accepted"]) == \
        (2, 2, 8, 3)
    assert before["mean_acceptance_length"] == 2.5 and before["acceptance_rate"] == 0.375
    after = got[("code", 1, "after_natural_end")]  # pC's rounds at positions 4 and 9 (end at 2)
    assert (after["requests"], after["verify_rounds"], after["tokens_proposed"], after["tokens_accepted"]) == \
        (1, 2, 8, 7)
    assert after["mean_acceptance_length"] == 4.5 and after["acceptance_rate"] == 0.875
    unknown = got[("code", 2, "unknown")]  # pA at level 2: eos ids unknown
    assert (unknown["verify_rounds"], unknown["mean_acceptance_length"], unknown["acceptance_rate"]) == (1, 3.0, 1.0)
