"""benchmarks/replay_client.py's httptools-uvloop client: its transport
(``HttptoolsPool``, httptools framing under the replay's runner) reads the
benchmark's own stub stream into the same rows as the replay's transport:
every token counted, one timestamp per content chunk, the running counts,
keep-alive connections reused."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("httptools")
uvloop = pytest.importorskip("uvloop")

from specdec.replay.http.client import stream_payload  # noqa: E402
from specdec.replay.http.stream import StreamPool  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "replay_client.py"


def _bench():
    spec = importlib.util.spec_from_file_location("replay_client_bench", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _payload(i: int) -> dict:
    return {
        "model": "stub",
        "messages": [{"role": "user", "content": f"Say something, number {i}."}],
        "max_tokens": 5,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }


async def _rows(bench, pool_cls, requests: int = 6, streams: int = 3):
    """``requests`` streamed requests, ``streams`` at a time, against the stub (5 tokens, 1 ms)."""
    server = bench.StubServer(tokens=5, step_ms=1.0)
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(lambda: bench._Conn(server), "127.0.0.1", 0)
    ticker = asyncio.create_task(server.ticker())
    url = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}"
    try:
        async with pool_cls() as pool:
            rows = []
            for start in range(0, requests, streams):
                rows += await asyncio.gather(
                    *(stream_payload(pool, url, _payload(i), f"r{i}") for i in range(start, start + streams))
                )
            connections = len(pool._all)
    finally:
        ticker.cancel()
        srv.close()
    return rows, connections, server.stats.tokens


def test_httptools_client_counts_the_stub_stream():
    bench = _bench()
    rows, connections, stub_tokens = uvloop.run(_rows(bench, bench.HttptoolsPool))
    assert stub_tokens == 30
    for res in rows:
        assert res.success, (res.error_type, res.error_message)
        assert res.output_tokens == 5 and res.prompt_tokens == 17
        assert res.chunk_tokens == [1, 2, 3, 4, 5]
        assert len(res.chunk_offsets_ms) == 5
        assert res.chunk_offsets_ms == sorted(res.chunk_offsets_ms)
        assert res.ttft_ms == res.chunk_offsets_ms[0]
        assert res.finish_reason == "length"
        assert res.output_text == " quick brown fox jumps over"
    assert connections == 3  # the second round reused the first round's connections


def test_httptools_client_gives_the_replay_transports_rows():
    bench = _bench()
    fields = ("success", "output_tokens", "prompt_tokens", "chunk_tokens", "finish_reason", "output_text")
    theirs, _, _ = uvloop.run(_rows(bench, bench.HttptoolsPool))
    ours, _, _ = asyncio.run(_rows(bench, StreamPool))
    assert [[getattr(r, f) for f in fields] for r in theirs] == [[getattr(r, f) for f in fields] for r in ours]
    assert [len(r.chunk_offsets_ms) for r in theirs] == [len(r.chunk_offsets_ms) for r in ours]
