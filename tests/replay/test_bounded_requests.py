"""Issue 24: every request is bounded without trusting the server. A server
that ignores max_tokens fails the request as ``overlong_stream`` (the client
stops reading and hangs up); one that trickles bytes that are not tokens
fails it at its wall limit (``request_wall_timeout``); the whole replay
command against such a server ends in bounded time with those rows failed."""

from __future__ import annotations

import asyncio
import json
import time

import pyarrow.parquet as pq
from click.testing import CliRunner

from specdec.replay.http.client import ClientSettings, stream_limit, stream_payload
from tests.support.fake_server import EndlessVllm, FakeVllm, both_transports, serving, threaded

transport = both_transports()

PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


def _one(fake: EndlessVllm, settings: ClientSettings, payload: dict = PAYLOAD):
    async def go():
        async with serving(fake.server()) as (s, base):
            res = await stream_payload(s, base, payload, "r1", settings)
            for _ in range(100):  # the server notices the hang-up
                if fake.closed:
                    break
                await asyncio.sleep(0.02)
            return res

    return asyncio.run(asyncio.wait_for(go(), 30))


def test_a_stream_past_max_tokens_fails_as_overlong_and_is_hung_up_on():
    t0 = time.monotonic()
    res = _one(EndlessVllm(), ClientSettings(request_timeout_s=10))
    assert time.monotonic() - t0 < 10
    assert not res.success and res.error_type == "overlong_stream" and res.http_status == 200
    # it stopped at the first chunk past max_tokens plus the margin (8 + 16)
    assert stream_limit(8) == 24 and len(res.chunk_offsets_ms) == 25
    assert "ignores max_tokens" in res.error_message


def test_the_margin_is_half_of_max_tokens_when_that_is_larger():
    assert stream_limit(1) == 17 and stream_limit(100) == 150


def test_bytes_that_are_never_tokens_end_at_the_wall_limit():
    t0 = time.monotonic()
    # wall: 2 + 8 x 0.1 = 2.8 s; the gap limit (2 s) is 40 of the fake's 0.05 s gaps: at 0.5 s, a
    # stall of the fake's loop on a slow host (2026-12-07, a clean clone's make test at 17 min) once
    # ended the request at the gap limit instead
    res = _one(EndlessVllm(trickle=True, gap_s=0.05), ClientSettings(request_timeout_s=2.0, wall_s_per_token=0.1))
    took = time.monotonic() - t0
    assert not res.success and res.error_type == "request_wall_timeout", res
    assert 2.7 < took < 15
    assert "2.8 s" in res.error_message


def test_a_well_behaved_stream_is_untouched_by_the_bounds():
    async def go():
        async with serving(FakeVllm().server()) as (s, base):
            return await stream_payload(
                s, base, {**PAYLOAD, "max_tokens": 1}, "r1", ClientSettings(request_timeout_s=5)
            )

    res = asyncio.run(go())
    assert res.success and res.output_text == "ab"  # 2 chunks for max_tokens 1: within the margin


def _traffic(path):
    rows = [
        {"prompt_id": f"p{i}", "category": "chat", "prompt": f"Say hello {i}.", "max_tokens": 8, "temperature": 0.0}
        for i in range(2)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_replay_command_against_a_server_that_ignores_max_tokens_ends_with_those_rows_failed(tmp_path):
    """The issue's case: it used to run until killed (120 s, 150 s)."""
    from specdec.cli.replay import main

    traffic = _traffic(tmp_path / "t.jsonl")
    with threaded(EndlessVllm(), EndlessVllm()) as (base, spec):
        t0 = time.monotonic()
        result = CliRunner().invoke(
            main,
            [
                str(traffic),
                "--baseline-url",
                base,
                "--speculative-url",
                spec,
                "--levels",
                "1",
                "--repeats",
                "2",
                "--warmup",
                "0",
                "--request-timeout",
                "10",
                "--runs-dir",
                str(tmp_path / "runs"),
                "--run-id",
                "x",
                "--no-progress",
                "--no-lossless-pass",
            ],
        )
        took = time.monotonic() - t0
    assert took < 90, took
    assert result.exit_code == 1, result.output  # every level failed: more than --max-error-rate
    table = pq.read_table(tmp_path / "runs" / "x" / "requests.parquet")
    assert table.num_rows == 2 * 2 * 2  # 2 arms x 2 repeats x 2 rows
    assert set(table.column("error_type").to_pylist()) == {"overlong_stream"}
    assert not any(table.column("success").to_pylist())
