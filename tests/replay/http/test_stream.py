"""specdec's own HTTP/1.1 streaming transport (replay/http/stream.py), against
a raw socket server that writes exactly the bytes a test scripts: framing
split anywhere, keep-alive reuse, a server that closes idle connections, and
replies framed by Content-Length or by the connection's close. The typed
failures are covered with the client (test_client*.py run under both
transports)."""

from __future__ import annotations

import asyncio

import pytest

from specdec.replay.http.client import ClientSettings, stream_payload
from specdec.replay.http.stream import StreamPool

GOOD = (
    b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
    b'data: {"choices":[{"delta":{"content":"b"}}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
    b"data: [DONE]\n\n"
)
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunked(*events: bytes, last: bytes = b"0\r\n\r\n") -> list[bytes]:
    return [b"%x\r\n%s\r\n" % (len(e), e) for e in events] + [last]


class Scripted:
    """A raw server: each request on a connection is answered with the next
    reply (a list of byte writes); ``close_after`` closes the connection
    after that many replies on it. Counts connections and requests."""

    def __init__(self, replies, close_after: int | None = None, gap_s: float = 0.0, drop_after: int | None = None):
        """``drop_after``: after that many replies on a connection, read the next request
        and close without a reply (a keep-alive connection the server had given up on)."""
        self.replies, self.close_after, self.gap_s, self.drop_after = replies, close_after, gap_s, drop_after
        self.connections = 0
        self.requests: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(
                    [ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:")][0].split(b":")[1]
                )
                body = await reader.readexactly(length)
                if self.drop_after is not None and served >= self.drop_after:
                    break
                self.requests.append(head + body)
                reply = self.replies[min(len(self.requests) - 1, len(self.replies) - 1)]
                for piece in reply:
                    writer.write(piece)
                    await writer.drain()
                    if self.gap_s:
                        await asyncio.sleep(self.gap_s)
                served += 1
                if self.close_after is not None and served >= self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def run(server: Scripted, n: int = 1, settings: ClientSettings | None = None, pause_s: float = 0.0):
    async def go():
        srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        base = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}"
        out = []
        async with StreamPool() as pool:
            for i in range(n):
                out.append(await stream_payload(pool, base, {"model": "m", "messages": []}, f"r{i}", settings))
                await asyncio.sleep(pause_s)
        srv.close()
        return out

    return asyncio.run(go())


