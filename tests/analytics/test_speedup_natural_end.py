"""The speedup split at the natural end, on hand-built rows: int_natural_ends,
int_natural_end_pairs, speedup_natural_end.

Level 1, repeat 0, greedy, max_tokens 10. P = the baseline lossless pass's natural end.

    prompt     P     baseline: offsets ms / running tokens   speculative                 split
    code pA    4     100 400 1000 / 2 4 10, e2e 1000          50 200 500 / 1 5 10, e2e 500
                     -> end 400: before 400, after 600        -> end 200: before 200, after 300
                                                                 before 2.0, after 2.0
    code pB    never e2e 800 (no chunk counts)                e2e 100                     before 8.0 (whole)
    chat pC    0                                                                          natural_end_at_start
    chat pD    2     counts                                   no counts (None)            no_chunk_tokens
    chat pH    2     3 counts for 2 offsets                   counts                      no_chunk_tokens
    chat pE    -     (no lossless-pass request)                                            no_natural_end
    chat pF    eos ids unknown                                                            no_natural_end
    chat pG    3     output 3 tokens                                                      natural_end_past_output
    chat pI    4     counts 1 3, output 10                                                natural_end_not_in_chunks
    chat pJ    5     10 100 / 2 10, e2e 100 (end = e2e)                                   empty_segment
    code pS    2     temperature 0.7: not a greedy pair, left out

code, level 1: before = geometric mean of 2.0 and 8.0 = 4.0 (2 pairs, 1 never ended);
after = 2.0 (1 pair). Level 2: code pA again, but a failed baseline request makes
the level fail (1 of 2 > max_error_rate 0.05): counts stay, speedup is NULL.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from specdec.analytics.build import build
from specdec.analytics.report.data import Table
from specdec.analytics.report.write import _natural_end_speedup
from specdec.runfolder import record_file
from specdec.schemas.arrow import table_from_records, write_parquet_atomic
from specdec.schemas.records import GreedyCheck, RequestResult
from tests.support import duck
from tests.support.synthetic_run import (
    RUN,
    SEC,
    T0,
    failed,
    make_manifest,
    repeat_request_id,
    repeated_counters,
    request_row,
    write_run,
)

# prompt -> (category, baseline (offsets, tokens, e2e), speculative (offsets, tokens, e2e))
SPLIT = ([100.0, 400.0, 1000.0], [2, 4, 10], 1000.0), ([50.0, 200.0, 500.0], [1, 5, 10], 500.0)
COUNTED = ([10.0, 20.0, 100.0], [1, 3, 10], 100.0)
TIMED = {
    "pA": ("code", *SPLIT),
    "pB": ("code", ([100.0, 800.0], None, 800.0), ([50.0, 100.0], None, 100.0)),
    "pC": ("chat", COUNTED, COUNTED),
    "pD": ("chat", COUNTED, ([10.0, 20.0, 100.0], None, 100.0)),
    "pH": ("chat", ([10.0, 100.0], [1, 3, 10], 100.0), COUNTED),
    "pE": ("chat", COUNTED, COUNTED),
    "pF": ("chat", COUNTED, COUNTED),
    "pG": ("chat", ([10.0, 100.0], [1, 3], 100.0), ([10.0, 100.0], [1, 3], 100.0)),
    "pI": ("chat", ([10.0, 100.0], [1, 3], 100.0), ([10.0, 100.0], [1, 3], 100.0)),
    "pJ": ("chat", ([10.0, 100.0], [2, 10], 100.0), ([10.0, 100.0], [2, 10], 100.0)),
    "pS": ("code", *SPLIT),
}
# prompt -> natural end position of the baseline lossless pass ("never": None; pE: no check)
ENDS = {"pA": 4, "pB": None, "pC": 0, "pD": 2, "pH": 2, "pF": None, "pG": 3, "pI": 4, "pJ": 5, "pS": 2}
UNKNOWN = {
    "pC": "natural_end_at_start",
    "pD": "no_chunk_tokens",
    "pH": "no_chunk_tokens",
    "pE": "no_natural_end",
    "pF": "no_natural_end",
    "pG": "natural_end_past_output",
    "pI": "natural_end_not_in_chunks",
    "pJ": "empty_segment",
}


def timed(
    arm: str,
    level: int,
    prompt: str,
    offsets: list[float],
    tokens: list[int] | None,
    e2e: float,
    *,
    category: str = "code",
    temperature: float = 0.0,
    seq: int = 0,
) -> RequestResult:
    return request_row(
        arm,
        level,
        prompt,
        category,
        e2e,
        offsets_ms=offsets,
        tokens=10,
        repeat=0,
        request_id=f"sd.{RUN}.{arm}.c{level}.r0.{prompt}.{seq}",
        temperature=temperature,
        wall_send_ns=T0 + level * 10**9,
        chunk_tokens=tokens,
        output_tokens=3 if prompt == "pG" else 10,
        output_text="x",
    )


def make_timed(timed_rows=TIMED) -> list[RequestResult]:
    out = []
    for prompt, (category, base, spec) in timed_rows.items():
        temperature = 0.7 if prompt == "pS" else 0.0
        out.append(timed("baseline", 1, prompt, *base, category=category, temperature=temperature))
        out.append(timed("speculative", 1, prompt, *spec, category=category, temperature=temperature))
    # level 2: pA again, and a failed baseline request that fails the level
    out += [
        timed("baseline", 2, "pA", *SPLIT[0]),
        timed("speculative", 2, "pA", *SPLIT[1]),
        failed(timed("baseline", 2, "pB", *SPLIT[0])),
        timed("speculative", 2, "pB", *SPLIT[1]),
    ]
    return out


def check(level: int, prompt: str, end: int | None, *, eos: tuple[int, ...] | None = (0,)) -> GreedyCheck:
    return GreedyCheck(
        run_id=RUN,
        arm="baseline",
        level=level,
        repeat=0,
        request_id=f"sd.{RUN}.baseline.c{level}.{prompt}.v",
        prompt_id=prompt,
        category="code",
        success=True,
        error_type=None,
        token_ids=[5] * 10,
        top1_logprobs=[-0.1] * 10,
        top2_logprobs=[-3.0] * 10,
        top2_token_ids=[9] * 10,
        natural_end_position=end if eos else None,
        eos_token_ids=None if eos is None else list(eos),
    )


def make_checks() -> list[GreedyCheck]:
    rows = [check(1, p, end, eos=None if p == "pF" else (0,)) for p, end in ENDS.items()]
    return rows + [check(2, "pA", 4), check(2, "pB", None)]


def make_run(run_dir: Path, timed_rows=TIMED) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    write_run(run_dir, requests=make_timed(timed_rows), rounds=[], manifest=make_manifest(max_error_rate=0.05))
    write_parquet_atomic(
        table_from_records(GreedyCheck, make_checks()), run_dir / record_file("greedy_checks").consolidated
    )
    return run_dir


def rows(run_dir: Path, sql: str) -> list[dict]:
    """The run's database built, then read."""
    return duck.rows(build(run_dir), sql)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return make_run(tmp_path_factory.mktemp("natural_end"))


