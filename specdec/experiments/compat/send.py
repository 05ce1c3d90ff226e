"""Send one probe request to an OpenAI-compatible chat endpoint and keep the
whole reply: every choice's text, tool calls, finish reason and logprobs,
streamed or not (``replies``). A refusal or a broken reply is data
(``Reply.error``, the server's body verbatim; ``Reply.error_type`` for a
failure the server did not choose), never an exception, as in the replay
client.

The replay's own transport (``specdec.replay.http``) keeps only what timing
needs (text, chunk times); a compatibility probe needs the structured parts
of the reply (tool calls, every choice of ``n > 1``, logprobs), so it reads
the JSON here, with aiohttp, one request at a time. It is bounded as the
replay's requests are, with the replay's limits and failure names
(``specdec.replay.http.client``): the request timeout (the longest wait for
the next byte, aiohttp's ``sock_read``), a wall limit per request
(``ClientSettings.wall_limit_s``: ``request_wall_timeout``), and a length
limit: ``replies.MAX_REPLY_BYTES`` of body, or a stream's content chunks past
``stream_limit(max_tokens)`` per choice (``overlong_reply``). Every other
read (``/v1/models``, ``/tokenize``) has the same bounds and answers None
on any failure.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp

from specdec.experiments.compat.replies import (
    MAX_ERROR_CHARS,
    MAX_REPLY_BYTES,
    Choice,
    Malformed,
    Reply,
    StreamReader,
    loads,
    read_plain,
)
from specdec.http.urls import ClientSettings, Endpoint, request_headers
from specdec.replay.http.client import stream_limit

__all__ = ["MAX_ERROR_CHARS", "Choice", "NoReply", "Reply", "answers", "get_json", "post_json", "send"]

#: The wall limit of a request without max_tokens (``ClientSettings.wall_limit_s`` gives none).
NO_MAX_TOKENS = 1024


class _Overlong(Exception):
    """The reply went past its length limit."""


def wall_limit_s(settings: ClientSettings, body: dict[str, Any] | None) -> float:
    """The replay's wall limit for ``body`` (the request timeout plus a second per requested token)."""
    n = (body or {}).get("max_tokens")
    tokens = n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else NO_MAX_TOKENS
    limit = settings.wall_limit_s(tokens)
    return limit if limit is not None else settings.request_timeout_s


async def send(
    session: aiohttp.ClientSession,
    ep: Endpoint,
    body: dict[str, Any],
    settings: ClientSettings,
    request_id: str,
) -> Reply:
    """POST ``body`` to ``/v1/chat/completions`` and read the reply whole, within its bounds."""
    started = time.perf_counter()
    wall = wall_limit_s(settings, body)
    status: int | None = None
    deadline = None
    try:
        async with asyncio.timeout(wall) as deadline:
            async with session.post(
                ep.url("/v1/chat/completions"),
                params=ep.params or None,
                json=body,
                headers=request_headers(settings, ep, request_id),
                timeout=settings.timeout(),
            ) as resp:
                status = resp.status
                if resp.status >= 300:
                    text = (await resp.content.read(4 * MAX_ERROR_CHARS)).decode(errors="replace")
                    return Reply(resp.status, text[:MAX_ERROR_CHARS] or f"HTTP {resp.status} (empty body)")
                if body.get("stream"):
                    reply = await _read_stream(resp, body, started)
                else:
                    reply = read_plain(resp.status, (await _read_capped(resp)).decode(errors="replace"))
    except Malformed as exc:
        reply = Reply(status, f"malformed reply: {exc}"[:MAX_ERROR_CHARS], error_type="malformed_reply")
    except _Overlong as exc:
        reply = Reply(status, str(exc), error_type="overlong_reply")
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        kind = _kind(exc, status, deadline is not None and deadline.expired())
        why = f"the reply took longer than its wall limit of {wall:g} s" if kind == "request_wall_timeout" else ""
        msg = why or f"{type(exc).__name__}: {exc}"
        return Reply(
            status if kind != "connect_error" else None, msg[:MAX_ERROR_CHARS], e2e_ms=_ms(started), error_type=kind
        )
    reply.e2e_ms = _ms(started)
    return reply


def _kind(exc: BaseException, status: int | None, wall_expired: bool) -> str:
    """The failure's type (``replies.FAULTS``), named as the replay names it."""
    if wall_expired:
        return "request_wall_timeout"
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return "connect_timeout"
    if isinstance(exc, (aiohttp.SocketTimeoutError, TimeoutError)):
        return "request_timeout"
    return "connect_error" if status is None else "stream_truncated"


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0


