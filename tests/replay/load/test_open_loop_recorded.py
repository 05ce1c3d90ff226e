"""The recorded clock, end to end against fake servers: a 60 s recording sent
at --time-scale 0.1 goes out over 6 s (issue 7, acceptance 3), and an
open-loop run with sessions builds its marts, schedule_lag included."""

from __future__ import annotations

import asyncio
import json
import random
import time

import duckdb
import pyarrow.parquet as pq
import pytest

from specdec.analytics.build import build
from specdec.replay.config import ReplayConfig
from specdec.replay.experiment import run_replay
from specdec.replay.http.client import as_endpoint
from specdec.replay.progress import Progress
from specdec.replay.runner import Replayer, level_rows
from specdec.runfolder import requests_part
from specdec.schemas.records import TrafficRow
from specdec.traffic.io import load_traffic
from tests.support.fake_server import GOOD_SSE, FakeVllm, serving, threaded


def write_traffic(path, rows: list[TrafficRow]):
    path.write_text("".join(json.dumps(r.model_dump(exclude_none=True)) + "\n" for r in rows))
    return path


def test_a_60_s_recording_is_sent_over_6_s_at_time_scale_0_1(tmp_path):
    rng = random.Random(11)
    arrivals = sorted([0.0, 60_000.0] + [round(rng.uniform(0, 60_000), 3) for _ in range(118)])
    path = write_traffic(
        tmp_path / "rec.jsonl",
        [
            TrafficRow(prompt_id=f"r{i:03d}", category="chat", prompt=f"prompt {i}", max_tokens=2, arrival_ms=t)
            for i, t in enumerate(arrivals)
        ],
    )
    cfg = ReplayConfig(traffic=path, load="recorded", time_scales=[0.1], progress=False, prefix_cache="keep")
    traffic = load_traffic(path)
    fake = FakeVllm(GOOD_SSE)

    async def go():
        runner = Replayer(cfg, "r", tmp_path, traffic, Progress(False))
        (tmp_path / "requests").mkdir()
        async with serving(fake.server()) as (s, base):
            await runner._block(s, "baseline", as_endpoint(base), level_rows(traffic, cfg), 1)

    t0 = time.perf_counter()
    asyncio.run(go())
    block_s = time.perf_counter() - t0
    rows = pq.read_table(requests_part(tmp_path, "baseline", 1, 0)).to_pylist()
    assert len(rows) == 120 and all(r["success"] for r in rows)
    intended = sorted(r["intended_send_ms"] for r in rows)
    actual = sorted(r["actual_send_ms"] for r in rows)
    lags = sorted(r["schedule_lag_ms"] for r in rows)
    # the plan: the recording's 60 s at a tenth of the time, each row at its own offset
    assert intended[-1] - intended[0] == pytest.approx(6000.0)
    assert sorted((r["prompt_id"], r["intended_send_ms"]) for r in rows) == [
        (f"r{i:03d}", t * 0.1) for i, t in enumerate(arrivals)
    ]
    # what happened: never early, and the sends span 6 s within 2%
    assert lags[0] >= 0.0
    p99 = lags[int(0.99 * (len(lags) - 1))]
    span = actual[-1] - actual[0]
    last_end = max(r["actual_send_ms"] + r["e2e_ms"] for r in rows)
    print(
        f"\nrecorded 60 s at x0.1: sends span {span:.1f} ms (target 6000), replay ends at {last_end:.1f} ms, "
        f"lag p50 {lags[len(lags) // 2]:.3f} ms p99 {p99:.3f} ms max {lags[-1]:.3f} ms; "
        f"block with counter reads {block_s:.2f} s"
    )
    assert abs(span - 6000.0) <= 120.0
    assert p99 < 1000.0  # a sender that waited for replies would fall seconds behind; host noise stays far below


