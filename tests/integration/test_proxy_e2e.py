"""Acceptance 1 of issue 7, the user's path on the embedded engine: a client
sends two multi-turn streamed sessions through `specdec-capture proxy` in
front of a vLLM server; the rows appear while the proxy runs; `proxy-export`
writes traffic.parquet; specdec-replay replays it in both arms; the report
shows its categories. The client's streamed bytes through the proxy equal a
direct call's apart from ids and timestamps. All on the session's shared
servers (tests/support/engine_servers.py)."""

import asyncio
import json
import re
import signal
import subprocess
import sys
import time
import urllib.request

import aiohttp
import duckdb
import pytest

from specdec.analytics.report.write import write_report
from specdec.capture.proxy.export import export_traffic
from specdec.replay.config import ReplayConfig
from specdec.replay.experiment import run_replay
from specdec.traffic.io import load_traffic
from tests.support.engine_servers import embedded_as

pytestmark = pytest.mark.engine

SESSIONS = {  # category -> the user's turns
    "code": ["Write a Python function that adds two numbers.", "Now add a docstring to it."],
    "smalltalk": ["Hello! How are you today?", "Tell me about your weekend."],
}
MAX_TOKENS = 16


def _normalized(data: bytes) -> bytes:
    """Drop what differs between two identical calls: response ids and timestamps."""
    data = re.sub(rb'"id":"[^"]*"', b'"id":""', data)
    return re.sub(rb'"created":\d+', b'"created":0', data)


def _text(sse: bytes) -> str:
    out = []
    for line in sse.split(b"\n"):
        if line.startswith(b"data: {"):
            for choice in json.loads(line[6:]).get("choices", []):
                out.append(choice.get("delta", {}).get("content") or "")
    return "".join(out)


async def _client(proxy: str, direct: str, empty_cache) -> tuple[bytes, bytes]:
    """Both sessions turn by turn through the proxy; the first turn of the
    code session is also sent directly, just before, for the byte comparison,
    each of the two calls on an empty prefix cache (``empty_cache()``): the
    same compute for both."""
    compared = None
    async with aiohttp.ClientSession() as session:
        for category, turns in SESSIONS.items():
            messages = [{"role": "system", "content": "You are a helpful assistant."}]
            for turn in turns:
                messages.append({"role": "user", "content": turn})
                body = {
                    "model": "specdec-target",
                    "messages": messages,
                    "stream": True,
                    "temperature": 0,
                    "max_tokens": MAX_TOKENS,
                    "stream_options": {"include_usage": True},
                }
                headers = {
                    "X-Specdec-Category": category,
                    "X-Specdec-Session": f"{category}-1",
                    "Authorization": "Bearer e2e-SECRET-token",
                }
                if compared is None:
                    empty_cache()
                    async with session.post(direct + "/v1/chat/completions", json=body) as r:
                        direct_bytes = await r.read()
                    empty_cache()
                async with session.post(proxy + "/v1/chat/completions", json=body, headers=headers) as r:
                    assert r.status == 200
                    reply = await r.read()
                if compared is None:
                    compared = (direct_bytes, reply)
                messages.append({"role": "assistant", "content": _text(reply)})
    return compared


def _stats(url: str) -> dict:
    with urllib.request.urlopen(url + "/specdec/stats", timeout=5) as r:
        return json.loads(r.read())


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, vllm_pair):
    base = tmp_path_factory.mktemp("proxy_e2e")
    out = base / "recorded"
    t0 = time.monotonic()
    upstream = vllm_pair.baseline  # the session's shared baseline server, float32
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specdec.cli.capture",
            "proxy",
            "--upstream",
            upstream.base_url,
            "--listen",
            "127.0.0.1:0",
            "--out",
            str(out),
            "--content",
            "keep",
            "--flush-s",
            "0.5",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().split("listening on ")[1].split()[0]
        compared = asyncio.run(_client(url, upstream.base_url, lambda: vllm_pair.reset_prefix_cache("baseline")))
        deadline = time.monotonic() + 30
        while _stats(url)["recording"]["rows_written"] < 4:  # flushed while the proxy runs
            assert time.monotonic() < deadline, _stats(url)
            time.sleep(0.1)
        stats = _stats(url)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    traffic = base / "traffic.parquet"
    summary = export_traffic(out, traffic)
    return {
        "base": base,
        "out": out,
        "traffic": traffic,
        "summary": summary,
        "compared": compared,
        "stats": stats,
        "record_s": time.monotonic() - t0,
    }


def test_streamed_bytes_through_the_proxy_equal_a_direct_call(recorded):
    direct, via = recorded["compared"]
    assert via.endswith(b"data: [DONE]\n\n") and b'"usage"' in via
    assert _normalized(via) == _normalized(direct)


def test_the_recording_holds_both_sessions_turn_by_turn(recorded):
    assert recorded["stats"]["recording"]["failures_total"] == 0
    rows = load_traffic(recorded["traffic"]).rows
    assert recorded["summary"]["categories"] == {"code": 2, "smalltalk": 2}
    for category in SESSIONS:
        mine = [r for r in rows if r.category == category]
        assert [r.turn_index for r in mine] == [0, 1] and {r.session_id for r in mine} == {f"{category}-1"}
        assert len(json.loads(mine[1].messages)) == 4  # system, user, assistant, user
        assert all(0 < r.max_tokens <= MAX_TOKENS and r.input_tokens > 0 and r.source == "proxy" for r in mine)
    assert [r.arrival_ms for r in rows] == sorted(r.arrival_ms for r in rows)
    for path in recorded["out"].rglob("*"):
        assert not path.is_file() or b"e2e-SECRET-token" not in path.read_bytes()


def test_the_recording_replays_in_both_arms_and_the_report_shows_its_categories(recorded, model_dir, vllm_pair):
    cfg = ReplayConfig(
        traffic=recorded["traffic"],
        runs_dir=recorded["base"] / "runs",
        run_id="proxy-e2e",
        levels=[1],
        repeats=1,
        lossless_pass=False,
        warmup_requests=0,
        samples=0,
        model=model_dir,
        dtype="float32",
        progress=False,
    )
    with embedded_as(vllm_pair):
        run_dir = run_replay(cfg)
    report, _ = write_report(run_dir)
    con = duckdb.connect(str(run_dir / "specdec.duckdb"), read_only=True)
    got = con.execute(
        "select arm, category, count(*) filter (success), count(*) from stg_requests group by all order by all"
    ).fetchall()
    assert got == [
        ("baseline", "code", 2, 2),
        ("baseline", "smalltalk", 2, 2),
        ("speculative", "code", 2, 2),
        ("speculative", "smalltalk", 2, 2),
    ]
    assert {r[0] for r in con.execute("select category from speedup").fetchall()} >= {"code", "smalltalk"}
    page = report.read_text()
    assert "code" in page and "smalltalk" in page