async def _read_capped(resp: aiohttp.ClientResponse) -> bytes:
    buf = bytearray()
    async for block in resp.content.iter_any():
        buf += block
        if len(buf) > MAX_REPLY_BYTES:
            raise _Overlong(f"the reply ran past {MAX_REPLY_BYTES} bytes; the client stopped reading")
    return bytes(buf)


async def _read_stream(resp: aiohttp.ClientResponse, body: dict[str, Any], started: float) -> Reply:
    """Assemble choices from SSE deltas as they arrive; a stream without ``[DONE]`` or with an
    error event is an error; one past its length limit is ``overlong_reply``. The reply keeps each
    read's time that brought deltas (``Reply.arrivals_ms``, ``stall``)."""
    n, max_tokens = body.get("n"), body.get("max_tokens")
    n = n if isinstance(n, int) and n > 0 else 1
    limit = n * stream_limit(max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else NO_MAX_TOKENS)
    reader = StreamReader()
    size = 0
    arrivals: list[float] = []
    async for block in resp.content.iter_any():
        seen = reader.chunks
        size += len(block)
        if size > MAX_REPLY_BYTES:
            raise _Overlong(f"the stream ran past {MAX_REPLY_BYTES} bytes; the client stopped reading")
        error = reader.feed(block)
        if error is not None:
            return Reply(resp.status, error, error_type="stream_error")
        if reader.chunks > limit:
            raise _Overlong(
                f"the stream went on past {limit} content chunks (max_tokens plus a margin, per choice); "
                "the client stopped reading"
            )
        if reader.chunks > seen:
            arrivals.append(_ms(started))
        if reader.done:
            reply = reader.reply(resp.status)
            reply.arrivals_ms = arrivals
            return reply
    return Reply(resp.status, "stream ended without data: [DONE]", error_type="stream_truncated")


async def post_json(
    session: aiohttp.ClientSession, ep: Endpoint, path: str, body: dict[str, Any], settings: ClientSettings
) -> Any | None:
    """POST a small JSON body to another endpoint (``/tokenize``); None on any failure."""
    return await _json_reply(session, "POST", ep, path, settings, body)


async def get_json(session: aiohttp.ClientSession, ep: Endpoint, path: str, settings: ClientSettings) -> Any | None:
    """GET a JSON document (``/v1/models``); None on any failure."""
    return await _json_reply(session, "GET", ep, path, settings, None)


class NoReply(Exception):
    """No HTTP reply at all: refused, reset, or timed out."""


async def answers(session: aiohttp.ClientSession, ep: Endpoint, path: str, settings: ClientSettings) -> None:
    """GET ``path`` within the bounds of ``_json_reply``; ``NoReply`` (why) when no HTTP reply came,
    whatever its status or body."""
    try:
        async with asyncio.timeout(settings.connect_timeout_s + settings.request_timeout_s):
            async with session.get(
                ep.url(path),
                params=ep.params or None,
                headers=request_headers(settings, ep),
                timeout=settings.timeout(),
            ):
                return
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise NoReply(f"{type(exc).__name__}: {exc}"[:300] if str(exc) else type(exc).__name__) from None


async def _json_reply(
    session: aiohttp.ClientSession,
    method: str,
    ep: Endpoint,
    path: str,
    settings: ClientSettings,
    body: dict[str, Any] | None,
) -> Any | None:
    """The JSON of a 200 reply to ``method path`` (with ``body`` as JSON, if any), within the
    connect and request timeouts together (a small document: no per-token allowance); None on any failure."""
    try:
        async with asyncio.timeout(settings.connect_timeout_s + settings.request_timeout_s):
            async with session.request(
                method,
                ep.url(path),
                params=ep.params or None,
                json=body,
                headers=request_headers(settings, ep),
                timeout=settings.timeout(),
            ) as resp:
                if resp.status != 200:
                    return None
                return loads((await _read_capped(resp)).decode(errors="replace"), path)
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError, _Overlong):
        return None


def fresh_connections() -> aiohttp.TCPConnector:
    """A connection per request, closed after it (no keep-alive). aiohttp keeps an idle connection 15 s,
    uvicorn (vLLM's API server) 5 s: a probe that reuses a connection its arm left idle while the
    other arm served can meet the server closing it at that moment, a ``ServerDisconnectedError``
    that is the client's timing, not the server's (seen once on the embedded vLLM pair,
    2026-12-06: a multi-turn cell 'broken' by it). A new loopback connection costs well under a
    millisecond, in both arms alike."""
    return aiohttp.TCPConnector(force_close=True)
