"""The fault probes of ``specdec stability``: what is sent on purpose, what a
healthy server should answer, and how an answer is judged.

This module holds what every probe shares (the target, payloads, judging
helpers) and the one-request input probes: empty, whitespace, over-long and
odd-Unicode prompts, extreme temperature and top_p.

A probe sends a bounded number of requests (each one bounded in time by the
client's timeouts; the runner also bounds the whole probe) and returns a
``Finding``: ``ok`` when the server answered as expected, ``degraded`` when it
answered otherwise but kept serving, ``failed`` when an output was wrong or
the server could not be brought back, ``skipped`` when the probe does not
apply to the target. The runner (``specdec.experiments.stability.runner``) checks
``/health`` after every probe and turns any verdict into ``failed`` when the
server is unhealthy afterwards.

Every request the probes send goes through ``Target.send`` (or ``Target.note``
for the disconnect probe's own reads), so the runner counts requests and
error types from one log, even for a probe cut off by its time budget.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import unicodedata
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

import aiohttp

from specdec.http.urls import redact_text
from specdec.replay.http.client import ClientSettings, StreamResult, request_headers, stream_payload

Verdict = Literal["ok", "degraded", "failed", "skipped"]

#: Answers a probe may expect: "completes" (a full, successful stream) or "http_<status>".
COMPLETES, HTTP_400 = "completes", "http_400"
#: Gauges that count a vLLM engine's requests; both return to 0 when it is idle.
BUSY_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting")
POLL_S = 0.5
SHORT_TOKENS = 8
LONG_TOKENS = 1024  # long enough that a stream is still running when it is dropped or killed
LONG_PROMPT = "Count upwards from one, writing every number in words, and never stop."
PLAIN_PROMPT = "Say hello."


@dataclass
class Finding:
    verdict: Verdict
    detail: str
    rss: object | None = None  # soak.RssTrend for the soak


@dataclass(frozen=True)
class Probe:
    """One probe of a fault type: what a healthy server does, and how to run it."""

    fault: str
    expected: str
    run: Callable[[Target], Awaitable[Finding]]
    budget_s: float | None = None  # None: the run's probe timeout


@dataclass
class Sent:
    """One request as the probe log keeps it."""

    ok: bool
    error: str | None  # error label (see error_label) when not ok


def error_label(res: StreamResult) -> str | None:
    """None for a success; else ``failure_label``."""
    return None if res.success else failure_label(res)


def failure_label(res: StreamResult) -> str:
    """A failed request's label: ``http_<status>`` for an HTTP error; else the error_type."""
    if res.error_type == "http_status" and res.http_status is not None:
        return f"http_{res.http_status}"
    return res.error_type or "client_error"


def answer(res: StreamResult) -> str:
    """What the server did with a request: 'completes' or its error label."""
    return COMPLETES if res.success else failure_label(res)


def say(label: str) -> str:
    """A label as words: 'completes' -> 'completed', 'http_400' -> 'HTTP 400'."""
    if label == COMPLETES:
        return "completed"
    return f"HTTP {label[5:]}" if label.startswith("http_") else label


