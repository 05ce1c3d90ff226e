"""The server-sent-event reader of a chat-completions stream: bytes in, a
``StreamResult`` filled (text, chunk arrival times, running token counts,
usage, vLLM's per-request speculative metrics), or a typed failure on it.

It is fed whatever bytes one read of the socket brought (``feed``), never a
line at a time, and stamps every event in one read with that read's arrival
time; it splits lines itself, so an event split across reads, or many events
in one read, give the same record. It is push-driven, so the transport
decides how bytes arrive: ``client.stream_payload`` feeds it from aiohttp's
``readany`` or, on the replay's hot path, straight from an
``asyncio.Protocol``'s ``data_received`` (``http.stream``).

It also bounds the stream's length without trusting the server: past
``max_chunks`` content chunks (or a running completion count above it) the
request fails ``overlong_stream`` and nothing more is read.

Content chunks in vLLM's exact format are read by a pattern (a read that is
one whole event, the common case, without even splitting it); every other
event is parsed as JSON, so a role chunk, the usage chunk, logprobs, another
server's format or a malformed event give the same result either way
(tests/replay/test_client_fast.py checks the two paths against each other).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from specdec.engines import request_stats_of

#: Longest stream line kept while waiting for its end (a server that never
#: sends a newline fails the request instead of growing the buffer forever).
MAX_LINE = 16 * 1024 * 1024

# The exact shape of vLLM's content chunk (0.32; per-chunk usage optional):
# when an event matches it whole, it is valid JSON and its fields are read
# from the match instead of json.loads and a walk of the dict.
_JSTR = rb"[\x20\x21\x23-\x5b\x5d-\x7e]*"  # a printable-ASCII JSON string body without escapes
_JINT = rb"(?:0|[1-9][0-9]{0,17})"
_CHUNK = (
    rb'\{"id":"'
    + _JSTR
    + rb'","object":"chat\.completion\.chunk","created":'
    + _JINT
    + rb',"model":"'
    + _JSTR
    + rb'","choices":\[\{"index":0,"delta":\{"content":"'
    + rb'((?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*)'
    + rb'"\},"logprobs":null,"finish_reason":(?:null|"([a-z_]{1,32})")(?:,"stop_reason":null)?'
    + rb'(?:,"token_ids":null)?\}\]'
    + rb'(?:,"usage":\{"prompt_tokens":('
    + _JINT
    + rb'),"total_tokens":'
    + _JINT
    + rb',"completion_tokens":('
    + _JINT
    + rb")\})?\}"
)
FAST_CHUNK = re.compile(_CHUNK).fullmatch  # an event's data
_FAST_LINE = re.compile(rb"[ \t]*data:[ \t]*" + _CHUNK + rb"[ \t\r]*").fullmatch  # one line, as split
_FAST_EVENT = re.compile(rb"data:[ \t]*" + _CHUNK + rb"\r?\n\r?\n").fullmatch  # a read that is one whole event


class SseParser:
    """Reads one response's event stream into ``res`` (a ``StreamResult``).

    ``feed(block, now_ns)`` takes one read's bytes and returns True once the
    stream is over for this request: ``[DONE]`` seen, or a failure set on
    ``res``; ``feed(b"", now_ns)`` is the end of the body. ``finish()``
    then settles the outcome (truncated, no usage, per-chunk counts all or
    nothing). ``on_chunk`` sees every event that parsed as a JSON object and
    is not an error event, in order; what it raises propagates to the caller
    of ``feed``."""

    __slots__ = (
        "res",
        "text_parts",
        "t0",
        "on_chunk",
        "fast",
        "over",
        "saw_done",
        "got_usage",
        "per_chunk",
        "pending",
        "now_ms",
        "max_chunks",
    )

    def __init__(
        self,
        res,
        text_parts: list[str],
        t0: int,
        on_chunk: Callable[[dict], None] | None = None,
        max_chunks: int | None = None,
    ):
        self.res, self.text_parts, self.t0, self.on_chunk = res, text_parts, t0, on_chunk
        self.fast = on_chunk is None  # on_chunk wants every event as a dict
        self.over = False  # nothing more is read: [DONE], a failure, or the end of the body
        self.saw_done = self.got_usage = False
        self.per_chunk = True  # every content chunk so far carried a usable running token count
        self.pending = b""  # the start of a line whose end has not arrived
        self.now_ms = 0.0
        self.max_chunks = max_chunks  # None: unbounded (client.stream_limit of the request's max_tokens)

    def _take(self, m: re.Match) -> bool:
        """Record a content chunk matched by the pattern; False (nothing
        recorded) if its text is not UTF-8: the general path then says why."""
        res = self.res
        text, finish, prompt_n, completion_n = m.groups()
        if text:
            try:
                piece = json.loads(b'"' + text + b'"') if b"\\" in text else text.decode()
            except ValueError:
                return False
            if res.ttft_ms is None:
                res.ttft_ms = self.now_ms
            res.chunk_offsets_ms.append(self.now_ms)
            self.text_parts.append(piece)
            if self.per_chunk:
                counts = res.chunk_tokens
                n = None if completion_n is None else int(completion_n)
                if n is None or (counts and n < counts[-1]):
                    counts.clear()
                    self.per_chunk = False
                else:
                    counts.append(n)
            if self.max_chunks is not None:
                self._bound()
        if finish is not None:
            res.finish_reason = finish.decode()
        if completion_n is not None:
            res.prompt_tokens, res.output_tokens = int(prompt_n), int(completion_n)
            self.got_usage = True
        return True

    def feed(self, block: bytes, now_ns: int) -> bool:
        """One read's bytes (b"" at the end of the body); True when finished."""
        if self.over:
            return True
        self.now_ms = (now_ns - self.t0) / 1e6
        pending, fast = self.pending, self.fast
        if block:
            if fast and not pending:
                m = _FAST_EVENT(block)
                if m is not None and self._take(m):
                    return self.over
            lines = (pending + block if pending else block).split(b"\n")
            self.pending = lines.pop()
            if len(self.pending) > MAX_LINE:
                raise ValueError(f"a stream line longer than {MAX_LINE} bytes")
        else:  # end of the stream: a last line without a newline still counts
            self.over = True
            lines = [pending] if pending else []
            self.pending = b""
        for raw in lines:
            if not raw or raw == b"\r":  # the blank line that ends each event
                continue
            if fast:
                m = _FAST_LINE(raw)
                if m is not None and self._take(m):
                    if self.over:
                        return True
                    continue
            if self._event(raw):
                self.over = True
                self.saw_done = self.res.error_type is None
                return True
        return self.over

    def _event(self, raw: bytes) -> bool:
        """One line by the general path; True when the stream is over ([DONE] or a failure)."""
        res = self.res
        line = raw.strip()
        if not line.startswith(b"data:"):
            return False
        data = line[5:].strip()
        if data == b"[DONE]":
            return True
        try:
            chunk = json.loads(data)
        except ValueError as exc:
            res.fail("bad_chunk", f"invalid JSON in stream event ({exc}): {data[:200]!r}")
            return True
        if not isinstance(chunk, dict):
            res.fail("bad_chunk", f"stream event is not a JSON object: {data[:200]!r}")
            return True
        if "error" in chunk:
            res.fail("stream_error", str(chunk["error"]))
            return True
        if self.on_chunk is not None:
            self.on_chunk(chunk)
        usage = chunk.get("usage")
        for choice in chunk.get("choices") or ():
            piece = (choice.get("delta") or {}).get("content")
            if isinstance(piece, str) and piece:
                if res.ttft_ms is None:
                    res.ttft_ms = self.now_ms
                res.chunk_offsets_ms.append(self.now_ms)
                self.text_parts.append(piece)
                self.per_chunk = self.per_chunk and _running_count(res.chunk_tokens, usage)
                if self.max_chunks is not None and self._bound():
                    return True
            if isinstance(choice.get("finish_reason"), str):
                res.finish_reason = choice["finish_reason"]
        if isinstance(usage, dict) and usage:
            self.got_usage = _read_usage(res, usage, chunk)
        return False

    def _bound(self) -> bool:
        """Fail the request once the stream is longer than ``max_chunks``
        (content chunks, or the running token count); True when it did."""
        res, limit = self.res, self.max_chunks
        assert limit is not None  # called only for a bounded stream
        n = len(res.chunk_offsets_ms)
        counts = res.chunk_tokens
        if n <= limit and not (counts and counts[-1] > limit):
            return False
        res.fail(
            "overlong_stream",
            f"the server streamed past {limit} content chunks or tokens "
            f"({n} chunks, running count {counts[-1] if counts else 'unknown'}): it "
            "ignores max_tokens; the client stopped reading",
        )
        self.over = True
        return True

    def finish(self) -> None:
        """Settle the outcome once the stream is over (``[DONE]``, a failure,
        the end of the body, or the transport's failure already set on res)."""
        res, counts = self.res, self.res.chunk_tokens
        if not self.per_chunk or (counts and res.output_tokens is not None and counts[-1] > res.output_tokens):
            counts.clear()  # unknown, never partly filled
        if res.error_type is not None:
            return
        if not self.saw_done:
            res.fail(
                "stream_truncated", f"the stream ended before [DONE] after {len(res.chunk_offsets_ms)} content chunk(s)"
            )
        elif not self.got_usage:
            res.fail(
                "no_usage",
                "the stream ended without a usage block with an integer completion_tokens "
                "(was stream_options.include_usage ignored?)",
            )


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


def _read_usage(res, usage: dict, chunk: dict) -> bool:
    """Read the usage block; True if it holds a usable completion_tokens."""
    res.prompt_tokens = _count(usage.get("prompt_tokens"))
    res.output_tokens = _count(usage.get("completion_tokens"))
    # the engine's per-request speculative stats sit beside usage in the final chunk (vLLM's
    # metrics.speculative_decoding, llama.cpp's timings): the engine adapters read them
    stats = request_stats_of(chunk)
    if stats is not None:
        res.spec_num_steps = stats.steps
        res.spec_num_draft_tokens = stats.draft_tokens
        res.spec_num_accepted_tokens = stats.accepted_tokens
    return res.output_tokens is not None
