"""One async streaming chat request against an OpenAI-compatible server.

A failed request becomes data (``success=False`` with a typed ``error_type``
from ``ERROR_TYPES`` and, when a reply arrived, its ``http_status``), never an
exception out of the replay loop. A request succeeds only if a 2xx
server-sent-event stream ends with ``[DONE]`` after a usage block and carries
no error event: a stream cut off early, a plain JSON reply or a missing usage
block would otherwise be counted as a complete, comparable output.

The timed requests also ask for per-chunk usage (vLLM's
``stream_options.continuous_usage_stats``): each content chunk then says how
many output tokens the server had streamed so far (``chunk_tokens``), so the
time to a given output position can be read off the stream. The final usage
block is read as before, so a server that ignores the option still succeeds;
its ``chunk_tokens`` is then empty (unknown), never partly filled.

Two transports carry the request and feed the same event-stream parser
(``sse.SseParser``), so they give the same row: specdec's own HTTP/1.1
connections (``http.stream.StreamPool``; what the replay streams over, since
aiohttp alone cost more than half of vLLM's whole benchmark client) and an
``aiohttp.ClientSession`` (what callers that already hold one pass, e.g. the
stability faults). The request timeout (the longest wait for the next byte)
is one watchdog timer per request on either, pushed back only when it fires
(aiohttp's ``sock_read`` covers the wait for the reply's headers there),
because re-arming a timer on every arrival is a real per-token cost at
thousands of events a second.

Every request is also bounded without trusting the server: the parser stops
reading once the stream holds more content chunks (or running tokens) than
``max_tokens`` plus a margin (``overlong_stream``), and a wall limit per
request (``ClientSettings.wall_limit_s``) ends a reply that trickles forever
(``request_wall_timeout``). A request cut off by Ctrl-C or SIGTERM is a row
too (``interrupted``): the caller passes ``result`` and records it.

Latencies use the monotonic clock; the send time is also stamped on the wall
clock for joining with engine traces. The API key is sent as a bearer token
and is never stored on the result; error texts are redacted of credentials.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

from specdec.http.urls import ClientSettings, Endpoint, as_endpoint, redact_text, request_headers
from specdec.replay.http.sse import SseParser
from specdec.replay.http.stream import ConnectFailed, ConnectTimedOut, ReadTimedOut, StreamBroken, StreamPool
from specdec.schemas.records import TrafficRow

#: Every failure class a request can end in, with its meaning (shown in docs and reports).
ERROR_TYPES: dict[str, str] = {
    "http_status": "the server answered with a non-2xx HTTP status (see http_status)",
    "connect_error": "no connection: refused, reset, or the host is unknown",
    "connect_timeout": "no connection within the connect timeout",
    "request_timeout": "the server sent nothing for longer than the request timeout",
    "not_streamed": "a 2xx reply that is not a server-sent event stream (e.g. plain JSON)",
    "stream_error": "the stream carried an error event",
    "bad_chunk": "a stream event that is not valid JSON",
    "stream_truncated": "the stream ended before [DONE]",
    "no_usage": "the stream ended without a usage block, so token counts are unknown",
    "overlong_stream": "the stream went on past max_tokens plus a margin (stream_limit): the server ignores "
    "max_tokens; the client stopped reading",
    "request_wall_timeout": "the request took longer than its wall limit (ClientSettings.wall_limit_s), "
    "although bytes kept arriving",
    "interrupted": "the replay was stopped (Ctrl-C, SIGTERM) while the request was in flight",
    "client_error": "any other failure on the client side (the message says which)",
}

#: Content chunks (or running completion tokens) a stream may carry past its
#: max_tokens before the client stops reading: the larger of this and half of
#: max_tokens (a server may split a token's text over chunks; none sends
#: half as many again).
STREAM_MARGIN = 16


def stream_limit(max_tokens: int) -> int:
    """Most content chunks (and running tokens) accepted for a request of ``max_tokens``."""
    return max_tokens + max(STREAM_MARGIN, max_tokens // 2)


CHAT_PATH = "/v1/chat/completions"
_BODY_LIMIT = 500


@dataclass
class StreamResult:
    request_id: str
    wall_send_ns: int
    success: bool = False
    error_type: str | None = None
    http_status: int | None = None
    error_message: str | None = None
    ttft_ms: float | None = None
    e2e_ms: float | None = None
    chunk_offsets_ms: list[float] = field(default_factory=list)
    # cumulative completion tokens per content chunk, aligned with chunk_offsets_ms;
    # empty when any content chunk lacked a usable count (per-chunk usage unknown)
    chunk_tokens: list[int] = field(default_factory=list)
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    output_text: str = ""
    finish_reason: str | None = None
    spec_num_steps: int | None = None
    spec_num_draft_tokens: int | None = None
    spec_num_accepted_tokens: int | None = None

    def fail(self, error_type: str, message: str) -> StreamResult:
        self.success = False
        self.error_type = error_type
        self.error_message = message[:_BODY_LIMIT] or error_type
        return self


def build_payload(model: str, row: TrafficRow, *, per_chunk_usage: bool = False) -> dict:
    """The chat request for row: its messages (or prompt) and the sampling
    settings it was recorded with, forced to max_tokens. ``per_chunk_usage`` also asks for the running
    completion-token count in every chunk (vLLM's continuous_usage_stats; the
    timed requests set it, the lossless and sampling passes, which build
    on this body, do not need it)."""
    stream_options = {"include_usage": True}
    if per_chunk_usage:
        stream_options["continuous_usage_stats"] = True
    payload = {
        "model": model,
        "messages": row.chat(),
        "max_tokens": row.max_tokens,
        "temperature": row.temperature,
        "ignore_eos": True,  # vLLM extension: forces the fixed output length
        "stream": True,
        "stream_options": stream_options,
    }
    # the row's other settings as the client sent them; stop strings are not
    # sent (they would end a request before its recorded length)
    for name in ("top_p", "top_k", "seed"):
        if getattr(row, name) is not None:
            payload[name] = getattr(row, name)
    for name in ("response_format", "tools"):
        if getattr(row, name) is not None:
            payload[name] = json.loads(getattr(row, name))
    return payload


async def stream_chat(
    session: aiohttp.ClientSession | StreamPool,
    base_url: str | Endpoint,
    model: str,
    row: TrafficRow,
    request_id: str,
    settings: ClientSettings | None = None,
    result: StreamResult | None = None,
) -> StreamResult:
    """One timed request: the row's payload with per-chunk usage."""
    return await stream_payload(
        session, base_url, build_payload(model, row, per_chunk_usage=True), request_id, settings, result=result
    )


