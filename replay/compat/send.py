"""Send one probe request to an OpenAI-compatible chat endpoint and keep the
whole reply: every choice's text, tool calls, finish reason and logprobs,
streamed or not. A refusal or a broken reply is data (``Reply.error``, the
server's body verbatim), never an exception, as in the replay client.

The replay's own transport (``specdec.replay.http``) keeps only what timing
needs (text, chunk times); a compatibility probe needs the structured parts
of the reply (tool calls, every choice of ``n > 1``, logprobs), so it reads
the JSON here, with aiohttp, one request at a time.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from specdec.engines.urls import ClientSettings, Endpoint, request_headers

#: Longest error body kept verbatim, characters (an HTML error page can be large).
MAX_ERROR_CHARS = 2000


@dataclass
class Choice:
    """One choice of a reply, assembled from a plain reply or from stream deltas."""

    text: str = ""
    tool_calls: list[dict[str, str]] = field(default_factory=list)  # {"name", "arguments"} (arguments: the raw text)
    finish_reason: str | None = None
    logprobs: list[dict[str, Any]] | None = None  # logprobs.content entries, None when the reply has none


@dataclass
class Reply:
    """What a server answered to one probe request."""

    status: int | None
    error: str | None  # verbatim error body (or the client's exception) when not accepted
    choices: list[Choice] = field(default_factory=list)
    completion_tokens: int | None = None
    e2e_ms: float | None = None

    @property
    def accepted(self) -> bool:
        return self.error is None

    def normalized(self) -> str:
        """The output as one canonical JSON text: every choice's text and tool calls,
        in order (what greedy identity and the digest compare)."""
        return json.dumps(
            [{"text": c.text, "tool_calls": c.tool_calls} for c in self.choices], sort_keys=True, ensure_ascii=False
        )

    @property
    def truncated(self) -> bool:
        """Some choice stopped at max_tokens."""
        return any(c.finish_reason == "length" for c in self.choices)


async def send(
    session: aiohttp.ClientSession,
    ep: Endpoint,
    body: dict[str, Any],
    settings: ClientSettings,
    request_id: str,
) -> Reply:
    """POST ``body`` to ``/v1/chat/completions`` and read the reply whole."""
    started = time.perf_counter()
    try:
        async with session.post(
            ep.url("/v1/chat/completions"),
            params=ep.params or None,
            json=body,
            headers=request_headers(settings, ep, request_id),
            timeout=settings.timeout(),
        ) as resp:
            if resp.status >= 300:
                text = await resp.text(errors="replace")
                return Reply(resp.status, text[:MAX_ERROR_CHARS] or f"HTTP {resp.status} (empty body)")
            if body.get("stream"):
                reply = await _read_stream(resp)
            else:
                reply = _read_plain(resp.status, await resp.text(errors="replace"))
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        return Reply(None, f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS], e2e_ms=_ms(started))
    reply.e2e_ms = _ms(started)
    return reply


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0


def _read_plain(status: int, text: str) -> Reply:
    try:
        data = json.loads(text)
        choices = [_plain_choice(c) for c in data["choices"]]
    except (ValueError, KeyError, TypeError, AttributeError):
        return Reply(status, f"unreadable reply: {text[:MAX_ERROR_CHARS]}")
    return Reply(status, None, choices, _completion_tokens(data))


def _plain_choice(c: dict[str, Any]) -> Choice:
    msg = c.get("message") or {}
    calls = [
        {
            "name": (t.get("function") or {}).get("name") or "",
            "arguments": (t.get("function") or {}).get("arguments") or "",
        }
        for t in msg.get("tool_calls") or []
    ]
    lp = c.get("logprobs")
    return Choice(msg.get("content") or "", calls, c.get("finish_reason"), (lp or {}).get("content") if lp else None)


def _completion_tokens(data: dict[str, Any]) -> int | None:
    usage = data.get("usage") or {}
    value = usage.get("completion_tokens")
    return value if isinstance(value, int) else None


async def _read_stream(resp: aiohttp.ClientResponse) -> Reply:
    """Assemble choices from SSE deltas; a stream without ``[DONE]`` or with an error event is an error."""
    choices: dict[int, Choice] = {}
    calls: dict[tuple[int, int], dict[str, str]] = {}
    tokens: int | None = None
    done = False
    raw = (await resp.read()).decode(errors="replace")
    for line in raw.splitlines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            done = True
            break
        try:
            event = json.loads(payload)
        except ValueError:
            return Reply(resp.status, f"unreadable stream event: {payload[:MAX_ERROR_CHARS]}")
        if "error" in event:
            return Reply(resp.status, json.dumps(event["error"])[:MAX_ERROR_CHARS])
        tokens = _completion_tokens(event) or tokens
        for c in event.get("choices") or []:
            ch = choices.setdefault(int(c.get("index", 0)), Choice())
            delta = c.get("delta") or {}
            ch.text += delta.get("content") or ""
            for t in delta.get("tool_calls") or []:
                call = calls.setdefault((int(c.get("index", 0)), int(t.get("index", 0))), {"name": "", "arguments": ""})
                fn = t.get("function") or {}
                call["name"] += fn.get("name") or ""
                call["arguments"] += fn.get("arguments") or ""
            if c.get("finish_reason"):
                ch.finish_reason = c["finish_reason"]
            lp = c.get("logprobs")
            if lp and lp.get("content"):
                ch.logprobs = (ch.logprobs or []) + list(lp["content"])
    if not done:
        return Reply(resp.status, "stream ended without data: [DONE]")
    for (ci, _ti), call in sorted(calls.items()):
        choices.setdefault(ci, Choice()).tool_calls.append(call)
    return Reply(resp.status, None, [choices[i] for i in sorted(choices)], tokens)


async def post_json(
    session: aiohttp.ClientSession, ep: Endpoint, path: str, body: dict[str, Any], settings: ClientSettings
) -> Any | None:
    """POST a small JSON body to another endpoint (``/tokenize``); None on any failure."""
    return await _json_reply(session, "POST", ep, path, settings, body)


async def get_json(session: aiohttp.ClientSession, ep: Endpoint, path: str, settings: ClientSettings) -> Any | None:
    """GET a JSON document (``/v1/models``); None on any failure."""
    return await _json_reply(session, "GET", ep, path, settings, None)


async def _json_reply(
    session: aiohttp.ClientSession,
    method: str,
    ep: Endpoint,
    path: str,
    settings: ClientSettings,
    body: dict[str, Any] | None,
) -> Any | None:
    """The JSON of a 200 reply to ``method path`` (with ``body`` as JSON, if any); None on any failure."""
    try:
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
            return await resp.json(content_type=None)
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
        return None
