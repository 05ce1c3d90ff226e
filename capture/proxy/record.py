"""From one proxied exchange (request bytes + response bytes) to one traffic
row (``TrafficRow``, format version 2, ``source='proxy'``).

This runs in the recorder thread, after the response has been sent: the proxy
only keeps references to the bytes that went through. What a row holds:

* ``messages`` (chat) or ``prompt`` (``/completions`` with one string prompt,
  replayed as one chat user message; said in ``content_note``), redacted in
  hash mode (``proxy_redact``);
* sampling settings as sent; a request without ``temperature`` is recorded
  as 1.0, the OpenAI API default, and ``content_note`` says so
  (``NO_TEMPERATURE_NOTE``): the server may have applied its model's default
  instead (vLLM reads the model's generation_config), which the proxy cannot
  see;
* ``max_tokens`` = ``recorded_output_tokens`` = the response's length:
  ``usage.completion_tokens`` when the response has a usage block, else the
  number of stream chunks that carried output (content, reasoning or tool
  calls), which undercounts when a chunk carries several tokens; such rows say
  so in ``content_note`` (a plain JSON reply without usage is not recorded);
* ``ended_naturally``: finish_reason ``stop`` or ``tool_calls`` -> true,
  ``length`` -> false, anything else -> null;
* ``session_id`` from the ``X-Specdec-Session`` header, ``turn_index`` = the
  number of assistant messages before this request's reply; no header, no
  session;
* ``input_tokens`` = ``usage.prompt_tokens`` (null without usage);
* ``arrival_ms`` on the proxy's monotonic clock from its recording start.

An exchange that cannot be a row raises ``NotRecorded`` with a short reason
(counted by the recorder): an error status, a stream cut short, n > 1, a body
that is not a chat or completions request, an empty response.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field

from pydantic import ValidationError

from specdec.capture.proxy.redact import Redactor, message_text
from specdec.capture.proxy.rules import UNKNOWN, CategoryRules
from specdec.schemas.records import TrafficRow

SOURCE = "proxy"
COMPLETIONS_NOTE = "recorded from /completions: replay sends the prompt as one chat user message"
NO_TEMPERATURE_NOTE = (
    "temperature not sent: recorded as 1.0 (the OpenAI default); the server may have applied "
    "its model's default instead, so check it before reading this row as sampled"
)
COUNTED_NOTE = (
    "recorded length counted from the stream's output chunks (the response had no usage block; "
    "a chunk can carry more than one token)"
)


class NotRecorded(Exception):
    """An exchange that does not make a traffic row; ``reason`` is a short label."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
class Exchange:
    """What the proxy hands to the recorder: references, nothing parsed."""

    prompt_id: str
    path: str
    arrival_ms: float
    wall_ns: int
    body: bytes
    category: str | None  # the X-Specdec-Category header
    session: str | None  # the X-Specdec-Session header
    status: int = 0
    content_type: str = ""
    content_encoding: str = ""
    chunks: list[bytes] = field(default_factory=list)
    complete: bool = False


def is_recorded_route(method: str, path: str) -> bool:
    return method == "POST" and path.rstrip("/").endswith(("/chat/completions", "/completions"))


@dataclass(frozen=True)
class Response:
    output_tokens: int
    counted: bool  # True: counted from chunks, no usage block
    prompt_tokens: int | None
    finish_reason: str | None


def _body(ex: Exchange) -> bytes:
    data = b"".join(ex.chunks)
    enc = ex.content_encoding.lower()
    if enc in ("", "identity"):
        return data
    if enc in ("gzip", "x-gzip", "deflate"):
        return zlib.decompress(data, wbits=47)  # 47: gzip or zlib header, detected
    raise NotRecorded(f"content-encoding {enc}")


def _has_output(choice: dict) -> bool:
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return bool(
            delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or delta.get("tool_calls")
        )
    return bool(choice.get("text"))


def _events(data: bytes):
    """The JSON objects of an SSE body's data lines, last first ([DONE] skipped)."""
    for line in reversed(data.split(b"\n")):
        line = line.strip()
        if line.startswith(b"data:"):
            payload = line[5:].strip()
            if payload and payload != b"[DONE]":
                event = json.loads(payload)
                if isinstance(event, dict):
                    yield event


def _first_choice(event: dict) -> dict | None:
    choices = event.get("choices") or []
    return choices[0] if choices and isinstance(choices[0], dict) else None


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_response(ex: Exchange) -> Response:
    """Length, prompt tokens and finish reason of a reply. A stream is read
    from its end (the usage block and the finish reason are in its last two
    events); it is read whole only when there is no usage block to count from."""
    data = _body(ex)
    usage = finish = None
    if ex.content_type.lower().startswith("text/event-stream"):
        for event in _events(data):
            if usage is None and isinstance(event.get("usage"), dict):
                usage = event["usage"]
            choice = _first_choice(event)
            if finish is None and choice is not None:
                finish = choice.get("finish_reason")
            if usage is not None and finish is not None:
                break
        if usage is None or _int(usage.get("completion_tokens")) is None:
            counted = sum(_has_output(c) for c in map(_first_choice, _events(data)) if c is not None)
            return Response(counted, True, _int((usage or {}).get("prompt_tokens")), finish)
    else:
        event = json.loads(data)
        if not isinstance(event, dict):
            raise NotRecorded("response_not_json")
        usage = event.get("usage") if isinstance(event.get("usage"), dict) else None
        choice = _first_choice(event)
        finish = choice.get("finish_reason") if choice is not None else None
        if usage is None or _int(usage.get("completion_tokens")) is None:
            raise NotRecorded("no_usage")
    return Response(usage["completion_tokens"], False, _int(usage.get("prompt_tokens")), finish)