async def send_recorded(
    session, ep: Endpoint, model: str, row: TrafficRow, rid: str, settings: ClientSettings | None, results: list | None
) -> StreamResult:
    """``stream_chat``, and when the request is cut off in flight (Ctrl-C,
    SIGTERM, a stopped run) its row, failed ``interrupted``, appended to
    ``results`` before the cancellation goes on (closed and open loop)."""
    res = StreamResult(request_id=rid, wall_send_ns=time.time_ns())
    try:
        return await stream_chat(session, ep, model, row, rid, settings, result=res)
    except BaseException:
        if results is not None:
            results.append((row, res))
        raise


async def stream_payload(
    session: aiohttp.ClientSession | StreamPool,
    base_url: str | Endpoint,
    payload: dict,
    request_id: str,
    settings: ClientSettings | None = None,
    on_chunk: Callable[[dict], None] | None = None,
    result: StreamResult | None = None,
) -> StreamResult:
    """POST any chat-completions payload as a stream and classify the outcome.

    ``session`` is the transport: a ``StreamPool`` (``http.stream``, the
    replay's own, lean) or an ``aiohttp.ClientSession``; both feed the same
    event-stream parser (``sse.SseParser``) and give the same row.
    ``on_chunk`` sees every stream event that parsed as a JSON object and is
    not an error event, in order (e.g. to collect logprobs); whatever it
    raises becomes a ``client_error`` row.

    ``result``: a ``StreamResult`` to fill (made by the caller, who then
    still holds it when the request is cancelled: it ends ``interrupted``
    and the caller can record it before the cancellation goes on)."""
    settings = settings or ClientSettings()
    ep = as_endpoint(base_url)
    res = result if result is not None else StreamResult(request_id=request_id, wall_send_ns=time.time_ns())
    t0 = time.perf_counter_ns()
    text_parts: list[str] = []
    max_tokens = payload.get("max_tokens")
    max_tokens = max_tokens if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) else None
    parser = SseParser(res, text_parts, t0, on_chunk, None if max_tokens is None else stream_limit(max_tokens))
    wall_s = settings.wall_limit_s(max_tokens)
    deadline = None
    try:
        async with asyncio.timeout(wall_s) as deadline:
            if isinstance(session, StreamPool):
                await _via_pool(session, ep, payload, request_id, settings, res, parser)
            else:
                await _via_aiohttp(session, ep, payload, request_id, settings, res, parser)
        if res.error_type is None:
            res.e2e_ms = (time.perf_counter_ns() - t0) / 1e6
            res.success = True
    except (asyncio.CancelledError, KeyboardInterrupt):
        # someone else's cancellation (Ctrl-C, SIGTERM, a stopped run; the watchdogs' are settled
        # inside): the row says so, for a caller that passed ``result`` to record it
        if res.error_type is None:
            res.fail(
                "interrupted",
                "the replay was stopped while this request was in flight "
                f"({len(res.chunk_offsets_ms)} content chunk(s) received)",
            )
        raise
    except Exception as exc:  # a row, not a crash
        if deadline is not None and deadline.expired():
            res.fail(
                "request_wall_timeout",
                f"the request took longer than its wall limit of {wall_s:g} s "
                f"(--request-timeout plus {settings.wall_s_per_token:g} s per "
                f"requested token); {len(res.chunk_offsets_ms)} content chunk(s) "
                "had arrived",
            )
        else:
            classify_failure(res, exc, settings)
    finally:
        parser.finish()
        res.output_text = "".join(text_parts)
        res.error_message = redact_text(
            res.error_message, ep.secrets + ((settings.api_key,) if settings.api_key else ())
        )
    return res


