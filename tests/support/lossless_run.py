"""The hand-built run of the lossless tests: lossless checks, timed requests
and speculative rounds (what each pair must be classified as, and why, is in
the docstring of tests/analytics/test_lossless.py; test_round_counts and
test_many_runs build on the same run)."""

from __future__ import annotations

from pathlib import Path

from specdec.runfolder import record_file
from specdec.schemas.arrow import table_from_records, write_parquet_atomic
from specdec.schemas.records import GreedyCheck, RequestResult, RoundTrace
from tests.support.synthetic_run import RUN, T0, failed, make_manifest, request_row, write_run

EOS = [0]


def check(
    arm: str,
    level: int,
    prompt: str,
    ids: list[int],
    top1=None,
    top2=None,
    top2_ids=None,
    *,
    category: str = "code",
    eos: list[int] | None = EOS,
    success: bool = True,
) -> GreedyCheck:
    n = len(ids)
    top1 = top1 or [-0.1] * n
    top2 = top2 or [-3.0] * n
    end = next((i for i, t in enumerate(ids) if t in eos), None) if eos else None
    return GreedyCheck(
        run_id=RUN,
        arm=arm,
        level=level,
        repeat=0,
        request_id=f"sd.{RUN}.{arm}.c{level}.r0.{prompt}.lossless",
        prompt_id=prompt,
        category=category,
        success=success,
        error_type=None if success else "http_status",
        token_ids=ids if success else [],
        top1_logprobs=top1 if success else [],
        top2_logprobs=top2 if success else [],
        top2_token_ids=(top2_ids or [99] * n) if success else [],
        natural_end_position=end if success else None,
        eos_token_ids=eos,
    )


def make_checks() -> list[GreedyCheck]:
    pb = dict(ids=[1, 2, 3, 4], top1=[-0.1, -0.2, -0.30, -0.4], top2=[-2.0, -2.2, -0.35, -3.0], top2_ids=[9, 9, 30, 9])
    pc = dict(ids=[3, 5, 0, 6], top1=[-0.1, -0.1, -0.1, -0.1], top2=[-2.0, -2.0, -2.0, -1.6], top2_ids=[9, 9, 9, 9])
    rows = [
        check("baseline", 1, "pA", [5, 6, 7, 8]),
        check("speculative", 1, "pA", [5, 6, 7, 8]),
        check("baseline", 1, "pB", **pb),
        check("speculative", 1, "pB", [1, 2, 30, 4]),
        check("baseline", 1, "pC", **pc),
        check("speculative", 1, "pC", [3, 5, 0, 7]),
        check("baseline", 1, "pD", [9, 9], category="chat"),
        check("speculative", 1, "pD", [9, 9], category="chat"),
        check("baseline", 2, "pA", [5, 6, 7], eos=None),
        check("speculative", 2, "pA", [5, 6, 7, 8], eos=None),
        check("baseline", 2, "pD", [9, 9], category="chat"),
        check("speculative", 2, "pD", [9, 9], category="chat", success=False),
    ]
    for arm in ("baseline", "speculative"):
        rows += [check(arm, 2, "pB", **pb), check(arm, 2, "pC", **pc)]
    return rows


def timed(
    arm: str, level: int, repeat: int, prompt: str, text: str, temperature: float = 0.0, prompt_tokens: int = 10
) -> RequestResult:
    return request_row(
        arm,
        level,
        prompt,
        "code",
        100.0,
        offsets_ms=[10.0, 100.0],
        tokens=4,
        repeat=repeat,
        request_id=f"sd.{RUN}.{arm}.c{level}.r{repeat}.{prompt}",
        temperature=temperature,
        wall_send_ns=T0 + level * 10**9,
        prompt_tokens=prompt_tokens,
        output_text=text,
    )


def make_timed() -> list[RequestResult]:
    return [
        timed("baseline", 1, 0, "pA", "x"),
        timed("baseline", 1, 1, "pA", "x"),
        timed("baseline", 1, 0, "pB", "y"),
        timed("baseline", 1, 1, "pB", "y2"),
        timed("baseline", 2, 0, "pA", "x"),
        failed(timed("baseline", 2, 1, "pA", "x")),
        timed("baseline", 2, 0, "pB", "y3"),
        timed("baseline", 2, 1, "pB", "y3"),
        timed("baseline", 1, 0, "pS", "s", temperature=0.7),
        timed("baseline", 1, 1, "pS", "s", temperature=0.7),
        timed("speculative", 1, 0, "pA", "different"),
        timed("speculative", 1, 0, "pB", "y"),
        timed("speculative", 1, 0, "pC", "c"),
        timed("speculative", 2, 0, "pA", "x"),
        timed("speculative", 1, 0, "pS", "s", temperature=0.7),
    ]


def round_trace(request_id: str, step: int, k: int, a: int, context: int, phase: str = "decode") -> RoundTrace:
    return RoundTrace(
        run_id=RUN,
        engine_request_id=f"chatcmpl-{request_id}-0123abcd",
        pid=2,
        process_token="2-cafe0001",
        step_index=step,
        round_index=step,
        phase=phase,
        tokens_proposed=k,
        tokens_accepted=a,
        tokens_emitted=a + 1,
        batch_size=1,
        num_scheduled_tokens=1 + k,
        context_len=context,
        draft_ms=1.0 if k else None,
        verify_ms=10.0,
        wall_time_ns=T0 + step,
    )


def make_rounds() -> list[RoundTrace]:
    """Speculative rounds, prompt_tokens 10: first drafted position = context_len - 10 + 1.
    pC at c1 (natural end 2): positions 1 (before), 4 and 9 (after).
    pB at c1 (never ends): position 1 (before). pA at c2 (eos ids unknown): unknown."""
    rid = {p: f"sd.{RUN}.speculative.c{c}.r0.{p}" for p, c in (("pA", 2), ("pB", 1), ("pC", 1), ("pS", 1))}
    return [
        round_trace(rid["pC"], 0, 0, 0, 0, phase="prefill"),
        round_trace(rid["pC"], 1, 4, 2, 10),
        round_trace(rid["pC"], 2, 4, 4, 13),
        round_trace(rid["pC"], 3, 4, 3, 18),
        round_trace(rid["pC"], 4, 0, 0, 22),  # a decode step with no draft: not a verify round
        round_trace(rid["pB"], 5, 4, 1, 10),
        round_trace(rid["pA"], 6, 2, 2, 10),
        round_trace(rid["pS"], 7, 4, 4, 10),  # temperature 0.7: not split
        round_trace(f"sd.{RUN}.baseline.c1.r0.pB", 8, 0, 0, 10),
    ]


def write_greedy(run_dir: Path, rows: list[GreedyCheck]) -> None:
    write_parquet_atomic(table_from_records(GreedyCheck, rows), run_dir / record_file("greedy_checks").consolidated)


def make_run(
    run_dir: Path, *, checks=None, requests=None, max_error_rate: float = 0.5, dtype: str = "bfloat16"
) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    write_run(
        run_dir,
        requests=make_timed() if requests is None else requests,
        rounds=make_rounds(),
        manifest=make_manifest(dtype=dtype, max_error_rate=max_error_rate),
    )
    if checks is not False:
        write_greedy(run_dir, make_checks() if checks is None else checks)
    return run_dir