def test_an_open_loop_run_with_sessions_builds_its_marts(tmp_path):
    rows = []
    for s in range(3):  # three sessions of two turns, 100 ms apart in the recording
        msgs = [{"role": "user", "content": f"question {s}"}]
        rows.append(
            TrafficRow(
                prompt_id=f"s{s}-0",
                category="code" if s else "chat",
                messages=json.dumps(msgs),
                max_tokens=2,
                arrival_ms=100.0 * s,
                session_id=f"s{s}",
                turn_index=0,
            )
        )
        msgs = msgs + [{"role": "assistant", "content": "ab"}, {"role": "user", "content": "and then?"}]
        rows.append(
            TrafficRow(
                prompt_id=f"s{s}-1",
                category="code" if s else "chat",
                messages=json.dumps(msgs),
                max_tokens=2,
                arrival_ms=100.0 * s + 20,
                session_id=f"s{s}",
                turn_index=1,
            )
        )
    path = write_traffic(tmp_path / "sessions.jsonl", rows)
    cfg_kw = dict(
        traffic=path,
        runs_dir=tmp_path / "runs",
        run_id="open",
        load="recorded",
        time_scales=[1.0, 0.5],
        warmup_requests=1,
        progress=False,
        capture_wait_s=0.0,
        connect_timeout_s=2.0,
        request_timeout_s=2.0,
        repeats=2,
        lossless_pass=False,
        samples=0,
    )
    with threaded(FakeVllm(GOOD_SSE, delay_s=0.01), FakeVllm(GOOD_SSE, delay_s=0.01)) as (b, s):
        run_dir = run_replay(ReplayConfig(baseline_url=b, speculative_url=s, **cfg_kw))
    con = duckdb.connect(str(build(run_dir)), read_only=True)
    lag = con.execute(
        "select arm, level, load_mode, level_value, repeats, requests, lag_ms_p99, "
        "intended_span_s, offered_rate_per_s from schedule_lag order by all"
    ).fetchall()
    assert [r[:6] for r in lag] == [
        ("baseline", 1, "recorded", 1.0, 2, 12),
        ("baseline", 2, "recorded", 0.5, 2, 12),
        ("speculative", 1, "recorded", 1.0, 2, 12),
        ("speculative", 2, "recorded", 0.5, 2, 12),
    ]
    assert all(r[6] is not None and r[6] >= 0 for r in lag)
    # per block the plan spans 220 ms (time scale 1) or 110 ms (0.5), unless a held turn moved the last send
    assert all(r[7] >= 2 * 0.220 * r[3] - 1e-9 for r in lag)
    # turn 1 of every session went out after its turn 0 finished, in every block
    pairs = con.execute("""
        select count(*) filter (where t1.actual_send_ms >= t0.actual_send_ms + t0.e2e_ms), count(*)
        from stg_requests t0 join stg_requests t1
          on t0.arm = t1.arm and t0.level = t1.level and t0.repeat = t1.repeat
         and t1.prompt_id = replace(t0.prompt_id, '-0', '-1')
        where t0.prompt_id like '%-0'""").fetchone()
    assert pairs == (24, 24)
    # each request records its session and turn; acceptance_by_turn has a row per turn
    assert con.execute("select distinct prompt_id, session_id, turn_index from stg_requests order by 1").fetchall() == [
        (f"s{s}-{t}", f"s{s}", t) for s in range(3) for t in range(2)
    ]
    turns = con.execute(
        "select arm, level, category, turn_index, requests, sessions from acceptance_by_turn "
        "where arm = 'baseline' and level = 1 order by all"
    ).fetchall()
    assert turns == [
        ("baseline", 1, "chat", 0, 2, 1),
        ("baseline", 1, "chat", 1, 2, 1),
        ("baseline", 1, "code", 0, 4, 2),
        ("baseline", 1, "code", 1, 4, 2),
    ]
    # the other marts still read one level per key
    assert con.execute("select count(distinct level) from level_health").fetchone() == (2,)
    con.close()
