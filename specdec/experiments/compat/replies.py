"""What a server answered to one probe request (``Reply``, its ``Choice``s),
read from a plain chat completion or from its stream's events, without
trusting the server.

A 2xx body that is not a chat completion (not JSON, nested deeper than
``MAX_JSON_DEPTH``, an event that is a JSON array, ``content: 5``, a
``choices`` that is no list, ...) raises ``Malformed`` with the reason and
where; ``send`` turns it into a failed reply of type ``malformed_reply``,
which the cell's classification calls ``broken`` (never a traceback, never a
refusal: the server did not say no). The depth is checked before
``json.loads`` (``specdec.json_limits.scan``): Python's parser recurses once
per nesting level and would end a run in a ``RecursionError``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from specdec.json_limits import scan

#: Deepest nesting of arrays and objects read in a reply (a chat completion needs 6: logprobs' top_logprobs).
MAX_JSON_DEPTH = 64
#: Most bytes of one reply read (a stream's events together); past it the reply fails ``overlong_reply``.
MAX_REPLY_BYTES = 8 * 2**20
#: Longest error body kept verbatim, characters (an HTML error page can be large).
MAX_ERROR_CHARS = 2000

#: The failures of a reply that the server did not choose (no HTTP refusal), by type: the cell is ``broken``.
FAULTS: dict[str, str] = {
    "malformed_reply": "a 2xx reply that is not a chat completion (the reason names the part)",
    "overlong_reply": f"the reply ran past {MAX_REPLY_BYTES} bytes, or its stream past max_tokens plus a margin "
    "(specdec.replay.http.client.stream_limit): the client stopped reading",
    "request_wall_timeout": "the reply took longer than its wall limit (ClientSettings.wall_limit_s)",
    "request_timeout": "the server sent nothing for longer than the request timeout",
    "connect_timeout": "no connection within the connect timeout",
    "connect_error": "no connection, or the connection was closed before the reply",
    "stream_truncated": "the reply broke off, or its stream ended before [DONE]",
    "stream_error": "the stream carried an error event",
}


class Malformed(ValueError):
    """A 2xx reply that is not a chat completion; the message says which part and why."""


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
    error_type: str | None = None  # a key of FAULTS; None: accepted, or refused with an HTTP status
    #: streamed replies: ms from the request's start to each read that brought content or tool-call deltas
    #: (one entry per arrival, however many deltas it held; ``stall``); None when not streamed
    arrivals_ms: list[float] | None = None

    @property
    def accepted(self) -> bool:
        return self.error is None

    @property
    def fault(self) -> bool:
        """Failed without the server saying no (``FAULTS``): a broken reply, not a refusal."""
        return self.error_type is not None

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


def loads(text: str, where: str) -> Any:
    """``text`` as JSON, its depth checked first; ``Malformed`` naming ``where`` when it is not."""
    try:
        scan(text, max_depth=MAX_JSON_DEPTH, max_string=MAX_REPLY_BYTES)
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # JsonLimitError is a ValueError
        raise Malformed(f"{where}: not JSON ({str(exc)[:200]}): {text[:200]}") from None


def _typed(value: Any, kinds: type | tuple[type, ...], where: str, optional: bool = True) -> Any:
    if (value is None and optional) or (isinstance(value, kinds) and not isinstance(value, bool)):
        return value
    raise Malformed(f"{where} is a {type(value).__name__}: {json.dumps(value)[:100]}")


def _obj(value: Any, where: str) -> dict[str, Any]:
    return _typed(value, dict, where) or {}


def _list(value: Any, where: str) -> list[Any]:
    return _typed(value, list, where) or []


def _logprobs(lp: Any, where: str) -> list[dict[str, Any]] | None:
    """A choice's ``logprobs.content`` entries, each an object with a list of top_logprobs (or none)."""
    content = _obj(lp, where).get("content")
    if content is None:
        return None
    entries = _list(content, f"{where}.content")
    for i, e in enumerate(entries):
        _list(_obj(e, f"{where}.content[{i}]").get("top_logprobs"), f"{where}.content[{i}].top_logprobs")
    return entries


