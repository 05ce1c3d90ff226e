"""The synthetic runs of ``analytics_scale.py`` (its docstring says what they
hold): run folders with their requests and engine counters beside the
sidecar's lake of rounds (``layout='lake'``), or the rounds in each run
folder's capture part files (``layout='runs'``). Generated with numpy,
vectorized per block; nothing here is timed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

TOKENS = 128
CHUNKS = 16
LEVELS = (1, 4, 16)
REPEATS = 2
CATEGORIES = ("code", "chat", "summarize", "translate")
ACCEPT_P = {"code": 0.8, "chat": 0.55, "summarize": 0.65, "translate": 0.45}  # P(draft token i accepted | i - 1)
K = 4
PART_ROWS = 2_000_000
T0 = 1_767_225_600 * 10**9  # 2026-01-01T00:00:00Z


def _accepted_draws(rng, n: int, categories: np.ndarray):
    """Per speculative request (a row) the accepted count of each decode round, and how many
    decode rounds it takes to emit the tokens after the prefill's first one."""
    p = np.array([ACCEPT_P[c] for c in CATEGORIES])[categories]
    draws = np.minimum(K, rng.geometric(1 - p[:, None], size=(n, TOKENS)) - 1)  # a per round, capped at k
    need = TOKENS - 1  # tokens after the prefill's first one
    emitted = np.cumsum(draws + 1, axis=1)
    rounds = (emitted < need).sum(axis=1) + 1
    return draws, rounds


