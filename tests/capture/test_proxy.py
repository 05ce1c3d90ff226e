"""The recording proxy in front of a stub upstream: responses pass through
unchanged (streamed, plain JSON, error statuses, gzip), requests arrive as
sent less the proxy's own headers, Authorization passes and is never written,
and recording failures never touch the client's response."""

import asyncio
import gzip
import json
from pathlib import Path

import aiohttp
import pyarrow.parquet as pq

from specdec.capture.proxy.export import export_traffic
from specdec.runfolder import TRAFFIC_PART_GLOB as PART_GLOB
from specdec.traffic.io import load_traffic
from tests.support.fake_server import GOOD_SSE, FakeVllm
from tests.support.proxy_stub import EchoUpstream, proxied, recorder, until

CHAT = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "Tell Zorblax a story"}]}


async def _both(session, direct, proxy, path="/v1/chat/completions", body=CHAT, headers=None):
    out = []
    for base in (direct, proxy):
        async with session.post(base + path, json=body, headers=headers or {}) as r:
            out.append((r.status, r.headers.get("Content-Type"), await r.read()))
    return out


def _rows(out_dir: Path) -> list[dict]:
    return [row for f in sorted(out_dir.glob(PART_GLOB)) for row in pq.read_table(f).to_pylist()]


def test_streamed_bytes_through_the_proxy_equal_the_direct_call(tmp_path):
    async def go():
        async with proxied(FakeVllm(delay_s=0.001).server(), tmp_path) as (session, direct, proxy, _):
            return await _both(session, direct, proxy, headers={"X-Specdec-Category": "story"})

    (d_status, d_type, d_body), (p_status, p_type, p_body) = asyncio.run(go())
    assert p_body == d_body == GOOD_SSE and p_status == d_status == 200 and p_type == d_type
    (row,) = _rows(tmp_path)
    assert row["category"] == "story" and row["max_tokens"] == 2 and row["input_tokens"] == 3


def test_plain_json_and_error_statuses_pass_through_unchanged(tmp_path):
    async def go(fake):
        async with proxied(fake.server(), tmp_path) as (session, direct, proxy, rec):
            got = await _both(session, direct, proxy)
        return got, rec.stats()

    (direct, via), stats = asyncio.run(go(FakeVllm(plain_json=True)))
    assert via == direct and json.loads(via[2])["usage"]["completion_tokens"] == 2
    (direct, via), stats = asyncio.run(go(FakeVllm(status=503)))
    assert via == direct and via[0] == 503 and via[2] == b"engine is sad"
    assert stats["not_recorded"] == {"status_503": 1} and stats["failures_total"] == 0


def test_requests_arrive_as_sent_less_the_proxy_headers_and_responses_keep_theirs(tmp_path):
    echo = EchoUpstream()

    async def go():
        async with proxied(echo.server(), tmp_path) as (session, direct, proxy, _):
            hdrs = {
                "X-Specdec-Category": "c",
                "X-Specdec-Session": "s",
                "X-Mine": "1",
                "Content-Type": "text/plain",
                "Connection": "keep-alive, X-Hop",
                "X-Hop": "drop me",
            }
            replies = []
            for base in (direct, proxy):
                async with session.put(base + "/any/path?a=1&b=%20x", data=b"raw body", headers=hdrs) as r:
                    replies.append((r.status, dict(r.headers), await r.read()))
            async with session.get(proxy + "/second", headers={"Cookie": "mine=1"}) as r:
                await r.read()
            gz = []
            for base in (direct, proxy):
                async with session.get(base + "/gzip") as r:
                    gz.append((r.headers.get("Content-Encoding"), await r.read()))
            return replies, gz

    replies, gz = asyncio.run(go())
    direct, via = echo.seen[0], echo.seen[1]
    assert via["method"] == "PUT" and via["path_qs"] == direct["path_qs"] == "/any/path?a=1&b=%20x"
    assert via["body"] == direct["body"] == "raw body"

    def names(seen, drop=("host", "connection", "x-hop")):
        return sorted((k.lower(), v) for k, v in seen["headers"] if k.lower() not in drop)

    # exactly the client's headers (Host is the upstream's; hop-by-hop ones are the proxy's own)
    assert names(via) == [h for h in names(direct) if not h[0].startswith("x-specdec-")]
    assert ("x-mine", "1") in names(via) and ("content-type", "text/plain") in names(via)
    assert "x-hop" not in {k.lower() for k, _ in via["headers"]}  # named in Connection: hop-by-hop
    (d_status, d_headers, _), (p_status, p_headers, _) = replies
    assert p_status == d_status == 200
    assert p_headers["X-Upstream"] == "yes" and p_headers["Set-Cookie"] == "sid=abc; Path=/"
    # the client's cookie passes through as it is
    assert [v for k, v in echo.seen[2]["headers"] if k.lower() == "cookie"] == ["mine=1"]
    # compressed bodies stay compressed, byte for byte
    assert gz[0] == gz[1] and gz[1][0] == "gzip" and gzip.decompress(gz[1][1]).startswith(b"{")