def classify_failure(res: StreamResult, exc: Exception, settings: ClientSettings) -> None:
    """Type a transport's failure on the row (also the passes' requests that are not streamed)."""
    if isinstance(exc, (aiohttp.ConnectionTimeoutError, ConnectTimedOut)):
        res.fail("connect_timeout", f"no connection within {settings.connect_timeout_s:g} s ({exc})")
    elif isinstance(exc, (aiohttp.SocketTimeoutError, asyncio.TimeoutError, ReadTimedOut)):
        res.fail("request_timeout", f"nothing received for {settings.request_timeout_s:g} s ({type(exc).__name__})")
    elif isinstance(exc, (aiohttp.ClientPayloadError, StreamBroken)):
        if res.http_status is None:
            res.fail("connect_error", f"the server closed the connection without a reply ({exc})")
        else:
            res.fail("stream_truncated", f"the stream broke off ({exc})")
    elif isinstance(exc, (aiohttp.ClientConnectionError, ConnectFailed, OSError)):
        res.fail("connect_error" if res.http_status is None else "stream_truncated", f"{type(exc).__name__}: {exc}")
    else:  # anything else
        res.fail("client_error", f"{type(exc).__name__}: {exc}")


async def _refused(res: StreamResult, status: int, ctype: str, read) -> bool:
    """Record the reply's status; True (the row failed, the body's start in its message) when
    it is not a success or not an event stream. ``read(n)``: the transport's body read."""
    res.http_status = status
    if 200 <= status < 300 and ctype.startswith("text/event-stream"):
        return False
    body = (await read(4096)).decode("utf-8", "replace")
    if not 200 <= status < 300:
        res.fail("http_status", f"HTTP {status}: {body}")
    else:
        res.fail("not_streamed", f"expected a text/event-stream reply, got {ctype or 'no Content-Type'}: {body}")
    return True


