"""A lean HTTP/1.1 transport for the replay's streaming chat requests.

Why: on the replay's hot path aiohttp costs more than everything specdec
does with the bytes. ``benchmarks/replay_client.py`` measured aiohttp's own
floor (every byte read with ``readany`` and dropped) at 0.33-0.51x of vLLM's
whole benchmark client, so no client built on it could reach half of vLLM's
cost at 256 streams or in open loop. Here each connection is an
``asyncio.Protocol``: ``data_received`` undoes the chunked framing and hands
each read's bytes straight to the event-stream parser (``sse.SseParser``),
so a streamed token costs no task wake-up, no stream-reader buffer and no
per-event timer (one idle watchdog per request, re-armed only when it fires).

Scope, deliberately small: one POST with a ``Content-Length`` body per
request; http and https (the default SSL context); keep-alive connections
pooled per scheme, host and port, with one retry on a fresh connection when
a reused one turns out to have been closed by the server before it answered;
a response framed by chunked transfer encoding, ``Content-Length`` or the
connection's close. No redirects, proxies, compression (it asks for
``identity``), cookies or HTTP/2. Everything else specdec sends (metrics,
prefix-cache resets, the stability faults) stays on aiohttp.

Failures are exceptions of ``TransportError``'s kinds, which
``client.stream_payload`` turns into the typed rows of ``client.ERROR_TYPES``:
``ConnectFailed`` (refused, reset, unknown host), ``ConnectTimedOut``,
``ReadTimedOut`` (nothing received for the request timeout) and
``StreamBroken`` (the connection closed or the framing broke mid-reply).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from urllib.parse import urlencode, urlsplit

_MAX_HEAD = 64 * 1024  # longest response head accepted
_HEAD, _BODY, _DONE, _IDLE = 0, 1, 2, 3  # _DONE: the reply is over, the caller has not handed it back


class TransportError(Exception):
    """Base of the transport's failures."""


class ConnectFailed(TransportError):
    """No connection: refused, reset, or the host is unknown."""


class ConnectTimedOut(TransportError):
    """No connection within the connect timeout."""


class ReadTimedOut(TransportError):
    """Nothing received for longer than the request timeout."""


class StreamBroken(TransportError):
    """The connection closed, or the reply's framing broke, before the reply ended."""

    def __init__(self, message: str, before_reply: bool = False):
        super().__init__(message)
        self.before_reply = before_reply  # nothing of the reply had arrived