def test_one_connection_serves_sequential_requests():
    server = Scripted([[SSE_HEAD] + chunked(GOOD)])
    results = run(server, n=5)
    assert all(r.success and r.output_text == "ab" and r.output_tokens == 2 for r in results)
    assert server.connections == 1 and len(server.requests) == 5
    assert server.requests[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"X-Request-Id: r0\r\n" in server.requests[0]


@pytest.mark.parametrize("cut", [1, 2, 3, 5, 7, 11])
def test_framing_split_at_any_byte(cut):
    whole = SSE_HEAD + b"".join(chunked(*(e + b"\n\n" for e in GOOD.split(b"\n\n")[:-1])))
    pieces = [whole[i : i + cut] for i in range(0, len(whole), cut)]
    res = run(Scripted([pieces]), settings=ClientSettings(request_timeout_s=5))[0]
    assert res.success and res.output_text == "ab" and res.output_tokens == 2
    assert len(res.chunk_offsets_ms) == 2


def test_chunk_extensions_and_trailers_are_read():
    reply = [SSE_HEAD, b"%x;name=value\r\n%s\r\n" % (len(GOOD), GOOD), b"0\r\nX-Trailer: 1\r\n\r\n"]
    server = Scripted([reply])
    results = run(server, n=2)
    assert all(r.success for r in results) and server.connections == 1


def test_content_length_and_connection_close_framing():
    by_length = [b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(GOOD), GOOD]
    server = Scripted([by_length])
    assert all(r.success for r in run(server, n=2)) and server.connections == 1
    by_close = [b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", GOOD]
    server = Scripted([by_close], close_after=1)
    assert all(r.success for r in run(server, n=2)) and server.connections == 2


def test_a_server_that_closes_idle_connections_gets_a_fresh_one():
    server = Scripted([[SSE_HEAD] + chunked(GOOD)], close_after=1)
    results = run(server, n=3, pause_s=0.05)
    assert all(r.success for r in results)
    assert server.connections == 3


def test_when_every_idle_connection_is_stale_the_retry_takes_a_fresh_one():
    """Two requests at once leave two idle connections; the server then drops each
    connection at its next request without a reply. The third request finds the
    first stale, and its one retry must not take the second (as stale): a fresh
    connection answers it."""
    server = Scripted([[SSE_HEAD] + chunked(GOOD)], drop_after=1, gap_s=0.02)  # slow: the two overlap

    async def go():
        srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        base = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}"
        async with StreamPool() as pool:
            first = await asyncio.gather(
                *(stream_payload(pool, base, {"model": "m", "messages": []}, f"r{i}") for i in range(2))
            )
            await asyncio.sleep(0.2)  # both replies' last chunks are in: two idle connections in the pool
            third = await stream_payload(pool, base, {"model": "m", "messages": []}, "r2")
        srv.close()
        return [*first, third]

    results = asyncio.run(go())
    assert all(r.success for r in results), [(r.error_type, r.error_message) for r in results]
    assert server.connections == 3  # the two, then the fresh one (the stale one tried was one of the two)


def test_done_before_the_last_chunk_still_reuses_the_connection():
    # [DONE] arrives, the terminating zero chunk only later: the request is
    # over at [DONE], and the connection returns to the pool when the rest comes
    server = Scripted([[SSE_HEAD] + chunked(GOOD)], gap_s=0.02)
    results = run(server, n=3, pause_s=0.1)
    assert all(r.success for r in results) and server.connections == 1
    # without the pause the next request starts before the zero chunk: a second connection
    server = Scripted([[SSE_HEAD] + chunked(GOOD)], gap_s=0.05)
    results = run(server, n=2)
    assert all(r.success for r in results) and server.connections == 2


def test_broken_chunk_framing_is_a_truncated_stream_and_the_connection_is_dropped():
    bad = [SSE_HEAD, b"zz\r\n" + GOOD + b"\r\n0\r\n\r\n"]
    server = Scripted([bad, [SSE_HEAD] + chunked(GOOD)])
    first, second = run(server, n=2)
    assert not first.success and first.error_type == "stream_truncated" and "chunk size" in first.error_message
    assert second.success and server.connections == 2


def test_an_error_reply_with_a_body_keeps_the_connection():
    body = b'{"error": "no such model"}'
    err = [b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body), body]
    server = Scripted([err, [SSE_HEAD] + chunked(GOOD)])
    first, second = run(server, n=2)
    assert first.error_type == "http_status" and first.http_status == 404 and "no such model" in first.error_message
    assert second.success and server.connections == 1


def test_garbage_instead_of_http_is_a_failure_not_a_crash():
    res = run(Scripted([[b"SSH-2.0-OpenSSH_9.6\r\n\r\n"]], close_after=1))[0]
    assert not res.success and res.error_type in ("connect_error", "stream_truncated")
    assert "HTTP" in res.error_message


def test_https_endpoint_speaks_tls():
    # the same plain-HTTP server behind an http:// URL and an https:// one:
    # over https the client opens with a TLS handshake, which this server
    # never answers, so the connect (handshake included) fails as a row
    ok, server = run_url_scheme("http")
    assert ok.success and len(server.requests) == 1
    res, server = run_url_scheme("https")
    assert not res.success and res.error_type in ("connect_error", "connect_timeout")
    assert server.requests == [] and server.connections == 1


def run_url_scheme(scheme: str):
    server = Scripted([[SSE_HEAD] + chunked(GOOD)])

    async def go():
        srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        base = f"{scheme}://127.0.0.1:{srv.sockets[0].getsockname()[1]}"
        async with StreamPool() as pool:
            res = await stream_payload(
                pool,
                base,
                {"model": "m", "messages": []},
                "r",
                ClientSettings(connect_timeout_s=0.5, request_timeout_s=2),
            )
        srv.close()
        return res, server

    return asyncio.run(go())


def test_a_consumer_failure_at_the_end_of_a_close_framed_reply_is_a_row_not_a_hang():
    # the last event has no newline: the parser reads it only at the connection's close
    reply = [
        b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n",
        b'data: {"choices":[{"delta":{"content":"a"}}]}',
    ]

    def boom(chunk):
        raise RuntimeError("consumer broke")

    async def go():
        server = Scripted([reply], close_after=1)
        srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        base = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}"
        async with StreamPool() as pool:
            res = await asyncio.wait_for(
                stream_payload(
                    pool, base, {"model": "m", "messages": []}, "r", ClientSettings(request_timeout_s=30), on_chunk=boom
                ),
                5,
            )
        srv.close()
        return res

    res = asyncio.run(go())
    assert res.error_type == "client_error" and "consumer broke" in res.error_message
