"""The proxy's connection guards: a bound on the time a client may take to
send a request's headers (slowloris), and one log line, not a traceback, per
malformed request.

aiohttp's server has neither: a connection that sends one byte a second is
kept open for as long as the keep-alive timeout (an hour), and every request
it cannot parse is logged with a full traceback (a port scan floods the log).

``HeaderGuard`` wraps aiohttp's per-connection protocol. Its clock starts when
the connection opens, and again at the first byte after a response; it stops
when aiohttp hands the request to the application (``guard_middleware``).
When it runs out, the client gets ``408 Request Timeout`` and the connection
is closed. ``GuardedSite`` is a ``TCPSite`` whose connections are guarded.
``OneLineLog`` is the logger aiohttp's server is given: a malformed request
becomes one warning line naming the peer and the parser's complaint; anything
else (a bug in a handler) keeps its traceback.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

log = logging.getLogger("specdec.capture.proxy.service")

BACKLOG = 128  # aiohttp's own default
REQUEST_TIMEOUT_REPLY = b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"


class HeaderGuard(asyncio.Protocol):
    """One connection: aiohttp's protocol inside, a header-read clock outside."""

    def __init__(self, inner: asyncio.Protocol, timeout_s: float, guards: dict, on_timeout: Callable[[str], None]):
        self.inner, self.timeout_s, self.guards, self.on_timeout = inner, timeout_s, guards, on_timeout
        self.transport: asyncio.Transport | None = None
        self.waiting = True  # for a request's headers (False while the application has the request)
        self.idle = False  # a response was sent and no byte of the next request came yet
        self.timer: asyncio.TimerHandle | None = None

    def _arm(self) -> None:
        self.waiting = True
        if self.timer is None:
            self.timer = asyncio.get_running_loop().call_later(self.timeout_s, self._expire)

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _expire(self) -> None:
        self.timer = None
        if not self.waiting or self.transport is None or self.transport.is_closing():
            return
        peer = self.transport.get_extra_info("peername")
        self.on_timeout(f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer))
        self.transport.write(REQUEST_TIMEOUT_REPLY)
        self.transport.close()

    # ------------------------------------------------ called by the application
    def request_started(self) -> None:
        self._disarm()
        self.waiting = False

    def request_done(self) -> None:
        self.idle = True  # the clock starts again at the next request's first byte

    # ------------------------------------------------ asyncio.Protocol, passed on
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.guards[transport] = self
        self.inner.connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self.idle and data:
            self.idle = False
            self._arm()
        self.inner.data_received(data)

    def eof_received(self):
        return self.inner.eof_received()

    def connection_lost(self, exc) -> None:
        self._disarm()
        self.guards.pop(self.transport, None)
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


def guard_middleware(guards: dict):
    """The middleware that stops a connection's header clock when its request
    reaches the application, and restarts the watch when the response is done."""

    @web.middleware
    async def middleware(request: web.Request, handler):
        guard = guards.get(request.transport)
        if guard is not None:
            guard.request_started()
        try:
            return await handler(request)
        finally:
            if guard is not None:
                guard.request_done()

    return middleware


class GuardedSite(web.BaseSite):
    """A TCP site whose every connection is wrapped in a ``HeaderGuard``."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        timeout_s: float,
        guards: dict,
        on_timeout: Callable[[str], None],
    ):
        super().__init__(runner)
        self.host, self.port, self.timeout_s, self.guards, self.on_timeout = host, port, timeout_s, guards, on_timeout

    @property
    def name(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def _protocol(self) -> HeaderGuard:
        server = self._runner.server
        assert server is not None  # the runner is set up before any of its sites starts
        return HeaderGuard(server(), self.timeout_s, self.guards, self.on_timeout)

    async def start(self) -> None:
        await super().start()
        self._server = await asyncio.get_running_loop().create_server(
            self._protocol, self.host, self.port, backlog=BACKLOG
        )


class OneLineLog:
    """The logger of aiohttp's server: a malformed request is one warning line
    (and ``on_bad_request`` is called); everything else goes to ``aiohttp.server``
    as it would have."""

    def __init__(self, on_bad_request: Callable[[], None]):
        self.on_bad_request = on_bad_request
        self.base = logging.getLogger("aiohttp.server")

    def _bad(self, args, kw) -> bool:
        exc = kw.get("exc_info")
        if not isinstance(exc, HttpProcessingError):
            return False
        self.on_bad_request()
        peer = args[1] if len(args) > 1 else "?"
        text = " ".join(str(getattr(exc, "message", "") or exc).split())[:200]
        log.warning(
            "specdec proxy: malformed request from %s: %s %s (answered %s)",
            peer,
            type(exc).__name__,
            text,
            getattr(exc, "code", 400),
        )
        return True

    def exception(self, *args, **kw) -> None:
        if not self._bad(args, kw):
            self.base.exception(*args, **kw)

    def debug(self, *args, **kw) -> None:
        if not self._bad(args, kw):
            self.base.debug(*args, **kw)

    def __getattr__(self, name: str):
        return getattr(self.base, name)
