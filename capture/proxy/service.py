"""``specdec-capture proxy``: a transparent reverse proxy in front of an
OpenAI-compatible server that records the traffic it sees (the staging use).

Every request is forwarded as it came (method, path, query, body, headers
except those ``proxy_http`` names: hop-by-hop ones, ``Host``,
``Content-Length``, ``Expect`` and the proxy's own ``X-Specdec-*``
instructions). The response goes back chunk by chunk as it arrives,
unchanged: status, reason, headers (except hop-by-hop ones) and body bytes;
compressed bodies stay compressed (the upstream client neither decompresses
nor adds Accept-Encoding, User-Agent, Accept or Content-Type headers the
client did not send, and keeps no cookies). ``Authorization`` and ``Cookie``
pass through and are never recorded: the recorder sees only the request
body, the path and the two X-Specdec headers.

Chat and completions requests (``POST .../chat/completions``,
``POST .../completions``) are handed to the recorder (``proxy_writer``) after
the last byte went back to the client; the proxy keeps only references to the
bytes in the meantime. A failure to record is counted, never raised.
``GET /specdec/stats`` answers with the proxy's counters (never forwarded).
Run by the sidecar, the proxy also notes each chat or completions request's
category under the reply's ``id`` (``sidecar_categories``), for the
per-category live gauges.

Hostile or broken peers: an unreachable upstream gets a 502 from the proxy
itself, an upstream silent for ``upstream_idle_s`` a 504, or, once the reply
has begun, a closed stream (never a clean end a client could take for a
whole reply). A client that leaves cancels its handler, which closes the
upstream connection whatever the proxy was waiting for. A client gets
``header_timeout_s`` to send a request's headers (``proxy_guard``), and as
long between two pieces of its body (a 408 and a closed connection after). Each
malformed request and each upstream that stops mid-stream is one log line
and a counter at ``/specdec/stats``, never a traceback.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import aiohttp
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field
from yarl import URL

from specdec.capture.categories import CategoryBook, reply_id
from specdec.capture.proxy.guard import GuardedSite, OneLineLog, guard_middleware
from specdec.capture.proxy.http import no_reply, request_headers, response_headers
from specdec.capture.proxy.record import Exchange, RowMaker, is_recorded_route, request_category
from specdec.capture.proxy.redact import Redactor
from specdec.capture.proxy.rules import CATEGORY_HEADER, SESSION_HEADER, CategoryRules, load_rules
from specdec.capture.proxy.writer import DEFAULT_FLUSH_S, Recorder
from specdec.errors import SpecdecError
from specdec.http.urls import parse_endpoint

log = logging.getLogger("specdec.capture.proxy.service")

STATS_PATH = "/specdec/stats"
MAX_BODY_BYTES = 256 * 2**20
DEFAULT_PORT = 8001
#: On SIGINT/SIGTERM, streams in flight get this long to finish (and be recorded).
SHUTDOWN_GRACE_S = 15.0
#: A client must send a request's headers within this long (from connecting, or from its first byte).
DEFAULT_HEADER_TIMEOUT_S = 10.0
#: An upstream that sends no byte for this long is given up on (504, or a closed stream). Generous:
#: a reply that is not streamed sends nothing until the whole completion is generated.
DEFAULT_UPSTREAM_IDLE_S = 600.0
#: An idle keep-alive connection from a client is closed after this long (aiohttp's default is an hour).
KEEPALIVE_S = 75.0


class ProxySettings(BaseModel):
    """The validated options of ``specdec-capture proxy``."""

    model_config = ConfigDict(extra="forbid")

    upstream: str = Field(description="Base URL of the server to forward to, e.g. http://127.0.0.1:8000.")
    host: str = Field(default="127.0.0.1", description="Address to listen on (loopback unless told otherwise).")
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535, description="Port to listen on; 0: any free port.")
    out_dir: Path = Field(description="Folder of the date-partitioned traffic Parquet files.")
    content: Literal["keep", "hash"] = Field(
        default="hash", description="hash: texts replaced by hash and token length; keep: content recorded as sent."
    )
    rules: Path | None = Field(default=None, description="JSON file of category rules (see proxy_rules).")
    tokenizer: Path | None = Field(default=None, description="tokenizer.json for token lengths in hash mode.")
    flush_s: float = Field(default=DEFAULT_FLUSH_S, gt=0, description="Seconds between Parquet flushes.")
    header_timeout_s: float = Field(
        default=DEFAULT_HEADER_TIMEOUT_S,
        gt=0,
        description="Seconds a client gets to send a request's headers, and at most "
        "between two pieces of its body; then 408 and the connection is "
        "closed.",
    )
    upstream_idle_s: float = Field(
        default=DEFAULT_UPSTREAM_IDLE_S,
        gt=0,
        description="Seconds without a byte from the upstream before the proxy gives up: "
        "504 before the reply began, a closed stream after.",
    )


class Proxy:
    """The aiohttp application and its upstream session."""

    def __init__(
        self,
        upstream_base: str,
        recorder: Recorder,
        book: CategoryBook | None = None,
        upstream_idle_s: float = DEFAULT_UPSTREAM_IDLE_S,
        body_idle_s: float = DEFAULT_HEADER_TIMEOUT_S,
    ):
        self.base = upstream_base.rstrip("/")
        self.body_idle_s = body_idle_s
        self.recorder = recorder
        self.book = book  # the sidecar's: each request's category, by reply id
        self.upstream_idle_s = upstream_idle_s
        # client_gone: requests whose client left before the reply's end (their upstream connection closed);
        # upstream_timeouts: no byte for upstream_idle_s; upstream_dropped: the upstream broke a reply off;
        # bad_requests: requests the server could not parse; header_timeouts: headers not sent in time;
        # body_timeouts: a body that stalled for body_idle_s between two pieces.
        self.counts = {
            "requests": 0,
            "upstream_unreachable": 0,
            "client_gone": 0,
            "upstream_timeouts": 0,
            "upstream_dropped": 0,
            "bad_requests": 0,
            "header_timeouts": 0,
            "body_timeouts": 0,
            "submit_failures": 0,
            "label_failures": 0,
        }
        self.guards: dict = {}  # transport -> HeaderGuard (proxy_guard)
        self.session: aiohttp.ClientSession | None = None

    def count(self, name: str) -> None:
        self.counts[name] += 1

    def header_timeout(self, peer: str) -> None:
        self.counts["header_timeouts"] += 1
        log.warning("specdec proxy: %s did not send its request headers in time; answered 408 and closed", peer)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[guard_middleware(self.guards)])
        app.router.add_get(STATS_PATH, self.stats)
        app.router.add_route("*", "/{tail:.*}", self.forward)
        app.on_startup.append(self._open)
        app.on_cleanup.append(self._close)
        return app

    async def _open(self, app) -> None:
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=self.upstream_idle_s),
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
        )

    async def _close(self, app) -> None:
        if self.session is not None:
            await self.session.close()

    async def stats(self, request: web.Request) -> web.Response:
        rec = self.recorder.stats() if self.recorder is not None else None
        return web.json_response({"proxy": self.counts, "recording": rec})

    def _exchange(self, request: web.Request) -> Exchange | None:
        rec = self.recorder
        if rec is None or not is_recorded_route(request.method, request.path):
            return None
        try:
            return Exchange(
                prompt_id=rec.new_prompt_id(),
                path=request.path,
                arrival_ms=rec.arrival_ms(),
                wall_ns=time.time_ns(),
                body=b"",
                category=request.headers.get(CATEGORY_HEADER),
                session=request.headers.get(SESSION_HEADER),
            )
        except Exception:  # never let recording touch the request
            self.counts["submit_failures"] += 1
            return None

    def _label(self, request: web.Request, body: bytes) -> str | None:
        """The request's live category when the sidecar asked for them (a book is
        set) and the route is a chat or completions one; else None."""
        if self.book is None or not is_recorded_route(request.method, request.path):
            return None
        rules = self.recorder.maker.rules if self.recorder is not None else CategoryRules()
        return request_category(rules, request.path, request.headers.get(CATEGORY_HEADER), body)

    def _note(self, label: str, first: bytes, headers) -> None:
        """Note (reply id, category) from the reply's first bytes (plain bodies only)."""
        try:
            if headers.get("Content-Encoding", "identity").lower() in ("", "identity"):
                rid = reply_id(first)
                if rid is not None and self.book is not None:  # a label comes only with a book (_label)
                    self.book.note(rid, label)
        except Exception:  # noqa: BLE001 - never let the label touch the response
            self.counts["label_failures"] += 1

    def _broken(self, request: web.Request, exc: BaseException, sent: int) -> None:
        """The upstream stopped mid-reply: count it, say it in one line, and close the
        client's connection so that the reply cannot look whole."""
        if isinstance(exc, asyncio.TimeoutError):
            self.counts["upstream_timeouts"] += 1
            why = f"sent nothing for {self.upstream_idle_s:g} s"
        else:
            self.counts["upstream_dropped"] += 1
            why = f"broke the reply off ({type(exc).__name__}: {str(exc)[:200]})"
        log.warning(
            "specdec proxy: upstream %s on %s %s after %d bytes; the client's stream was closed",
            why,
            request.method,
            request.path,
            sent,
        )
        if request.transport is not None:
            request.transport.close()

    async def _read_body(self, request: web.Request) -> bytes | None:
        """The request's body, each piece within ``body_idle_s`` of the last (a
        slow-body client cannot hold a handler and its connection for ever);
        None after a stall, counted and said in one line. Bodies over
        ``MAX_BODY_BYTES`` (the app's ``client_max_size``) get a 413, as from ``request.read``."""
        parts: list[bytes] = []
        size = 0
        while True:
            try:
                chunk = await asyncio.wait_for(request.content.readany(), self.body_idle_s)
            except TimeoutError:
                self.counts["body_timeouts"] += 1
                log.warning(
                    "specdec proxy: %s sent no body bytes for %g s after %d bytes (%s %s); answered 408 and closed",
                    request.remote,
                    self.body_idle_s,
                    size,
                    request.method,
                    request.path,
                )
                return None
            if not chunk:
                return b"".join(parts)
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise web.HTTPRequestEntityTooLarge(max_size=MAX_BODY_BYTES, actual_size=size)
            parts.append(chunk)

    async def forward(self, request: web.Request) -> web.StreamResponse:
        self.counts["requests"] += 1
        ex = self._exchange(request)
        upstream: aiohttp.ClientResponse | None = None
        done = False
        try:
            body = await self._read_body(request)
            if body is None:  # answered, then closed: aiohttp would otherwise linger to drain the body
                resp: web.StreamResponse = web.Response(
                    status=408, text="request body not sent in time\n", headers={"Connection": "close"}
                )
                await resp.prepare(request)
                await resp.write_eof()
                if request.transport is not None:
                    request.transport.close()
                return resp
            if ex is not None:
                ex.body = body
            label = self._label(request, body)
            url = URL(self.base + request.raw_path, encoded=True)
            assert self.session is not None  # start() opened it before the app serves
            try:
                upstream = await self.session.request(
                    request.method,
                    url,
                    headers=request_headers(request.headers),
                    data=body or None,
                    allow_redirects=False,
                )
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                counter, reply = no_reply(exc, self.upstream_idle_s)
                self.counts[counter] += 1
                return reply
            resp, done = await self._relay(request, upstream, ex, label)
            return resp
        except asyncio.CancelledError:  # the client left (aiohttp cancels the handler): close upstream too
            self.counts["client_gone"] += 1
            raise
        finally:
            if upstream is not None:
                upstream.release() if done else upstream.close()
            if ex is not None:
                try:
                    self.recorder.submit(ex)
                except Exception:
                    self.counts["submit_failures"] += 1

    async def _relay(
        self, request: web.Request, upstream: aiohttp.ClientResponse, ex: Exchange | None, label: str | None
    ) -> tuple[web.StreamResponse, bool]:
        """Send the upstream's reply back chunk by chunk; (response, whether it ended whole)."""
        resp = web.StreamResponse(
            status=upstream.status, reason=upstream.reason, headers=response_headers(upstream.headers)
        )
        if ex is not None:
            ex.status = upstream.status
            ex.content_type = upstream.headers.get("Content-Type", "")
            ex.content_encoding = upstream.headers.get("Content-Encoding", "")
        chunks = ex.chunks if ex is not None else None
        sent = 0
        try:
            await resp.prepare(request)
            while True:
                try:
                    chunk = await upstream.content.readany()
                except (TimeoutError, aiohttp.ClientError) as exc:
                    self._broken(request, exc, sent)
                    return resp, False
                if not chunk:
                    break
                if chunks is not None:
                    chunks.append(chunk)
                if label is not None:
                    self._note(label, chunk, upstream.headers)
                    label = None
                await resp.write(chunk)
                sent += len(chunk)
            await resp.write_eof()
        except (ConnectionResetError, aiohttp.ClientConnectionResetError):
            self.counts["client_gone"] += 1  # the client left while we wrote: the upstream is closed too
            return resp, False
        if ex is not None:
            ex.complete = True
        return resp, True