def clean(text: str | None, limit: int = 160) -> str:
    """Text safe for one terminal line: control and separator characters shown
    as escapes (a server may echo the escape sequences it was sent), cut short."""
    out = []
    for ch in text or "":
        if unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp"):
            out.append(ch.encode("unicode_escape", "backslashreplace").decode("ascii"))
        else:
            out.append(ch)
    s = " ".join("".join(out).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def chat(model: str, content: str, max_tokens: int = SHORT_TOKENS, **sampling) -> dict:
    """A streamed chat payload; greedy and forced length unless sampling says otherwise."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        **sampling,
    }


class ServerControl(Protocol):
    """What the probes do with the server under test (``specdec.experiments.stability.server``'s
    EndpointServer and EmbeddedServer; ``endpoint`` too, read through ``Target.endpoint``)."""

    restartable: bool

    def rss_mb(self) -> float | None: ...

    async def kill(self) -> None: ...

    async def start(self) -> None: ...


@dataclass
class Target:
    """The server under test as the probes see it. ``server`` is a
    ``specdec.experiments.stability.server`` control (endpoint, RSS, kill, start)."""

    session: aiohttp.ClientSession
    server: ServerControl
    model: str
    max_model_len: int | None
    settings: ClientSettings
    concurrency: int
    run_id: str
    health_path: str = "/health"
    log: list[Sent] = field(default_factory=list)
    _ids: itertools.count = field(default_factory=itertools.count)

    @property
    def endpoint(self):
        return self.server.endpoint

    def request_id(self, fault: str) -> str:
        return f"sd.{self.run_id}.stability.{fault}.{next(self._ids):05d}"

    def note(self, ok: bool, error: str | None) -> None:
        self.log.append(Sent(ok, None if ok else (error or "client_error")))

    async def send(self, fault: str, payload: dict) -> StreamResult:
        res = await stream_payload(self.session, self.endpoint, payload, self.request_id(fault), self.settings)
        self.note(res.success, error_label(res))
        return res

    async def get(self, path: str, timeout_s: float | None = None) -> tuple[int | None, str]:
        """(status, body) of a GET, or (None, error text) when nothing answered."""
        ep = self.endpoint
        timeout = aiohttp.ClientTimeout(total=timeout_s or self.settings.connect_timeout_s + 5)
        try:
            async with self.session.get(
                ep.url(path), params=ep.params or None, timeout=timeout, headers=request_headers(self.settings, ep)
            ) as resp:
                return resp.status, await resp.text(errors="replace")
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            text = redact_text(f"{type(exc).__name__}: {exc}", ep.secrets)
            assert text is not None  # redact_text gives None only for None
            return None, text

    async def healthy(self, attempts: int = 3) -> bool:
        for i in range(attempts):
            status, _ = await self.get(self.health_path)
            if status == 200:
                return True
            if i + 1 < attempts:
                await asyncio.sleep(1.0)
        return False

    async def busy(self) -> float | None:
        """Requests running or waiting in the engine (sum of BUSY_GAUGES over
        label sets); None when the server exports neither gauge."""
        status, text = await self.get("/metrics")
        return gauge_sum(text, BUSY_GAUGES) if status == 200 else None


def long_tokens(t: Target) -> int:
    """max_tokens of a stream meant to be cut off: LONG_TOKENS, within max_model_len."""
    return LONG_TOKENS if t.max_model_len is None else max(16, min(LONG_TOKENS, t.max_model_len - 200))


def gauge_sum(text: str, names: tuple[str, ...]) -> float | None:
    """Sum of the samples of the named metrics in a Prometheus text exposition."""
    total, seen = 0.0, False
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            rest = line.rsplit("}", 1)[1] if "{" in line else line[len(name) :]
            try:
                total += float(rest.split()[0])
                seen = True
            except (IndexError, ValueError):
                continue
    return total if seen else None


async def wait_busy(t: Target, done: Callable[[float], bool], wait_s: float) -> float | None:
    """Poll the busy gauges until done(value) or wait_s passes; the last value (None: no gauges)."""
    deadline = time.monotonic() + wait_s
    while True:
        value = await t.busy()
        if value is None or done(value) or time.monotonic() >= deadline:
            return value
        await asyncio.sleep(POLL_S)


# ---------------------------------------------------------------- one request, judged
def answer_probe(fault: str, what: str, payload_of: Callable[[Target], dict], expect: frozenset[str]) -> Probe:
    """A probe of one request whose answer must be one of ``expect``."""
    expected = " or ".join(say(e) if e != COMPLETES else "completes" for e in sorted(expect, reverse=True))

    async def run(t: Target) -> Finding:
        res = await t.send(fault, payload_of(t))
        got = answer(res)
        detail = f"{what}: {say(got)}"
        if not res.success and res.error_message:
            why = res.error_message.split(": ", 1)[1] if res.error_message.startswith("HTTP ") else res.error_message
            detail += f" ({clean(why, 100)})"
        return Finding("ok" if got in expect else "degraded", detail)

    return Probe(fault, expected, run)


def input_probes() -> list[Probe]:
    """Odd prompts and sampling settings, one request each (max_tokens 8)."""
    either, completes, refused = frozenset({COMPLETES, HTTP_400}), frozenset({COMPLETES}), frozenset({HTTP_400})

    def prompt(text: str, **sampling) -> Callable[[Target], dict]:
        return lambda t: chat(t.model, text, **sampling)

    cases = [
        ("empty_prompt", "empty string", prompt(""), either),
        ("whitespace_prompt", "spaces, tabs and newlines", prompt(" \t\n  \n\t"), either),
        ("whitespace_prompt", "no-break and ideographic spaces", prompt("\u00a0\u3000\u2003"), either),
        (
            "odd_unicode",
            "right-to-left override and marks",
            prompt("abc \u202edef\u202c \u200fghi\u200e \u2067x\u2069"),
            completes,
        ),
        (
            "odd_unicode",
            "emoji ZWJ sequences",
            prompt("\U0001f469\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 \U0001f3f3\ufe0f\u200d\U0001f308"),
            completes,
        ),
        ("odd_unicode", "line and paragraph separators", prompt("one\u2028two\u2029three"), completes),
        ("odd_unicode", "terminal escape sequences", prompt("\x1b[31mred\x1b[0m \x1b]0;title\x07 \x1b[2J"), completes),
        ("odd_unicode", "C0 and C1 controls and DEL", prompt("a\x01b\x02c\x7fd\x85e\x9bf"), completes),
        ("odd_unicode", "stacked combining marks", prompt("Z" + "\u0335\u0321\u031b\u0349" * 25), completes),
        ("odd_unicode", "BOM and noncharacters", prompt("\ufeffstart \ufffe\uffff \U0010ffff end"), completes),
        ("odd_unicode", "NUL character", prompt("before\x00after"), either),
        ("odd_unicode", "lone surrogate (sent as the JSON escape \\ud800)", prompt("x\ud800y"), either),
        ("extreme_temperature", "temperature 0", prompt(PLAIN_PROMPT, temperature=0.0), completes),
        ("extreme_temperature", "temperature 2", prompt(PLAIN_PROMPT, temperature=2.0), completes),
        ("extreme_temperature", "temperature 1e6", prompt(PLAIN_PROMPT, temperature=1e6), either),
        ("extreme_temperature", "temperature -1", prompt(PLAIN_PROMPT, temperature=-1.0), refused),
        ("extreme_top_p", "top_p 1e-9", prompt(PLAIN_PROMPT, temperature=1.0, top_p=1e-9), completes),
        ("extreme_top_p", "top_p 1", prompt(PLAIN_PROMPT, temperature=1.0, top_p=1.0), completes),
        ("extreme_top_p", "top_p 0", prompt(PLAIN_PROMPT, temperature=1.0, top_p=0.0), refused),
        ("extreme_top_p", "top_p 1.5", prompt(PLAIN_PROMPT, temperature=1.0, top_p=1.5), refused),
    ]
    return [answer_probe(*case) for case in cases]


def over_length_probe() -> Probe:
    """A prompt of 2 x max_model_len words (each at least one token)."""
    fault, expected = "over_length_prompt", "HTTP 400"

    def payload(t: Target) -> dict:
        assert t.max_model_len is not None  # run() below skips the probe otherwise
        return chat(t.model, "hello " * (2 * t.max_model_len))

    inner = answer_probe(fault, "prompt of 2 x max_model_len words", payload, frozenset({HTTP_400}))

    async def run(t: Target) -> Finding:
        if t.max_model_len is None:
            return Finding(
                "skipped",
                "the server does not report max_model_len (GET /v1/models), so no prompt is known to be too long",
            )
        return await inner.run(t)

    return Probe(fault, expected, run)
