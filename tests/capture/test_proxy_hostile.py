"""The recording proxy on the inputs staging really sends (issue 24):
``Expect: 100-continue``, clients that send headers a byte at a time,
upstreams that go silent or break off, clients that leave mid-stream, and
malformed requests. Every upstream and client here is a bare socket on
loopback; every wait is bounded."""

import asyncio
import json
import logging
import time

import aiohttp
import pytest

from tests.support.proxy_stub import RawUpstream, proxy_for, proxy_stats, raw_exchange

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 2000}]}).encode()  # over 1 KiB


def _post(body: bytes, *extra: bytes) -> bytes:
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: p\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n%s\r\n" % (len(body), b"".join(h + b"\r\n" for h in extra))
    )


@pytest.mark.parametrize("waits", [True, False], ids=["client-waits-for-100", "client-sends-at-once"])
def test_expect_100_continue_is_answered_and_never_forwarded(tmp_path, waits):
    async def go():
        async with RawUpstream("reply") as up, proxy_for(up.url, tmp_path) as proxy:
            start = time.monotonic()
            head = _post(BODY, b"Expect: 100-continue")
            if waits:  # as curl does: the body only after the 100 (curl gives up waiting after 1 s)
                got = await raw_exchange(proxy.url, head, wait_for=b"100 Continue", rest=BODY)
            else:
                got = await raw_exchange(proxy.url, head + BODY)
            return got, time.monotonic() - start, up.seen

    got, took_s, seen = asyncio.run(go())
    assert took_s < 2.5 and b"HTTP/1.1 200 OK" in got and got.endswith(b'{"got_bytes": %d}' % len(BODY))
    ((upstream_head, upstream_body),) = seen
    assert upstream_body == BODY and b"expect" not in upstream_head.lower()


def test_a_client_that_sends_its_headers_a_byte_at_a_time_is_dropped(tmp_path):
    async def go():
        async with RawUpstream("reply") as up, proxy_for(up.url, tmp_path, header_timeout_s=0.5) as proxy:
            host, port = proxy.url.removeprefix("http://").rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            start, answer = time.monotonic(), b""
            for byte in _post(BODY):  # one byte every 0.1 s: 15 s for the headers
                if writer.is_closing() or reader.at_eof():
                    break
                writer.write(bytes([byte]))
                try:
                    answer += await asyncio.wait_for(reader.read(100), 0.1)
                except TimeoutError:
                    continue
                if time.monotonic() - start > 3:
                    break
            took_s = time.monotonic() - start
            writer.close()
            # a connection that sends nothing at all is dropped too
            idle_reader, idle_writer = await asyncio.open_connection(host, int(port))
            idle_answer = await asyncio.wait_for(idle_reader.read(), 3)
            idle_writer.close()
            async with aiohttp.ClientSession() as session:
                return answer, took_s, idle_answer, await proxy_stats(session, proxy.url), up.seen

    answer, took_s, idle_answer, stats, seen = asyncio.run(go())
    assert answer.startswith(b"HTTP/1.1 408") and idle_answer.startswith(b"HTTP/1.1 408")
    assert 0.4 < took_s < 2.5 and stats["header_timeouts"] == 2 and not seen


def test_a_keep_alive_connection_idle_longer_than_the_header_timeout_still_works(tmp_path):
    async def go():  # the clock runs from a request's first byte, not from the previous reply
        async with RawUpstream("reply") as up, proxy_for(up.url, tmp_path, header_timeout_s=0.3) as proxy:
            connector = aiohttp.TCPConnector(limit=1)  # one connection, reused
            async with aiohttp.ClientSession(connector=connector) as session:
                statuses = []
                for _ in range(2):
                    async with session.post(proxy.url + "/v1/chat/completions", data=BODY) as r:
                        statuses.append((r.status, await r.read()))
                    await asyncio.sleep(0.6)
                return statuses, await proxy_stats(session, proxy.url)

    statuses, stats = asyncio.run(go())
    assert [s for s, _ in statuses] == [200, 200] and stats["header_timeouts"] == 0


def test_a_silent_upstream_gets_the_client_a_504(tmp_path):
    async def go():
        async with RawUpstream("silent") as up, proxy_for(up.url, tmp_path, upstream_idle_s=0.5) as proxy:
            async with aiohttp.ClientSession() as session:
                start = time.monotonic()
                async with session.post(proxy.url + "/v1/chat/completions", data=BODY) as r:
                    got = r.status, await r.json()
                took_s = time.monotonic() - start
                await asyncio.wait_for(up.closed.wait(), 2)
                return got, took_s, await proxy_stats(session, proxy.url)

    (status, body), took_s, stats = asyncio.run(go())
    assert status == 504 and body["error"]["type"] == "upstream_timeout" and took_s < 2
    assert stats["upstream_timeouts"] == 1