async def _via_pool(
    pool: StreamPool,
    ep: Endpoint,
    payload: dict,
    request_id: str,
    settings: ClientSettings,
    res: StreamResult,
    parser: SseParser,
) -> None:
    """The request over specdec's own transport: the connection's
    ``data_received`` feeds the parser directly."""
    conn = await pool.post(
        ep.base,
        CHAT_PATH,
        ep.params or None,
        json.dumps(payload).encode(),
        request_headers(settings, ep, request_id),
        settings.connect_timeout_s,
        settings.request_timeout_s,
    )
    try:
        if await _refused(res, conn.status, conn.headers.get("content-type", ""), conn.read_body):
            return
        await conn.stream(parser.feed)
    finally:
        # a reply the parser gave up on (overlong, bad event) may still be streaming: never reuse it
        conn.done_with(reusable=res.error_type is None)


async def _via_aiohttp(
    session: aiohttp.ClientSession,
    ep: Endpoint,
    payload: dict,
    request_id: str,
    settings: ClientSettings,
    res: StreamResult,
    parser: SseParser,
) -> None:
    """The request over aiohttp: each ``readany`` is fed to the parser."""
    idle: _IdleTimeout | None = None
    try:
        async with session.post(
            ep.url(CHAT_PATH),
            params=ep.params or None,
            json=payload,
            headers=request_headers(settings, ep, request_id),
            timeout=settings.timeout(),
        ) as resp:
            if await _refused(res, resp.status, resp.headers.get("Content-Type", ""), resp.content.read):
                return
            idle = _IdleTimeout(settings.request_timeout_s, resp)
            content, clock = resp.content, time.perf_counter_ns
            while True:
                block = await content.readany()
                now = clock()
                idle.last_ns = now
                if parser.feed(block, now):
                    break
    except asyncio.CancelledError:
        if idle is None or not idle.expired or _this_task().cancelling() > 1:
            raise  # someone else's cancellation
    finally:
        if idle is not None:
            idle.close()
            if idle.expired:  # the watchdog cancelled this task: a timeout, not a cancellation
                if _this_task().cancelling():
                    _this_task().uncancel()
                res.fail("request_timeout", f"nothing received for {settings.request_timeout_s:g} s")


def _this_task() -> asyncio.Task:
    """The running task: the request coroutines always run inside one."""
    task = asyncio.current_task()
    assert task is not None
    return task


class _IdleTimeout:
    """Cancels the current task once nothing has arrived for ``timeout_s``
    (``last_ns``, a perf_counter_ns stamp, is moved by the reader at each
    arrival). One timer: when it fires early it is set again for the rest of
    the time, so arrivals cost no timer work. ``expired`` tells its own
    cancellation apart from anyone else's."""

    __slots__ = ("last_ns", "expired", "_limit_ns", "_task", "_loop", "_handle")

    def __init__(self, timeout_s: float, resp: aiohttp.ClientResponse | None = None):
        protocol = getattr(resp and resp.connection, "protocol", None)
        if protocol is not None:  # take over from aiohttp's per-arrival timer
            protocol.read_timeout = None
        self._loop = asyncio.get_running_loop()
        self._task = _this_task()
        self._limit_ns = int(timeout_s * 1e9)
        self.last_ns = time.perf_counter_ns()
        self.expired = False
        self._handle = self._loop.call_later(timeout_s, self._check)

    def _check(self) -> None:
        idle_ns = time.perf_counter_ns() - self.last_ns
        if idle_ns >= self._limit_ns:
            self.expired = True
            self._task.cancel()
        else:
            self._handle = self._loop.call_later((self._limit_ns - idle_ns) / 1e9, self._check)

    def close(self) -> None:
        self._handle.cancel()