@dataclass
class Running:
    """A started proxy (``start_proxy``): its URL and how to stop it."""

    url: str
    runner: web.AppRunner
    recorder: Recorder  # start_proxy's, started

    async def stop(self) -> None:
        await self.runner.cleanup()
        if self.recorder is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.recorder.close)


def make_recorder(settings: ProxySettings) -> Recorder:
    rules = load_rules(settings.rules) if settings.rules is not None else CategoryRules()
    redactor = None
    if settings.content == "hash":
        redactor = Redactor.from_tokenizer_file(settings.tokenizer) if settings.tokenizer else Redactor()
    return Recorder(settings.out_dir, RowMaker(rules, redactor), settings.flush_s)


async def start_proxy(
    settings: ProxySettings, recorder: Recorder | None = None, book: CategoryBook | None = None
) -> Running:
    """Start the proxy on the running loop (the recorder's thread too); with
    ``book``, each request's category is noted there by reply id (the sidecar's
    per-category gauges)."""
    endpoint = parse_endpoint(settings.upstream, option="--upstream")
    if endpoint.query or endpoint.user or endpoint.password:
        raise SpecdecError(
            "--upstream: give the URL without credentials or query; the clients' own "
            "Authorization header passes through"
        )
    recorder = (recorder or make_recorder(settings)).start()
    proxy = Proxy(
        endpoint.base, recorder, book, upstream_idle_s=settings.upstream_idle_s, body_idle_s=settings.header_timeout_s
    )
    # handler_cancellation: a client that leaves cancels its handler, which closes the upstream connection
    runner = web.AppRunner(
        proxy.app(),
        access_log=None,
        handle_signals=False,
        shutdown_timeout=SHUTDOWN_GRACE_S,
        handler_cancellation=True,
        keepalive_timeout=KEEPALIVE_S,
        logger=OneLineLog(lambda: proxy.count("bad_requests")),
    )
    await runner.setup()
    try:
        await GuardedSite(
            runner, settings.host, settings.port, settings.header_timeout_s, proxy.guards, proxy.header_timeout
        ).start()
    except OSError as exc:
        await runner.cleanup()
        recorder.close()
        raise SpecdecError(
            f"--listen {settings.host}:{settings.port}: cannot listen there ({exc.strerror or exc})"
        ) from None
    host, port = runner.addresses[0][:2]
    host = f"[{host}]" if ":" in host else host
    return Running(f"http://{host}:{port}", runner, recorder)


