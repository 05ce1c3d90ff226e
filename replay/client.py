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

The request timeout (the longest wait for the next byte) is aiohttp's
``sock_read`` until the reply's headers arrive; while the stream is read it
is one watchdog timer per request, pushed back only when it fires, because
``sock_read`` re-arms a timer on every arrival (a real per-token cost at
thousands of events a second).

Latencies use the monotonic clock; the send time is also stamped on the wall
clock for joining with engine traces. The API key is sent as a bearer token
and is never stored on the result; error texts are redacted of credentials.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

from specdec.replay.urls import Endpoint, parse_endpoint, redact_text
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
    "client_error": "any other failure on the client side (the message says which)",
}

CHAT_PATH = "/v1/chat/completions"
_BODY_LIMIT = 500


@dataclass(frozen=True)
class ClientSettings:
    """How requests are sent. ``request_timeout_s`` is the longest wait for the
    next byte (the first one included), so a long generation that keeps
    streaming never times out, and a hung server fails within that time."""

    connect_timeout_s: float = 10.0
    request_timeout_s: float = 60.0
    api_key: str | None = field(default=None, repr=False)

    def timeout(self) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(total=None, connect=self.connect_timeout_s,
                                     sock_connect=self.connect_timeout_s, sock_read=self.request_timeout_s)

    def headers(self, request_id: str | None = None) -> dict[str, str]:
        h = {}
        if request_id:
            h["X-Request-Id"] = request_id
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h


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

    def fail(self, error_type: str, message: str) -> "StreamResult":
        self.success = False
        self.error_type = error_type
        self.error_message = message[:_BODY_LIMIT] or error_type
        return self


def build_payload(model: str, row: TrafficRow, *, per_chunk_usage: bool = False) -> dict:
    """The chat request for row: its messages (or prompt) and the sampling
    settings it was recorded with, forced to max_tokens. ``per_chunk_usage`` also asks for the running
    completion-token count in every chunk (vLLM's continuous_usage_stats; the
    timed requests set it, the verification and sampling passes, which build
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


def as_endpoint(base_url: str | Endpoint) -> Endpoint:
    return base_url if isinstance(base_url, Endpoint) else parse_endpoint(base_url)


def request_headers(settings: ClientSettings, ep: Endpoint, request_id: str | None = None) -> dict[str, str]:
    """Headers of every request to ep: request id, and credentials (the API key
    as a bearer token; else user:password from the URL as basic auth)."""
    headers = settings.headers(request_id)
    if ep.user and "Authorization" not in headers:
        headers["Authorization"] = aiohttp.encode_basic_auth(ep.user, ep.password or "")
    return headers


async def stream_chat(
    session: aiohttp.ClientSession, base_url: str | Endpoint, model: str, row: TrafficRow,
    request_id: str, settings: ClientSettings | None = None,
) -> StreamResult:
    """One timed request: the row's payload with per-chunk usage."""
    return await stream_payload(session, base_url, build_payload(model, row, per_chunk_usage=True), request_id,
                                settings)