def test_an_upstream_silent_mid_stream_closes_the_clients_stream(tmp_path):
    async def go():
        async with RawUpstream("stall") as up, proxy_for(up.url, tmp_path, upstream_idle_s=0.5) as proxy:
            async with aiohttp.ClientSession() as session:
                start = time.monotonic()
                async with session.post(proxy.url + "/v1/chat/completions", data=BODY) as r:
                    first = await r.content.readany()
                    with pytest.raises(aiohttp.ClientPayloadError):  # never a clean end
                        await asyncio.wait_for(r.read(), 3)
                took_s = time.monotonic() - start
                await asyncio.wait_for(up.closed.wait(), 2)
                return first, took_s, await proxy_stats(session, proxy.url), proxy.recorder.stats()

    first, took_s, stats, rec = asyncio.run(go())
    assert first == RawUpstream.FIRST and took_s < 2.5 and stats["upstream_timeouts"] == 1


def test_a_client_that_leaves_mid_stream_closes_the_upstream_connection(tmp_path):
    async def go():  # the upstream is silent after its first event: only the client's leaving can end it
        async with RawUpstream("stall") as up, proxy_for(up.url, tmp_path) as proxy:
            async with aiohttp.ClientSession() as session:
                resp = await session.post(proxy.url + "/v1/chat/completions", data=BODY)
                first = await resp.content.readany()
                resp.close()
                start = time.monotonic()
                await asyncio.wait_for(up.closed.wait(), 2)
                took_s = time.monotonic() - start
                await asyncio.sleep(0.05)
                return first, took_s, await proxy_stats(session, proxy.url)

    first, took_s, stats = asyncio.run(go())
    assert first == RawUpstream.FIRST and took_s < 2 and stats["client_gone"] == 1


def _tracebacks(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.exc_info]


def test_a_malformed_request_is_one_log_line_and_counted(tmp_path, caplog):
    async def go():
        async with RawUpstream("reply") as up, proxy_for(up.url, tmp_path) as proxy:
            answers = [
                await raw_exchange(proxy.url, junk)
                for junk in (
                    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",  # TLS to the HTTP port
                    b"GET / HTTP/1.1\r\nHost: p\r\nBad Header Line\r\n\r\n",
                    b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n",
                )
            ]
            async with aiohttp.ClientSession() as session:
                return answers, await proxy_stats(session, proxy.url)

    with caplog.at_level(logging.DEBUG):
        answers, stats = asyncio.run(go())
    assert all(b" 400 Bad Request" in a.split(b"\r\n")[0] for a in answers) and stats["bad_requests"] == 3
    lines = [r for r in caplog.records if "malformed request" in r.getMessage()]
    assert len(lines) == 3 and all(r.levelno == logging.WARNING for r in lines)
    assert not _tracebacks(caplog), _tracebacks(caplog)


def test_an_upstream_that_drops_mid_stream_is_one_log_line_and_counted(tmp_path, caplog):
    async def go():
        async with RawUpstream("drop") as up, proxy_for(up.url, tmp_path) as proxy:
            async with aiohttp.ClientSession() as session:
                async with session.post(proxy.url + "/v1/chat/completions", data=BODY) as r:
                    first = await r.content.readany()
                    with pytest.raises(aiohttp.ClientPayloadError):  # the client sees the break, too
                        await asyncio.wait_for(r.read(), 3)
                return first, await proxy_stats(session, proxy.url)

    with caplog.at_level(logging.DEBUG):
        first, stats = asyncio.run(go())
    assert first == RawUpstream.FIRST and stats["upstream_dropped"] == 1
    lines = [r for r in caplog.records if "broke the reply off" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert not _tracebacks(caplog), _tracebacks(caplog)


def test_a_client_whose_body_stalls_gets_a_408_and_nothing_is_forwarded(tmp_path):
    """Headers in time, then half the body and silence: the proxy waits
    ``header_timeout_s`` for the next piece, answers 408 and closes; the
    upstream never sees the request. A body sent slowly but steadily is
    forwarded whole."""

    async def go():
        async with RawUpstream("reply") as up, proxy_for(up.url, tmp_path, header_timeout_s=0.5) as proxy:
            host, port = proxy.url.removeprefix("http://").rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            start = time.monotonic()
            writer.write(_post(BODY) + BODY[:1000])
            answer = await asyncio.wait_for(reader.read(), 5)
            took_s = time.monotonic() - start
            writer.close()
            # steady: a piece every 0.2 s (each within the 0.5 s limit), 1.2 s in all
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(_post(BODY))
            for i in range(0, len(BODY), 400):
                writer.write(BODY[i : i + 400])
                await writer.drain()
                await asyncio.sleep(0.2)
            steady = await asyncio.wait_for(reader.read(), 5)
            writer.close()
            async with aiohttp.ClientSession() as session:
                return answer, took_s, steady, await proxy_stats(session, proxy.url), up.seen

    answer, took_s, steady, stats, seen = asyncio.run(go())
    assert answer.startswith(b"HTTP/1.1 408") and 0.4 < took_s < 2.5
    assert stats["body_timeouts"] == 1
    assert steady.startswith(b"HTTP/1.1 200") and steady.endswith(b'{"got_bytes": %d}' % len(BODY))
    assert len(seen) == 1 and seen[0][1] == BODY