def test_authorization_passes_through_and_is_never_written(tmp_path):
    fake = FakeVllm(api_key="sk-test-SECRET-9f8e7d")

    async def go():
        async with proxied(fake.server(), tmp_path) as (session, direct, proxy, rec):
            ok = await _both(
                session,
                direct,
                proxy,
                headers={"Authorization": "Bearer sk-test-SECRET-9f8e7d", "Cookie": "session=COOKIE-SECRET-1234"},
            )
            denied = await _both(session, direct, proxy, headers={"Authorization": "Bearer wrong-key-55"})
        return ok, denied, rec.stats()  # after the stop: every exchange processed

    ok, denied, stats = asyncio.run(go())
    assert ok[0] == ok[1] and ok[1][0] == 200 and denied[0] == denied[1] and denied[1][0] == 401
    assert fake.auth_headers[1] == "Bearer sk-test-SECRET-9f8e7d"  # [0] direct, [1] through the proxy
    assert stats["rows_recorded"] == 1
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files
    for path in files:
        data = path.read_bytes()
        for secret in (b"SECRET-9f8e7d", b"COOKIE-SECRET", b"wrong-key-55"):
            assert secret not in data, path


def test_hash_mode_writes_no_prompt_text_anywhere(tmp_path):
    async def go():
        async with proxied(FakeVllm().server(), tmp_path, content="hash") as (session, direct, proxy, _):
            await _both(session, direct, proxy)

    asyncio.run(go())
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files
    for path in files:
        assert b"Zorblax" not in path.read_bytes() and b"story" not in path.read_bytes(), path
    (row,) = _rows(tmp_path)
    assert json.loads(row["messages"])[0]["role"] == "user" and row["content_note"].startswith("redacted")
    # a redacted recording is still a valid traffic file
    export_traffic(tmp_path, tmp_path.parent / "hashed.parquet")
    (loaded,) = load_traffic(tmp_path.parent / "hashed.parquet").rows
    assert loaded.chat()[0]["content"].startswith("sha256:")


def test_a_recording_failure_never_touches_the_response_and_is_counted(tmp_path):
    calls = []

    def broken(table, path):
        calls.append(path)
        raise OSError(28, "No space left on device")

    rec = recorder(tmp_path, flush_s=0.02, write=broken)

    async def go():
        async with proxied(FakeVllm().server(), tmp_path, recorder=rec) as (session, direct, proxy, _):
            got = await _both(session, direct, proxy)
            got += await _both(session, direct, proxy, body={**CHAT, "temperature": 7})  # a bad row
            await until(
                lambda: rec.stats()["failures"].get("write", 0) >= 1 and rec.stats()["failures"].get("bad_row") == 1
            )
            async with session.get(proxy + "/specdec/stats") as r:
                stats = await r.json()
            rec.write = lambda table, path: (
                path.parent.mkdir(parents=True, exist_ok=True),
                pq.write_table(table, path),
            )  # the disk has room again
            await until(lambda: rec.stats()["rows_written"] == 1)
            return got, stats

    got, stats = asyncio.run(go())
    assert all(g == (200, "text/event-stream", GOOD_SSE) for g in got)
    assert stats["recording"]["failures"]["bad_row"] == 1
    assert stats["recording"]["failures"]["write"] >= 1 and stats["proxy"]["requests"] == 2
    assert stats["recording"]["rows_pending"] == 1 and stats["recording"]["rows_written"] == 0
    # the kept row was written at the next flush once writing worked
    assert len(_rows(tmp_path)) == 1 and calls


def test_rows_appear_without_shutdown_at_the_flush_interval(tmp_path):
    rec = recorder(tmp_path, flush_s=0.05)

    async def go():
        async with proxied(FakeVllm().server(), tmp_path, recorder=rec) as (session, direct, proxy, _):
            await _both(session, direct, proxy)
            await until(lambda: list(tmp_path.glob(PART_GLOB)))  # the proxy is still running
            return _rows(tmp_path)

    rows = asyncio.run(go())
    assert len(rows) == 1 and rows[0]["source"] == "proxy"


def test_shutdown_writes_every_recorded_row(tmp_path):
    async def go():  # flush interval of an hour: only the shutdown can write them
        async with proxied(FakeVllm().server(), tmp_path) as (session, direct, proxy, rec):
            for _ in range(3):
                await _both(session, direct, proxy)
            assert not list(tmp_path.glob(PART_GLOB))

    asyncio.run(go())
    assert len(_rows(tmp_path)) == 3


def test_a_client_that_leaves_mid_stream_is_counted_and_not_recorded(tmp_path):
    async def go():
        async with proxied(FakeVllm(delay_s=0.2).server(), tmp_path) as (session, direct, proxy, rec):
            resp = await session.post(proxy + "/v1/chat/completions", json=CHAT)
            await resp.content.readany()
            resp.close()  # drop the connection after the first chunk
            await until(lambda: rec.stats()["not_recorded"].get("incomplete") == 1)
            async with session.get(proxy + "/specdec/stats") as r:
                return await r.json()

    stats = asyncio.run(go())
    assert stats["proxy"]["client_gone"] == 1 and stats["recording"]["rows_recorded"] == 0


def test_an_unreachable_upstream_gets_a_502_from_the_proxy(tmp_path):
    from specdec.capture.proxy.service import ProxySettings, start_proxy
    from specdec.engines.server import free_port

    async def go():
        settings = ProxySettings(upstream=f"http://127.0.0.1:{free_port()}", port=0, out_dir=tmp_path)
        running = await start_proxy(settings)
        try:
            async with aiohttp.ClientSession() as session:
                async with session.post(running.url + "/v1/chat/completions", json=CHAT) as r:
                    return r.status, await r.json()
        finally:
            await running.stop()

    status, body = asyncio.run(go())
    assert status == 502 and body["error"]["type"] == "upstream_unreachable"
