"""Helpers for the proxy tests: a proxy started in front of a stub upstream on
the test's own loop, and an upstream that echoes what it was sent."""

from __future__ import annotations

import asyncio
import gzip
import json
import time
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from specdec.capture.proxy.record import RowMaker
from specdec.capture.proxy.service import ProxySettings, start_proxy
from specdec.capture.proxy.writer import Recorder


@asynccontextmanager
async def proxied(
    upstream: TestServer,
    out_dir: Path,
    *,
    recorder: Recorder | None = None,
    flush_s: float = 3600.0,
    content: str = "keep",
):
    """Start ``upstream`` and a proxy in front of it; yield (session, direct
    URL, proxy URL, recorder); stop the proxy (final flush) and the upstream."""
    await upstream.start_server()
    direct = str(upstream.make_url("")).rstrip("/")
    settings = ProxySettings(upstream=direct, port=0, out_dir=out_dir, content=content, flush_s=flush_s)
    running = await start_proxy(settings, recorder)
    try:
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            yield session, direct, running.url, running.recorder
    finally:
        await running.stop()
        await upstream.close()


@asynccontextmanager
async def proxy_for(upstream_url: str, out_dir: Path, **settings):
    """A proxy in front of ``upstream_url`` with these ProxySettings; yield it
    running (``.url``, ``.recorder``); stop it at the end."""
    running = await start_proxy(
        ProxySettings(upstream=upstream_url, port=0, out_dir=out_dir, content="keep", flush_s=3600.0, **settings)
    )
    try:
        yield running
    finally:
        await running.stop()


async def proxy_stats(session: aiohttp.ClientSession, url: str) -> dict:
    async with session.get(url + "/specdec/stats") as r:
        return (await r.json())["proxy"]


def recorder(out_dir: Path, flush_s: float = 3600.0, **kw) -> Recorder:
    return Recorder(out_dir, RowMaker(), flush_s, **kw)


async def until(predicate, timeout_s: float = 5.0) -> None:
    """Wait until ``predicate()`` holds (a deadline, not a timed assertion)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


class EchoUpstream:
    """Answers every request with the headers and body it received (JSON),
    a Set-Cookie, an extra header, and gzip on /gzip."""

    def __init__(self):
        self.seen: list[dict] = []

    async def any(self, request: web.Request) -> web.Response:
        body = await request.read()
        seen = {
            "method": request.method,
            "path_qs": request.path_qs,
            "headers": [[k, v] for k, v in request.headers.items()],
            "body": body.decode(),
        }
        self.seen.append(seen)
        if request.path == "/gzip":
            reply = {
                "choices": [{"message": {"content": "z"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1},
            }
            return web.Response(
                body=gzip.compress(json.dumps(reply).encode(), mtime=0),
                headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
            )
        return web.json_response(seen, headers={"X-Upstream": "yes", "Set-Cookie": "sid=abc; Path=/"})

    def server(self) -> TestServer:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.any)
        return TestServer(app, host="127.0.0.1")


class RawUpstream:
    """An upstream on a bare asyncio socket, doing what no framework would:
    ``reply`` ignores ``Expect: 100-continue`` (it reads the body and answers,
    as a server may), ``silent`` reads the request and never answers,
    ``stall`` sends the reply's headers and a first SSE event and then
    nothing, ``drop`` sends them and closes the connection. ``seen`` holds
    each request's (head, body); ``closed`` is set when the proxy closes a
    connection the stub was still holding."""

    FIRST = b'data: {"id":"r1","choices":[{"delta":{"content":"a"}}]}\n\n'

    def __init__(self, mode: str = "reply"):
        self.mode = mode
        self.seen: list[tuple[bytes, bytes]] = []
        self.closed = asyncio.Event()
        self.server: asyncio.AbstractServer | None = None
        self.url = ""

    async def __aenter__(self) -> RawUpstream:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            body = await reader.readexactly(length)
            self.seen.append((head, body))
            if self.mode == "reply":
                reply = json.dumps({"got_bytes": len(body)}).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                    b"Connection: close\r\n\r\n%s" % (len(reply), reply)
                )
                await writer.drain()
                return
            if self.mode in ("stall", "drop"):
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                    b"\r\n%x\r\n%s\r\n" % (len(self.FIRST), self.FIRST)
                )
                await writer.drain()
                if self.mode == "drop":
                    return
            if await reader.read() == b"":  # silent, stall: wait until the proxy lets go
                self.closed.set()
        except (ConnectionError, asyncio.IncompleteReadError):
            self.closed.set()
        finally:
            writer.close()


async def raw_exchange(
    url: str, data: bytes, *, wait_for: bytes | None = None, rest: bytes = b"", timeout_s: float = 3.0
) -> bytes:
    """Send ``data`` on a bare socket to the proxy at ``url``; if ``wait_for``
    is given, wait for those bytes (e.g. ``100 Continue``) and send ``rest``;
    return everything read until the proxy closes (within ``timeout_s``)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(data)
        got = b""
        if wait_for is not None:
            while wait_for not in got:
                chunk = await asyncio.wait_for(reader.read(4096), timeout_s)
                assert chunk, f"closed before {wait_for!r}: {got!r}"
                got += chunk
            writer.write(rest)
        return got + await asyncio.wait_for(reader.read(), timeout_s)
    finally:
        writer.close()