def _completion_tokens(data: dict[str, Any]) -> int | None:
    value = _obj(data.get("usage"), "usage").get("completion_tokens")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def read_plain(status: int, text: str) -> Reply:
    """A non-streamed chat completion."""
    data = _obj(loads(text, "the reply"), "the reply")
    choices = []
    for i, c in enumerate(_typed(data.get("choices"), list, "choices", optional=False)):
        where = f"choices[{i}]"
        c = _obj(c, where)
        msg = _obj(c.get("message"), f"{where}.message")
        calls = []
        for j, t in enumerate(_list(msg.get("tool_calls"), f"{where}.message.tool_calls")):
            fn = _obj(_obj(t, f"{where}.message.tool_calls[{j}]").get("function"), "function")
            calls.append(
                {
                    "name": _typed(fn.get("name"), str, f"{where}...function.name") or "",
                    "arguments": _typed(fn.get("arguments"), str, f"{where}...function.arguments") or "",
                }
            )
        choices.append(
            Choice(
                _typed(msg.get("content"), str, f"{where}.message.content") or "",
                calls,
                _typed(c.get("finish_reason"), str, f"{where}.finish_reason"),
                _logprobs(c.get("logprobs"), f"{where}.logprobs"),
            )
        )
    return Reply(status, None, choices, _completion_tokens(data))


class StreamReader:
    """Assembles choices from a stream's ``data:`` lines as they arrive (``feed``); ``done`` once
    ``[DONE]`` came; ``chunks``: the content (and tool call) deltas so far, which the caller bounds."""

    def __init__(self) -> None:
        self.choices: dict[int, Choice] = {}
        self.calls: dict[tuple[int, int], dict[str, str]] = {}
        self.tokens: int | None = None
        self.done = False
        self.chunks = 0
        self._pending = b""

    def feed(self, block: bytes) -> str | None:
        """Read the block's whole lines; an error event's text, else None. Raises ``Malformed``."""
        self._pending += block
        *lines, self._pending = self._pending.split(b"\n")
        for raw in lines:
            line = raw.decode(errors="replace").rstrip("\r")
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if payload == "[DONE]":
                self.done = True
                return None
            event = _obj(loads(payload, "a stream event"), "a stream event")
            if "error" in event:
                return json.dumps(event["error"])[:MAX_ERROR_CHARS]
            self._event(event)
        return None

    def _event(self, event: dict[str, Any]) -> None:
        self.tokens = _completion_tokens(event) or self.tokens
        for c in _list(event.get("choices"), "a stream event's choices"):
            c = _obj(c, "a stream choice")
            ci = _typed(c.get("index", 0), int, "a stream choice's index", optional=False)
            ch = self.choices.setdefault(ci, Choice())
            delta = _obj(c.get("delta"), "a stream choice's delta")
            content = _typed(delta.get("content"), str, "a delta's content")
            if content:
                ch.text += content
                self.chunks += 1
            for t in _list(delta.get("tool_calls"), "a delta's tool_calls"):
                t = _obj(t, "a delta's tool call")
                ti = _typed(t.get("index", 0), int, "a tool call's index", optional=False)
                call = self.calls.setdefault((ci, ti), {"name": "", "arguments": ""})
                fn = _obj(t.get("function"), "a tool call's function")
                call["name"] += _typed(fn.get("name"), str, "a tool call's name") or ""
                call["arguments"] += _typed(fn.get("arguments"), str, "a tool call's arguments") or ""
                self.chunks += 1
            finish = _typed(c.get("finish_reason"), str, "a stream choice's finish_reason")
            if finish:
                ch.finish_reason = finish
            lp = _logprobs(c.get("logprobs"), "a stream choice's logprobs")
            if lp:
                ch.logprobs = (ch.logprobs or []) + lp

    def reply(self, status: int) -> Reply:
        for (ci, _ti), call in sorted(self.calls.items()):
            self.choices.setdefault(ci, Choice()).tool_calls.append(call)
        return Reply(status, None, [self.choices[i] for i in sorted(self.choices)], self.tokens)