def test_per_chunk_counts_reach_the_staged_requests(run):
    got = {
        (r["arm"], r["prompt_id"]): r["chunk_tokens"]
        for r in rows(run, "select arm, prompt_id, chunk_tokens from stg_request_streams where level = 1")
    }
    assert got[("baseline", "pA")] == [2, 4, 10] and got[("speculative", "pA")] == [1, 5, 10]
    assert got[("baseline", "pB")] is None  # unknown, not empty


def test_pairs_are_split_at_the_first_chunk_that_reaches_the_natural_end(run):
    got = rows(run, "select * from int_natural_end_pairs where level = 1 and prompt_id = 'pA' order by segment")
    assert [r["segment"] for r in got] == ["after_natural_end", "before_natural_end"]
    after, before = got
    assert (before["reference_end_ms"], before["treatment_end_ms"]) == (400.0, 200.0)
    assert (before["reference_ms"], before["treatment_ms"], before["ratio"]) == (400.0, 200.0, 2.0)
    assert (after["reference_ms"], after["treatment_ms"], after["ratio"]) == (600.0, 300.0, 2.0)
    assert before["log_ratio"] == pytest.approx(math.log(2.0))
    assert before["never_ended"] is False and before["unknown_reason"] is None
    # the columns the intervals resample
    assert {"comparison", "category", "level", "segment", "prompt_id", "repeat", "log_ratio"} <= set(before)
    assert before["comparison"] == "ab" and before["repeat"] == 0


def test_a_prompt_that_never_ended_is_before_as_a_whole(run):
    got = rows(run, "select * from int_natural_end_pairs where level = 1 and prompt_id = 'pB'")
    assert len(got) == 1
    (r,) = got
    assert r["segment"] == "before_natural_end" and r["never_ended"] is True and r["natural_end_position"] is None
    assert (r["reference_ms"], r["treatment_ms"], r["ratio"]) == (800.0, 100.0, 8.0)


def test_pairs_that_cannot_be_split_are_unknown_with_a_reason(run):
    got = rows(run, "select * from int_natural_end_pairs where level = 1 and category = 'chat'")
    assert {r["prompt_id"]: r["unknown_reason"] for r in got} == UNKNOWN
    assert all(
        r["segment"] == "unknown"
        and r["never_ended"] is None
        and r["ratio"] is None
        and r["log_ratio"] is None
        and r["reference_end_ms"] is None
        and r["treatment_end_ms"] is None
        for r in got
    )
    # a sampled (temperature > 0) pair is not split at all
    assert rows(run, "select count(*) as n from int_natural_end_pairs where prompt_id = 'pS'") == [{"n": 0}]