class Connection(asyncio.Protocol):
    """One keep-alive connection, serving one request at a time.

    The body's bytes go to ``sink(block, now_ns) -> bool`` (True: the
    consumer has all it wants), one call per read; bytes that arrive before
    a sink is attached are kept, with their arrival times, until it is."""

    def __init__(self, pool: StreamPool, key: tuple):
        self.pool, self.key = pool, key
        self.transport: asyncio.Transport | None = None
        self.state = _IDLE
        self.lost = False
        self.last_ns = 0  # perf_counter_ns of the last arrival (the idle watchdog reads it)
        self.reused = False
        self.status = 0
        self.headers: dict[str, str] = {}
        self._buf = b""  # head bytes, or chunked framing not yet complete
        self._framing = "close"  # chunked | length | close
        self._left = 0  # bytes left in the current chunk, or of a Content-Length body
        self._crlf = False  # a chunk's closing CRLF is expected next
        self._trailer = False  # after the last chunk: waiting for the end of the trailer
        self._keep = True
        self._body_done = False
        self._early: list[tuple[bytes, int]] = []  # body bytes before a sink was attached
        self._sink: Callable[[bytes, int], bool] | None = None
        self._consumer_done = False
        self._handed_back = False
        self._pending_exc: BaseException | None = None  # a failure no one was waiting for yet
        self._waiter: asyncio.Future | None = None
        self._watch: asyncio.TimerHandle | None = None
        self._limit_ns = 0

    # ------------------------------------------------------------ protocol
    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        self.lost = True
        self.pool._forget(self)
        if self.state == _HEAD:
            self._fail(
                StreamBroken(f"the server closed the connection before it replied ({exc or 'EOF'})", before_reply=True)
            )
        elif self.state == _BODY and not self._body_done:
            if self._framing == "close":
                self._end_of_body()
            else:
                self._fail(StreamBroken(f"the connection closed mid-reply ({exc or 'EOF'})"))

    def eof_received(self):
        return False  # close the transport: connection_lost reports it

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter_ns()
        self.last_ns = now
        transport = self.transport
        assert transport is not None  # data arrives only after connection_made
        try:
            if self.state == _BODY:
                self._body(data, now)
            elif self.state == _HEAD:
                self._head(data, now)
            else:  # bytes after the reply: the connection cannot be trusted for another request
                self._keep = False
                transport.close()
        except Exception as exc:  # a framing error, or the consumer's own: fail this request
            self._keep = False
            self._fail(exc)
            transport.abort()

    # ------------------------------------------------------------ parsing
    def _head(self, data: bytes, now: int) -> None:
        buf = self._buf + data
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > _MAX_HEAD:
                raise StreamBroken(f"the reply's head is longer than {_MAX_HEAD} bytes")
            self._buf = buf
            return
        self._buf = b""
        lines = buf[:end].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise StreamBroken(f"not an HTTP/1.x reply: {lines[0][:100]!r}")
        self.status = int(parts[1])
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        self.headers = headers
        if 100 <= self.status < 200:  # an interim reply (100 Continue): the real one follows
            self._head(buf[end + 4 :], now)
            return
        conn_hdr = headers.get("connection", "").lower()
        self._keep = parts[0] == "HTTP/1.1" and "close" not in conn_hdr or "keep-alive" in conn_hdr
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._framing, self._left, self._crlf, self._trailer = "chunked", 0, False, False
        elif headers.get("content-length", "").isdigit():
            self._framing, self._left = "length", int(headers["content-length"])
        else:
            self._framing, self._keep = "close", False
        self.state = _BODY
        self._body_done = False
        self._resolve(True)
        rest = buf[end + 4 :]
        if rest or (self._framing == "length" and self._left == 0):
            self._body(rest, now)

    def _body(self, data: bytes, now: int) -> None:
        if self._framing == "chunked":
            block = self._dechunk(data)
        elif self._framing == "length":
            block = data[: self._left]
            if len(data) > self._left:
                self._keep = False  # more than it announced
            self._left -= len(block)
            if self._left == 0:
                self._body_done = True
        else:
            block = data
        if block:
            self._deliver(block, now)
        if self._body_done:
            self._end_of_body()

    def _dechunk(self, data: bytes) -> bytes:
        """The payload bytes in data (chunked transfer encoding); sets _body_done at the last chunk."""
        if not (self._buf or self._left or self._crlf or self._trailer):
            # the common read: exactly one whole chunk ("<hex>\r\n<payload>\r\n")
            j = data.find(b"\r\n", 0, 18)
            if j > 0:
                try:
                    size = int(data[:j], 16)
                except ValueError:
                    size = 0
                if size and len(data) == j + size + 4 and data.endswith(b"\r\n"):
                    return data[j + 2 : j + 2 + size]
        buf = self._buf + data if self._buf else data
        out = []
        i, n = 0, len(buf)
        while i < n:
            if self._trailer:  # after the zero chunk: trailer lines until an empty one
                j = buf.find(b"\r\n", i)
                if j < 0:
                    break
                if j == i:
                    self._body_done = True
                    if j + 2 < n:
                        self._keep = False
                    i = n
                    break
                i = j + 2
                continue
            if self._left:
                piece = buf[i : i + self._left]
                out.append(piece)
                i += len(piece)
                self._left -= len(piece)
                if self._left:
                    break
                self._crlf = True
            if self._crlf:
                if n - i < 2:
                    break
                if buf[i : i + 2] != b"\r\n":
                    raise StreamBroken("a chunk of the reply is not followed by CRLF (broken chunked encoding)")
                i += 2
                self._crlf = False
                continue
            j = buf.find(b"\r\n", i)
            if j < 0:
                if n - i > 1024:
                    raise StreamBroken("a chunk-size line longer than 1024 bytes (broken chunked encoding)")
                break
            try:
                size = int(buf[i:j].split(b";", 1)[0], 16)
            except ValueError:
                raise StreamBroken(f"bad chunk size {buf[i:j][:40]!r} (broken chunked encoding)") from None
            i = j + 2
            if size == 0:
                self._trailer = True
            else:
                self._left = size
        self._buf = buf[i:] if i < n else b""
        return out[0] if len(out) == 1 else b"".join(out)

    def _deliver(self, block: bytes, now: int) -> None:
        if self._consumer_done:
            return
        if self._sink is None:
            self._early.append((block, now))
        elif self._sink(block, now):
            self._consumer_finished()

    def _end_of_body(self) -> None:
        self._body_done = True
        if self._sink is not None and not self._consumer_done:
            try:
                self._sink(b"", time.perf_counter_ns())
            except Exception as exc:  # the consumer's own failure, at the end of a close-framed body
                self._keep = False
                self._fail(exc)
            self._consumer_finished()
        elif self._sink is None:
            self._early.append((b"", time.perf_counter_ns()))
        if self._consumer_done:
            self._settle()

    def _consumer_finished(self) -> None:
        self._consumer_done = True
        self._sink = None
        self._resolve(True)
        if self._body_done:
            self._settle()

    def _settle(self) -> None:
        """The consumer has what it wants and the body is over; the connection
        is recycled once the caller has handed it back (``done_with``), never
        before: a connection in the pool may be taken by another request."""
        if self.state != _BODY:
            return
        self.state = _DONE
        self._disarm()
        if self._handed_back:
            self._recycle()

    def _recycle(self) -> None:
        self._disarm()
        self.state = _IDLE
        if self._keep and not self.lost:
            self.pool._release(self)
        elif self.transport is not None:
            self.transport.close()

    # ------------------------------------------------------------ waiting
    def _resolve(self, value) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(value)

    def _fail(self, exc: BaseException) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_exception(exc)
        else:
            self._pending_exc = exc

    async def _wait(self) -> None:
        exc = self._pending_exc
        if exc is not None:
            self._pending_exc = None
            raise exc
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _arm(self, timeout_s: float) -> None:
        self._limit_ns = int(timeout_s * 1e9)
        self.last_ns = time.perf_counter_ns()
        self._watch = asyncio.get_running_loop().call_later(timeout_s, self._check)

    def _check(self) -> None:
        idle = time.perf_counter_ns() - self.last_ns
        if idle >= self._limit_ns:
            self._watch = None
            self._keep = False
            self._fail(ReadTimedOut(f"nothing received for {self._limit_ns / 1e9:g} s"))
            if self.transport is not None:
                self.transport.abort()
        else:
            self._watch = asyncio.get_running_loop().call_later((self._limit_ns - idle) / 1e9, self._check)

    def _disarm(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    # ------------------------------------------------------------ one request
    def send(self, request: bytes, read_timeout_s: float) -> None:
        self.state, self.status, self.headers = _HEAD, 0, {}
        self._buf, self._early, self._sink, self._consumer_done = b"", [], None, False
        self._body_done, self._pending_exc, self._handed_back = False, None, False
        self._arm(read_timeout_s)
        assert self.transport is not None  # a request is sent on a connection made
        self.transport.write(request)

    async def head(self) -> tuple[int, dict[str, str]]:
        """Wait for the reply's status and headers."""
        if self.state == _HEAD:
            await self._wait()
        return self.status, self.headers

    async def stream(self, sink: Callable[[bytes, int], bool]) -> None:
        """Feed the body to sink until it says it has all it wants or the body
        ends (then sink(b"", now) once); raises the transport's failure."""
        early, self._early = self._early, []
        for block, now in early:
            if sink(block, now) or not block:
                self._consumer_finished()
                return
        if self._consumer_done or self._pending_exc is not None:
            await self._wait()
            return
        self._sink = sink
        await self._wait()

    async def read_body(self, limit: int) -> bytes:
        """Up to ``limit`` bytes of the body (an error reply's text)."""
        got: list[bytes] = []
        size = 0

        def sink(block: bytes, now: int) -> bool:
            nonlocal size
            got.append(block)
            size += len(block)
            return size >= limit

        try:
            await self.stream(sink)
        except TransportError:
            pass  # what arrived is enough to say what the server answered
        return b"".join(got)[:limit]

    def done_with(self, reusable: bool = True) -> None:
        """The caller has finished with this request (after success or failure).
        A reply that is over goes back to the pool (or is closed); one whose
        consumer has all it wants ([DONE]) while the body's last chunk is still
        on its way goes back when that arrives (5 s at most), unless the caller
        says it is not ``reusable`` (the consumer gave up on a reply that may
        stream on forever, e.g. past max_tokens); any other is closed, never reused."""
        self._handed_back = True
        if self.state == _DONE:
            self._recycle()
        elif (
            reusable
            and self.state == _BODY
            and self._consumer_done
            and not self._body_done
            and self._keep
            and not self.lost
        ):
            self._disarm()
            self._arm(5.0)
        elif self.state != _IDLE:
            self._disarm()
            self.state = _IDLE
            self._keep = False
            if self.transport is not None:
                self.transport.close()


class StreamPool:
    """Keep-alive connections per (scheme, host, port); an async context
    manager that closes them all on exit."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None):
        self._ssl = ssl_context
        self._idle: dict[tuple, list[Connection]] = {}
        self._all: set[Connection] = set()
        self._targets: dict[str, tuple] = {}

    async def __aenter__(self) -> StreamPool:
        return self

    async def __aexit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for conn in list(self._all):
            if conn.transport is not None:
                conn.transport.close()
        self._all.clear()
        self._idle.clear()

    def _target(self, base: str) -> tuple:
        """(key, host, port, path prefix, Host header) of a base URL, parsed once."""
        t = self._targets.get(base)
        if t is None:
            parts = urlsplit(base)
            https = parts.scheme == "https"
            port = parts.port or (443 if https else 80)
            host_hdr = parts.netloc.rsplit("@", 1)[-1]  # Endpoint.base has no credentials anyway
            t = ((parts.scheme, parts.hostname, port), parts.hostname, port, parts.path.rstrip("/"), host_hdr)
            self._targets[base] = t
        return t

    def _forget(self, conn: Connection) -> None:
        self._all.discard(conn)
        idle = self._idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)

    def _release(self, conn: Connection) -> None:
        conn.reused = True
        self._idle.setdefault(conn.key, []).append(conn)

    async def _connect(self, key: tuple, host: str, port: int, timeout_s: float) -> Connection:
        loop = asyncio.get_running_loop()
        ctx = None
        if key[0] == "https":
            ctx = self._ssl or ssl.create_default_context()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: Connection(self, key), host, port, ssl=ctx), timeout_s
            )
        except TimeoutError:
            raise ConnectTimedOut(f"no connection to {host}:{port} within {timeout_s:g} s") from None
        except OSError as exc:
            raise ConnectFailed(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from None
        self._all.add(conn)
        return conn

    async def post(
        self,
        base: str,
        path: str,
        params: list[tuple[str, str]] | None,
        body: bytes,
        headers: dict[str, str],
        connect_timeout_s: float,
        read_timeout_s: float,
    ) -> Connection:
        """Send one POST and wait for the reply's head; the connection is then
        the caller's until ``done_with``. A reused connection that the server
        had closed before replying is replaced by a fresh one, once."""
        key, host, port, prefix, host_hdr = self._target(base)
        target = prefix + path + ("?" + urlencode(params) if params else "")
        lines = [
            f"POST {target} HTTP/1.1",
            f"Host: {host_hdr}",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
            "Accept: text/event-stream",
            "Accept-Encoding: identity",
            "User-Agent: specdec",
        ]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
        for attempt in (0, 1):
            # the retry takes a fresh connection: the other idle ones may be as stale (a server
            # that closes idle keep-alive connections closes them all, e.g. llama-server's)
            idle = self._idle.get(key) if attempt == 0 else None
            conn = None
            while idle:
                c = idle.pop()
                if not c.lost and c.transport is not None and not c.transport.is_closing():
                    conn = c
                    break
            if conn is None:
                conn = await self._connect(key, host, port, connect_timeout_s)
            conn.send(request, read_timeout_s)
            try:
                await conn.head()
                return conn
            except StreamBroken as exc:
                conn.done_with()
                if attempt == 0 and conn.reused and exc.before_reply:
                    continue
                raise
            except BaseException:
                conn.done_with()
                raise
        raise AssertionError("unreachable")
