"""What the recording proxy changes in the HTTP it passes on, and nothing
else: the headers it does not forward (hop-by-hop ones, those named in
``Connection``, ``Host``, ``Content-Length``, ``Expect`` and its own
``X-Specdec-*`` instructions) and the replies it gives itself when no
upstream reply came (502 unreachable, 504 silent), in the OpenAI error shape.

``Expect: 100-continue`` is answered by the proxy's own server (aiohttp sends
``100 Continue`` before the body is read) and never forwarded: the proxy
sends the upstream the whole body at once, and an upstream asked to confirm
first may never answer (HTTP/1.1 lets a server ignore Expect).
"""

from __future__ import annotations

import asyncio

from aiohttp import web

OWN_HEADER_PREFIX = "x-specdec-"
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "proxy-connection",
    }
)
NOT_FORWARDED = frozenset({"host", "content-length", "expect"})


def _named(headers) -> set[str]:
    """The headers the ``Connection`` header names (hop-by-hop too)."""
    return {t.strip().lower() for t in headers.get("Connection", "").split(",") if t.strip()}


def request_headers(headers) -> list[tuple[str, str]]:
    """Headers sent upstream: the client's, less hop-by-hop, Host, Content-Length, Expect and X-Specdec-*."""
    drop = HOP_BY_HOP | _named(headers) | NOT_FORWARDED
    return [(k, v) for k, v in headers.items() if k.lower() not in drop and not k.lower().startswith(OWN_HEADER_PREFIX)]


def response_headers(headers) -> list[tuple[str, str]]:
    """Headers sent back: the upstream's, less hop-by-hop ones."""
    drop = HOP_BY_HOP | _named(headers)
    return [(k, v) for k, v in headers.items() if k.lower() not in drop]


def no_reply(exc: BaseException, idle_s: float) -> tuple[str, web.Response]:
    """(counter, the proxy's own reply) when the upstream gave no reply: 504 when it
    sent nothing for ``idle_s``, 502 when it could not be reached."""
    if isinstance(exc, asyncio.TimeoutError):
        kind, code, text = "upstream_timeout", 504, f"no reply from upstream in {idle_s:g} s"
        counter = "upstream_timeouts"
    else:
        kind, code, text = "upstream_unreachable", 502, f"upstream not reachable ({type(exc).__name__})"
        counter = "upstream_unreachable"
    body = {"error": {"message": f"specdec proxy: {text}", "type": kind, "code": code}}
    return counter, web.json_response(body, status=code)