def test_speedup_before_and_after_the_natural_end(run):
    got = {
        (r["category"], r["level"], r["segment"], r["unknown_reason"]): r
        for r in rows(run, "select * from speedup_natural_end")
    }
    before = got[("code", 1, "before_natural_end", None)]  # pA 2.0 and pB (whole) 8.0
    assert before["speedup"] == pytest.approx(4.0)
    assert (before["pairs"], before["prompts"], before["repeats"], before["pairs_never_ended"]) == (2, 2, 1, 1)
    assert before["baseline_ms_mean"] == 600.0 and before["speculative_ms_mean"] == 150.0
    after = got[("code", 1, "after_natural_end", None)]
    assert after["speedup"] == pytest.approx(2.0)
    assert (after["pairs"], after["pairs_never_ended"], after["baseline_ms_mean"]) == (1, 0, 600.0)
    assert before["excluded_reason"] is None and after["excluded_reason"] is None
    # the unknown pairs: counted per reason, no speedup
    unknown = {k[3]: r for k, r in got.items() if k[:3] == ("chat", 1, "unknown")}
    assert {reason: r["pairs"] for reason, r in unknown.items()} == {
        "natural_end_at_start": 1,
        "no_chunk_tokens": 2,
        "no_natural_end": 2,
        "natural_end_past_output": 1,
        "natural_end_not_in_chunks": 1,
        "empty_segment": 1,
    }
    assert all(r["speedup"] is None and r["baseline_ms_mean"] is None for r in unknown.values())
    assert not any(k[0] == "chat" and k[2] != "unknown" for k in got)


def test_a_failed_level_keeps_its_counts_but_has_no_speedup(run):
    got = rows(run, "select * from speedup_natural_end where level = 2 order by segment")
    assert [(r["segment"], r["pairs"], r["speedup"]) for r in got] == [
        ("after_natural_end", 1, None),
        ("before_natural_end", 1, None),
    ]
    assert all(r["excluded_reason"].startswith("baseline level failed") for r in got)


def test_the_split_follows_the_time_to_the_natural_end(tmp_path):
    # the speculative request reaches the end at 250 ms instead of 200: before 400 / 250,
    # after 600 / 250 (e2e 500), while the whole-request ratio stays 2.0
    spec = ([50.0, 250.0, 500.0], [1, 5, 10], 500.0)
    run = make_run(tmp_path, {"pA": ("code", SPLIT[0], spec)})
    got = {
        r["segment"]: r["speedup"]
        for r in rows(run, "select segment, speedup from speedup_natural_end where level = 1")
    }
    assert got == {"before_natural_end": pytest.approx(1.6), "after_natural_end": pytest.approx(2.4)}


def test_report_shows_the_split():
    t = Table(
        ("category", "level", "segment", "unknown_reason", "speedup", "pairs"),
        (("code", 1, "before_natural_end", None, 4.0, 2), ("chat", 1, "unknown", "no_chunk_tokens", None, 2)),
    )

    class Data:
        speedup_natural_end = t

    sections = _natural_end_speedup(Data())
    assert len(sections) == 1
    title, html = sections[0]
    assert "natural end" in title and "before_natural_end" in html and "no_chunk_tokens" in html

    class Empty:
        speedup_natural_end = None

    assert _natural_end_speedup(Empty()) == []  # no such rows in the run: no section


def test_two_repeats_give_each_segment_an_interval_and_a_label(tmp_path):
    """Code at level 1, prompts q0 and q1, three repeats; repeat 1 runs every
    time 1.1x slower in both arms. Baseline: end at 400 of 1000 ms, speculative
    200 of 500: every pair 2.0 in both segments and whole. A segment's interval
    comes from its own series' block figures (ln 2 in every repeat, whatever the
    host did to both arms): no noise, a zero-width interval at 2, 'faster' with
    its step-down level among the run's two segment rows."""
    out = []
    for r, scale in ((0, 1.0), (1, 1.1), (2, 1.0)):
        for i, (arm, (offsets, tokens, e2e)) in enumerate(zip(("baseline", "speculative"), SPLIT)):
            start = T0 + (2 * r + i) * 100 * SEC
            for seq, prompt in enumerate(("q0", "q1")):
                out.append(
                    request_row(
                        arm,
                        1,
                        prompt,
                        "code",
                        e2e * scale,
                        offsets_ms=[o * scale for o in offsets],
                        tokens=10,
                        repeat=r,
                        request_id=repeat_request_id(arm, 1, r, seq),
                        wall_send_ns=start + seq * 10 * SEC,
                        chunk_tokens=tokens,
                        output_text="x",
                    )
                )
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_run(run_dir, repeated_counters(levels=(1,), repeats=3), requests=out, rounds=[])
    write_parquet_atomic(
        table_from_records(GreedyCheck, [check(1, "q0", 4), check(1, "q1", 4)]),
        run_dir / record_file("greedy_checks").consolidated,
    )
    got = {r["segment"]: r for r in rows(run_dir, "select * from speedup_natural_end")}
    assert set(got) == {"before_natural_end", "after_natural_end"}
    for seg in got.values():
        assert (seg["speedup"], seg["pairs"], seg["repeats"]) == (pytest.approx(2.0), 6, 3)
        assert (seg["ci_low"], seg["ci_high"]) == (pytest.approx(2.0), pytest.approx(2.0))
        # the first of the two rows at Sidak's level for 2 (0.95^(1/2)), the second at 95% (exact: no correlation read)
        assert seg["ci_level"] in (pytest.approx(0.95**0.5), pytest.approx(0.95))
        assert seg["label"] == "faster"