async def stream_payload(
    session: aiohttp.ClientSession, base_url: str | Endpoint, payload: dict, request_id: str,
    settings: ClientSettings | None = None, on_chunk: Callable[[dict], None] | None = None,
) -> StreamResult:
    """POST any chat-completions payload as a stream and classify the outcome.

    ``on_chunk`` sees every stream event that parsed as a JSON object and is
    not an error event, in order (e.g. to collect logprobs); whatever it
    raises becomes a ``client_error`` row."""
    settings = settings or ClientSettings()
    ep = as_endpoint(base_url)
    res = StreamResult(request_id=request_id, wall_send_ns=time.time_ns())
    t0 = time.perf_counter_ns()
    text_parts: list[str] = []
    idle: _IdleTimeout | None = None
    try:
        async with session.post(
            ep.url(CHAT_PATH), params=ep.params or None, json=payload,
            headers=request_headers(settings, ep, request_id), timeout=settings.timeout(),
        ) as resp:
            res.http_status = resp.status
            if not 200 <= resp.status < 300:
                body = (await resp.content.read(4096)).decode("utf-8", "replace")
                return res.fail("http_status", f"HTTP {resp.status}: {body}")
            ctype = resp.headers.get("Content-Type", "")
            if not ctype.startswith("text/event-stream"):
                body = (await resp.content.read(4096)).decode("utf-8", "replace")
                return res.fail("not_streamed", f"expected a text/event-stream reply, got {ctype or 'no Content-Type'}: {body}")
            idle = _IdleTimeout(settings.request_timeout_s, resp)
            await _read_stream(resp, res, text_parts, t0, on_chunk, idle)
        if res.error_type is None:
            res.e2e_ms = (time.perf_counter_ns() - t0) / 1e6
            res.success = True
    except asyncio.CancelledError:
        if idle is None or not idle.expired or asyncio.current_task().cancelling() > 1:
            raise  # someone else's cancellation (Ctrl-C, a stopped run); the watchdog's is settled below
    except aiohttp.ConnectionTimeoutError as exc:
        res.fail("connect_timeout", f"no connection within {settings.connect_timeout_s:g} s ({exc})")
    except (aiohttp.SocketTimeoutError, asyncio.TimeoutError) as exc:
        res.fail("request_timeout", f"nothing received for {settings.request_timeout_s:g} s ({type(exc).__name__})")
    except aiohttp.ClientPayloadError as exc:
        res.fail("stream_truncated", f"the stream broke off ({exc})")
    except (aiohttp.ClientConnectionError, OSError) as exc:
        res.fail("connect_error" if res.http_status is None else "stream_truncated", f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # anything else: a row, not a crash
        res.fail("client_error", f"{type(exc).__name__}: {exc}")
    finally:
        if idle is not None:
            idle.close()
        if idle is not None and idle.expired:  # the watchdog cancelled this task: a timeout, not a cancellation
            if asyncio.current_task().cancelling():
                asyncio.current_task().uncancel()
            res.fail("request_timeout", f"nothing received for {settings.request_timeout_s:g} s")
        res.output_text = "".join(text_parts)
        res.error_message = redact_text(res.error_message, ep.secrets + ((settings.api_key,) if settings.api_key else ()))
    return res


#: Longest stream line kept while waiting for its end (a server that never
#: sends a newline fails the request instead of growing the buffer forever).
_MAX_LINE = 16 * 1024 * 1024

# The exact shape of vLLM's content chunk (0.32; per-chunk usage optional):
# when an event matches it whole, it is valid JSON and its fields are read
# from the match instead of json.loads and a walk of the dict. Anything
# else (a role chunk, the final usage chunk, logprobs, another server's
# format, a malformed event) takes the general path, so results are the same.
_JSTR = rb'[\x20\x21\x23-\x5b\x5d-\x7e]*'  # a printable-ASCII JSON string body without escapes
_JINT = rb'(?:0|[1-9][0-9]{0,17})'
_CHUNK = (
    rb'\{"id":"' + _JSTR + rb'","object":"chat\.completion\.chunk","created":' + _JINT
    + rb',"model":"' + _JSTR + rb'","choices":\[\{"index":0,"delta":\{"content":"'
    + rb'((?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*)'
    + rb'"\},"logprobs":null,"finish_reason":(?:null|"([a-z_]{1,32})")(?:,"stop_reason":null)?'
    + rb'(?:,"token_ids":null)?\}\]'
    + rb'(?:,"usage":\{"prompt_tokens":(' + _JINT + rb'),"total_tokens":' + _JINT
    + rb',"completion_tokens":(' + _JINT + rb')\})?\}')
_FAST_CHUNK = re.compile(_CHUNK).fullmatch  # an event's data
_FAST_LINE = re.compile(rb'[ \t]*data:[ \t]*' + _CHUNK + rb'[ \t\r]*').fullmatch  # one line, as split
_FAST_EVENT = re.compile(rb'data:[ \t]*' + _CHUNK + rb'\r?\n\r?\n').fullmatch  # a read that is one whole event


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
        self._task = asyncio.current_task()
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


async def _read_stream(resp: aiohttp.ClientResponse, res: StreamResult, text_parts: list[str], t0: int,
                       on_chunk: Callable[[dict], None] | None = None, idle: _IdleTimeout | None = None) -> None:
    """Consume server-sent events; sets an error on res instead of raising.

    Reads whatever bytes have arrived (not line by line) and splits the lines
    itself; every event in one read is stamped with that read's arrival time.
    Content chunks in vLLM's exact format are read by a pattern (a read that
    is one whole event, the common case, without even splitting it); every
    other event is parsed as JSON."""
    content = resp.content
    clock = time.perf_counter_ns
    fast = on_chunk is None  # on_chunk wants every event as a dict
    offsets, counts = res.chunk_offsets_ms, res.chunk_tokens
    done = got_usage = eof = False
    per_chunk = True  # every content chunk so far carried a usable running token count
    pending = b""  # the start of a line whose end has not arrived
    now_ms = 0.0

    def take(m: re.Match) -> bool:
        """Record a content chunk matched by the pattern; False (nothing
        recorded) if its text is not UTF-8: the general path then says why."""
        nonlocal per_chunk, got_usage
        text, finish, prompt_n, completion_n = m.groups()
        if text:
            try:
                piece = json.loads(b'"' + text + b'"') if b"\\" in text else text.decode()
            except ValueError:
                return False
            if res.ttft_ms is None:
                res.ttft_ms = now_ms
            offsets.append(now_ms)
            text_parts.append(piece)
            if per_chunk:
                n = None if completion_n is None else int(completion_n)
                if n is None or (counts and n < counts[-1]):
                    counts.clear()
                    per_chunk = False
                else:
                    counts.append(n)
        if finish is not None:
            res.finish_reason = finish.decode()
        if completion_n is not None:
            res.prompt_tokens, res.output_tokens = int(prompt_n), int(completion_n)
            got_usage = True
        return True

    while not done and not eof:
        block = await content.readany()
        now_ns = clock()
        if idle is not None:
            idle.last_ns = now_ns
        now_ms = (now_ns - t0) / 1e6
        if fast and not pending and block:
            m = _FAST_EVENT(block)
            if m is not None and take(m):
                continue
        if block:
            lines = (pending + block if pending else block).split(b"\n")
            pending = lines.pop()
            if len(pending) > _MAX_LINE:
                raise ValueError(f"a stream line longer than {_MAX_LINE} bytes")
        else:  # end of the stream: a last line without a newline still counts
            eof = True
            lines = [pending] if pending else []
        for raw in lines:
            if fast:
                m = _FAST_LINE(raw)
                if m is not None and take(m):
                    continue
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                break
            try:
                chunk = json.loads(data)
            except ValueError as exc:
                res.fail("bad_chunk", f"invalid JSON in stream event ({exc}): {data[:200]!r}")
                return
            if not isinstance(chunk, dict):
                res.fail("bad_chunk", f"stream event is not a JSON object: {data[:200]!r}")
                return
            if "error" in chunk:
                res.fail("stream_error", str(chunk["error"]))
                return
            if on_chunk is not None:
                on_chunk(chunk)
            usage = chunk.get("usage")
            for choice in chunk.get("choices") or ():
                piece = (choice.get("delta") or {}).get("content")
                if isinstance(piece, str) and piece:
                    if res.ttft_ms is None:
                        res.ttft_ms = now_ms
                    offsets.append(now_ms)
                    text_parts.append(piece)
                    per_chunk = per_chunk and _running_count(counts, usage)
                if isinstance(choice.get("finish_reason"), str):
                    res.finish_reason = choice["finish_reason"]
            if isinstance(usage, dict) and usage:
                got_usage = _read_usage(res, usage, chunk)
    if not per_chunk or (counts and res.output_tokens is not None and counts[-1] > res.output_tokens):
        counts.clear()  # unknown, never partly filled
    if not done:
        res.fail("stream_truncated", f"the stream ended before [DONE] after {len(offsets)} content chunk(s)")
    elif not got_usage:
        res.fail("no_usage", "the stream ended without a usage block with an integer completion_tokens "
                             "(was stream_options.include_usage ignored?)")


def _count(value) -> int | None:
    """A token count as the server sent it, if it is a non-negative integer."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _running_count(counts: list[int], usage) -> bool:
    """Append a content chunk's running completion-token count (its per-chunk
    usage); False, clearing counts, if the chunk has none or it went down."""
    n = _count(usage.get("completion_tokens")) if isinstance(usage, dict) else None
    if n is None or (counts and n < counts[-1]):
        counts.clear()
        return False
    counts.append(n)
    return True


def _read_usage(res: StreamResult, usage: dict, chunk: dict) -> bool:
    """Read the usage block; True if it holds a usable completion_tokens."""
    res.prompt_tokens = _count(usage.get("prompt_tokens"))
    res.output_tokens = _count(usage.get("completion_tokens"))
    # vLLM puts per-request speculative metrics beside usage in the final chunk
    metrics = chunk.get("metrics") or usage.get("metrics") or {}
    spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
    if isinstance(spec, dict):
        res.spec_num_steps = _count(spec.get("num_spec_steps"))
        res.spec_num_draft_tokens = _count(spec.get("num_draft_tokens"))
        res.spec_num_accepted_tokens = _count(spec.get("num_accepted_draft_tokens"))
    return res.output_tokens is not None