def request_category(rules: CategoryRules, path: str, header: str | None, body: bytes) -> str:
    """A request's category as ``RowMaker.row`` gives it (the header, else the first
    matching rule, else ``unknown``), from the request alone, never raising: the
    live label the sidecar's per-category gauges use (``sidecar_categories``). The
    body is parsed only when there is no header and some rule to match."""
    if header:
        return header
    if not rules.rules:
        return UNKNOWN
    try:
        req = json.loads(body)
        chat = path.rstrip("/").endswith("/chat/completions")
        model = req.get("model") if isinstance(req.get("model"), str) else None
        if chat:
            text = message_text(req.get("messages") if isinstance(req.get("messages"), list) else [])
        else:
            prompt = req.get("prompt")
            text = prompt if isinstance(prompt, str) else "\n".join(p for p in prompt or [] if isinstance(p, str))
        return rules.category(path, model, text)
    except Exception:  # noqa: BLE001 - a label, never an error in the request path
        return UNKNOWN


class RowMaker:
    """Turns exchanges into validated TrafficRow dicts (one per call)."""

    def __init__(self, rules: CategoryRules | None = None, redactor: Redactor | None = None):
        self.rules = rules or CategoryRules()
        self.redactor = redactor  # None: keep content

    def row(self, ex: Exchange) -> dict:
        if not ex.complete:
            raise NotRecorded("incomplete")
        if not 200 <= ex.status < 300:
            raise NotRecorded(f"status_{ex.status}")
        try:
            req = json.loads(ex.body)
        except (ValueError, UnicodeDecodeError):
            raise NotRecorded("request_not_json") from None
        if not isinstance(req, dict):
            raise NotRecorded("request_not_json")
        if req.get("n") not in (None, 1) or req.get("best_of") not in (None, 1):
            raise NotRecorded("n_above_1")
        chat = ex.path.rstrip("/").endswith("/chat/completions")
        notes = []
        if chat:
            messages = req.get("messages")
            if not isinstance(messages, list):
                raise NotRecorded("no_messages")
            text = message_text(messages)
        else:
            given = req.get("prompt")
            if isinstance(given, list) and len(given) == 1 and isinstance(given[0], str):
                given = given[0]
            if not isinstance(given, str):
                raise NotRecorded("prompt_not_one_string")
            prompt = text = given
            notes.append(COMPLETIONS_NOTE)
        resp = parse_response(ex)
        if resp.output_tokens <= 0:
            raise NotRecorded("empty_response")
        if resp.counted:
            notes.append(COUNTED_NOTE)
        if req.get("temperature") is None:
            notes.append(NO_TEMPERATURE_NOTE)
        model = req.get("model") if isinstance(req.get("model"), str) else None
        category = ex.category or self.rules.category(ex.path, model, text)
        red = self.redactor
        stop = req.get("stop")
        stop = [stop] if isinstance(stop, str) else stop
        row = {
            "prompt_id": ex.prompt_id,
            "category": category or UNKNOWN,
            "max_tokens": resp.output_tokens,
            "temperature": 1.0 if req.get("temperature") is None else req["temperature"],
            "top_p": req.get("top_p"),
            "top_k": req.get("top_k"),
            "seed": req.get("seed"),
            "stop": red.value(stop) if red and stop else stop,
            "model": model,
            "arrival_ms": ex.arrival_ms,
            "session_id": ex.session,
            "turn_index": (
                sum(isinstance(m, dict) and m.get("role") == "assistant" for m in req["messages"]) if chat else 0
            )
            if ex.session is not None
            else None,
            "input_tokens": resp.prompt_tokens,
            "recorded_output_tokens": resp.output_tokens,
            "ended_naturally": (
                None
                if resp.finish_reason is None
                else {"stop": True, "tool_calls": True, "length": False}.get(resp.finish_reason)
            ),
            "source": SOURCE,
        }
        for name in ("response_format", "tools"):
            value = req.get(name)
            row[name] = None if value is None else json.dumps(red.value(value) if red else value, ensure_ascii=False)
        if chat:
            row["messages"] = json.dumps(red.value(messages) if red else messages, ensure_ascii=False)
        else:
            row["prompt"] = red.text(prompt) if red else prompt
        if red:
            notes.insert(0, red.note())
        row["content_note"] = "; ".join(notes) or None
        try:
            return TrafficRow.model_validate(row).model_dump()
        except ValidationError as exc:
            err = exc.errors()[0]
            raise NotRecorded("invalid_" + (".".join(str(p) for p in err["loc"]) or "row")) from None