class RowsLost(SpecdecError):
    """A capture process (the proxy, the sidecar) stopped with rows that never
    reached a file; the message says how many (exit 1 in the CLI)."""


def exposure(settings: ProxySettings) -> str:
    """What a proxy listening beyond loopback exposes (``specdec.listen.warn_if_exposed``)."""
    return (
        f"an unauthenticated route to the upstream {settings.upstream} (every path, every method), "
        f"and {STATS_PATH} shows the output folder {settings.out_dir}"
    )


def run_proxy(settings: ProxySettings, announce=print) -> dict:
    """Serve until SIGINT or SIGTERM, then write every recorded row and stop;
    return the recorder's last counters. Raise ``RowsLost`` (exit 1 in the CLI)
    when rows could not be written (a full disk at the end, say)."""

    async def main() -> dict:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        running = await start_proxy(settings)
        announce(
            f"specdec proxy listening on {running.url} -> {settings.upstream} "
            f"(recording into {settings.out_dir}, content: {settings.content}; stats: {running.url}{STATS_PATH})"
        )
        try:
            await stop.wait()
        finally:
            await running.stop()
            stats = running.recorder.stats()
            announce(
                f"specdec proxy stopped: {stats['rows_written']} rows written, "
                f"{stats['failures_total']} recording failures, {stats['rows_pending']} rows not written"
            )
        return stats

    stats = asyncio.run(main())
    lost = stats["rows_pending"] + stats["rows_dropped"]
    if lost:
        raise RowsLost(
            f"{lost} recorded rows not written to {settings.out_dir} and lost "
            f"({stats['rows_pending']} still pending at the stop, {stats['rows_dropped']} dropped "
            f"over the pending limit); last error: {stats['last_error']}"
        )
    return stats