def _block(rng, run_id: str, arm: str, level: int, repeat: int, prompts: int, step0: int):
    """(rounds columns, request rows) of one block."""
    from specdec.replay.runner import request_id

    cats = np.arange(prompts) % len(CATEGORIES)
    spec = arm == "speculative"
    if spec:
        draws, decode_rounds = _accepted_draws(rng, prompts, cats)
    else:
        decode_rounds = np.full(prompts, TOKENS - 1)
    n_rows = decode_rounds + 1  # the prefill row first
    total = int(n_rows.sum())
    req = np.repeat(np.arange(prompts), n_rows)
    starts = np.cumsum(n_rows) - n_rows
    round_index = np.arange(total) - np.repeat(starts, n_rows)
    decode = round_index > 0
    if spec:
        col = np.maximum(round_index - 1, 0)
        a = np.where(decode, draws[req, np.minimum(col, TOKENS - 1)], 0)
        k = np.where(decode, K, 0)
    else:
        a = np.zeros(total, np.int64)
        k = np.zeros(total, np.int64)
    prompt_tokens = 100 + (np.arange(prompts) * 37) % 1900
    emitted = a + 1
    context = np.repeat(prompt_tokens, n_rows) + round_index
    # the block's requests run in waves of `level` at once, one engine step per round of each
    step = step0 + (req // level) * TOKENS + round_index
    rids = [request_id(run_id, arm, level, i, repeat) for i in range(prompts)]
    token = f"{1 if arm == 'baseline' else 2}-{run_id[-4:]:0>4}"
    engine_ids = pa.array([f"chatcmpl-{r}-{i:08x}" for i, r in enumerate(rids)])
    wall = T0 + (step * 15_000_000)
    rounds = {
        "run_id": pa.array([run_id] * total),
        "engine_request_id": engine_ids.take(pa.array(req)),
        "pid": pa.array(np.full(total, 1 if arm == "baseline" else 2)),
        "process_token": pa.array([token] * total),
        "step_index": pa.array(step),
        "round_index": pa.array(round_index),
        "phase": pa.array(np.where(decode, "decode", "prefill")),
        "tokens_proposed": pa.array(k),
        "tokens_accepted": pa.array(a),
        "tokens_emitted": pa.array(emitted),
        "batch_size": pa.array(np.full(total, level)),
        "num_scheduled_tokens": pa.array(np.where(decode, 1 + k, context)),
        "context_len": pa.array(context),
        "draft_ms": pa.array(np.where(k > 0, 0.8, np.nan), mask=k == 0),
        "verify_ms": pa.array(np.full(total, 12.0)),
        "wall_time_ns": pa.array(wall),
        "step_drafts_verified": pa.nulls(total, pa.int64()),  # not measured (Model Runner V1's rows)
    }
    step_ms = 12.0 + (0.8 if spec else 0.0)
    e2e = 30.0 + n_rows * step_ms * level**0.3 * rng.lognormal(0, 0.05, prompts)
    chunk_at = np.linspace(1 / CHUNKS, 1, CHUNKS)[None, :] * e2e[:, None]  # the first chunk arrives at TTFT
    chunk_tokens = np.linspace(TOKENS / CHUNKS, TOKENS, CHUNKS).astype(int)
    send = T0 + (step0 + (np.arange(prompts) // level) * TOKENS) * 15_000_000
    requests = {
        "run_id": [run_id] * prompts,
        "arm": [arm] * prompts,
        "concurrency": [level] * prompts,
        "repeat": [repeat] * prompts,
        "request_id": rids,
        "prompt_id": [f"p{i:06d}" for i in range(prompts)],
        "category": [CATEGORIES[c] for c in cats],
        "max_tokens": [TOKENS] * prompts,
        "temperature": [0.0] * prompts,
        "success": [True] * prompts,
        "error_type": [None] * prompts,
        "http_status": [200] * prompts,
        "error_message": [None] * prompts,
        "wall_send_ns": send.tolist(),
        "ttft_ms": chunk_at[:, 0].tolist(),
        "e2e_ms": e2e.tolist(),
        "chunk_offsets_ms": chunk_at.tolist(),
        "chunk_tokens": [chunk_tokens.tolist()] * prompts,
        "prompt_tokens": prompt_tokens.tolist(),
        "output_tokens": [TOKENS] * prompts,
        "output_text": [f"out {i}" for i in range(prompts)],
        "finish_reason": ["length"] * prompts,
        "spec_num_steps": decode_rounds.tolist() if spec else [None] * prompts,
        "spec_num_draft_tokens": [None] * prompts,
        "spec_num_accepted_tokens": [None] * prompts,
        "load_mode": ["closed"] * prompts,
        "level_value": [float(level)] * prompts,
        "intended_send_ms": [None] * prompts,
        "actual_send_ms": [None] * prompts,
        "schedule_lag_ms": [None] * prompts,
        "session_wait_ms": [None] * prompts,
        "session_id": [None] * prompts,
        "turn_index": [None] * prompts,
    }
    sums = (int((k > 0).sum()), int(k.sum()), int(a.sum()))
    return rounds, requests, sums, int(step.max()) + 1


def _manifest(run_id: str):
    from specdec.schemas.records import ArmConfig, RunManifest

    spec = {"method": "ngram", "num_speculative_tokens": K}
    arms = [
        ArmConfig(name="baseline", speculative_config=None, server_args=[], endpoint="http://127.0.0.1:8001"),
        ArmConfig(
            name="speculative",
            speculative_config=spec,
            server_args=[],
            endpoint="http://127.0.0.1:8002",
            speculative_config_source="declared",
        ),
    ]
    return RunManifest(
        run_id=run_id,
        created_wall="2026-01-01T00:00:00Z",
        specdec_version="bench",
        engine={"name": "external"},
        model="synthetic",
        dtype="bfloat16",
        arms=arms,
        arm_difference=["--speculative-config"],
        sampling={"temperature": 0.0, "ignore_eos": True},
        traffic={"path": "synthetic", "category_shares": {c: 0.25 for c in CATEGORIES}},
        concurrency_levels=list(LEVELS),
        warmup_requests=0,
        host={},
        finished=True,
        capture={"source": "directory"},
        schedule={"repeats": REPEATS},
    )


def generate(root: Path, rounds_target: int, runs: int, layout: str, seed: int = 0) -> dict:
    """Write the runs; return what was written."""
    from specdec.runfolder import (
        counters_part,
        lake_rounds_part,
        partition_date,
        requests_part,
        round_part_name,
        write_manifest,
    )
    from specdec.schemas.arrow import arrow_schema, write_parquet_atomic
    from specdec.schemas.records import MetricSnapshot, RequestResult, RoundTrace

    rng = np.random.default_rng(seed)
    blocks = 2 * len(LEVELS) * REPEATS
    rows_per_prompt = TOKENS + (TOKENS - 1) / 2.6 + 1  # baseline rows + about what a speculative request has
    prompts = max(4, int(rounds_target / (runs * len(LEVELS) * REPEATS * rows_per_prompt)))
    round_schema, request_schema = arrow_schema(RoundTrace), arrow_schema(RequestResult)
    written = {"rounds": 0, "requests": 0, "files": 0, "prompts_per_block": prompts}
    for r in range(runs):
        run_id = f"bench-{r:02d}"
        run_dir = root / run_id
        (run_dir / "requests").mkdir(parents=True)
        write_manifest(run_dir, _manifest(run_id))

        pending, pending_rows, seq, step, counters, drafts = [], 0, 0, 0, [], {}

        # flush() runs only inside the iteration whose run_id, r and run_dir it reads (B023 below)
        def flush():
            nonlocal pending, pending_rows, seq
            if not pending:
                return
            table = pa.concat_tables(pending)
            if layout == "lake":
                path = lake_rounds_part(root, partition_date(T0), run_id, f"7-{r:04d}", seq)  # noqa: B023
                path.parent.mkdir(parents=True, exist_ok=True)
            else:
                path = run_dir / "capture" / round_part_name(f"7-{r:04d}", seq)  # noqa: B023
                path.parent.mkdir(exist_ok=True)
            write_parquet_atomic(table, path)
            written["files"] += 1
            pending, pending_rows, seq = [], 0, seq + 1

        for level in LEVELS:
            for repeat in range(REPEATS):
                for arm in ("baseline", "speculative"):
                    cols, reqs, sums, step = _block(rng, run_id, arm, level, repeat, prompts, step)
                    pending.append(pa.Table.from_pydict(cols, schema=round_schema))
                    pending_rows += len(cols["run_id"])
                    written["rounds"] += len(cols["run_id"])
                    write_parquet_atomic(
                        pa.Table.from_pydict(reqs, schema=request_schema), requests_part(run_dir, arm, level, repeat)
                    )
                    written["requests"] += prompts
                    written["files"] += 1
                    before = drafts.get(arm, (0, 0, 0))
                    after = tuple(b + s for b, s in zip(before, sums))
                    drafts[arm] = after
                    for position, (n, k, a) in (("before", before), ("after", after)):
                        spec = arm == "speculative"
                        counters.append(
                            MetricSnapshot(
                                run_id=run_id,
                                arm=arm,
                                concurrency=level,
                                repeat=repeat,
                                position=position,
                                wall_time_ns=T0 + step,
                                spec_num_drafts=float(n) if spec else None,
                                spec_num_draft_tokens=float(k) if spec else None,
                                spec_num_accepted_tokens=float(a) if spec else None,
                                generation_tokens=None,
                            )
                        )
                    if pending_rows >= PART_ROWS:
                        flush()
        flush()
        from specdec.schemas.arrow import table_from_records

        for arm in ("baseline", "speculative"):
            write_parquet_atomic(
                table_from_records(MetricSnapshot, [c for c in counters if c.arm == arm]), counters_part(run_dir, arm)
            )
    written["bytes"] = sum(f.stat().st_size for f in root.rglob("*.parquet"))
    written["blocks_per_run"] = blocks
    return written
