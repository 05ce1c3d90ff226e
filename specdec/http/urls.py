"""Server URLs without their secrets, and how a request to one is sent.

A user may write credentials into a URL (``http://user:pass@host:8000``,
``http://host:8000?api_key=...``). The request still needs them, but nothing
that specdec writes (manifest, logs, error texts, report) may contain them.
``parse_endpoint`` splits a URL into the parts a request uses and a redacted
display form; ``redact_url`` and ``redact_text`` are for everything else.

``ClientSettings`` (timeouts, API key) and ``request_headers`` say how every
request to an engine's server is sent: the replay client, the counter reads
(``metrics.py``) and the capture sidecar share them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import aiohttp

from specdec.errors import SpecdecError

MASK = "***"
#: Query parameters whose values are treated as secrets (case-insensitive, substring match).
SECRET_PARAM_WORDS = ("key", "token", "secret", "password", "passwd", "auth", "signature", "sig", "credential")

_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/\s@]+)@")
_QUERY_SECRET = re.compile(
    r"(?P<name>[?&](?:[^=&\s#]*(?:" + "|".join(SECRET_PARAM_WORDS) + r")[^=&\s#]*))=(?P<value>[^&\s#]*)",
    re.IGNORECASE,
)
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+")


def _is_secret_param(name: str) -> bool:
    low = name.lower()
    return any(w in low for w in SECRET_PARAM_WORDS)


def redact_url(url: str | None) -> str | None:
    """The URL with user:password and secret-looking query values masked."""
    if url is None:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_text(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rsplit('@', 1)[1]}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, MASK if _is_secret_param(k) else v) for k, v in pairs], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_text(text: str | None, secrets: tuple[str, ...] = ()) -> str | None:
    """Mask URL credentials, secret query values, bearer tokens and the given
    literal secrets anywhere in free text (error messages, log lines)."""
    if text is None:
        return None
    out = _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    out = _QUERY_SECRET.sub(lambda m: f"{m['name']}={MASK}", out)
    out = _BEARER.sub(lambda m: f"{m.group(1)}{MASK}", out)
    for s in secrets:
        if s:
            out = out.replace(s, MASK)
    return out


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible server: where requests go, and how it is shown."""

    base: str  # scheme://host[:port][/path], no credentials, no query, no trailing slash
    display: str  # the user's URL, redacted: safe to write anywhere
    query: tuple[tuple[str, str], ...] = ()
    user: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)

    def url(self, path: str) -> str:
        return f"{self.base}{path}"

    @property
    def params(self) -> list[tuple[str, str]]:
        return list(self.query)

    @property
    def secrets(self) -> tuple[str, ...]:
        vals = [self.password or "", self.user or ""]
        vals += [v for k, v in self.query if _is_secret_param(k)]
        return tuple(v for v in vals if len(v) >= 3)

    @property
    def path_ends_with_v1(self) -> bool:
        return self.base.rstrip("/").endswith("/v1")


def parse_endpoint(url: str, option: str = "URL") -> Endpoint:
    """Validate a server URL (http/https with a host) and split it."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port  # raises ValueError on a bad port
    except ValueError as exc:
        raise SpecdecError(f"{option} {redact_url(url)!r} is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SpecdecError(
            f"{option} {redact_url(url)!r} must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:8000"
        )
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc = f"{host}:{port}" if port else host
    base = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
    return Endpoint(
        base=base,
        display=redact_url(url.strip().rstrip("/")) or "",
        query=tuple(parse_qsl(parts.query, keep_blank_values=True)),
        user=parts.username,
        password=parts.password,
    )


@dataclass(frozen=True)
class ClientSettings:
    """How requests are sent. ``request_timeout_s`` is the longest wait for the
    next byte (the first one included), so a long generation that keeps
    streaming never times out, and a hung server fails within that time."""

    connect_timeout_s: float = 10.0
    request_timeout_s: float = 60.0
    api_key: str | None = field(default=None, repr=False)
    #: The wall limit of a request grows by this much per requested token
    #: (``wall_limit_s``): 1 s a token is far slower than any engine decodes.
    wall_s_per_token: float = 1.0

    def wall_limit_s(self, max_tokens: int | None) -> float | None:
        """Longest a request may take from send to its last byte, however
        steadily bytes arrive: the request timeout (the wait for the first
        byte) plus ``wall_s_per_token`` per requested token; None (no wall
        limit, the idle timeout only) for a payload without max_tokens."""
        if max_tokens is None:
            return None
        return self.request_timeout_s + self.wall_s_per_token * max_tokens

    def timeout(self) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(
            total=None,
            connect=self.connect_timeout_s,
            sock_connect=self.connect_timeout_s,
            sock_read=self.request_timeout_s,
        )

    def headers(self, request_id: str | None = None) -> dict[str, str]:
        h = {}
        if request_id:
            h["X-Request-Id"] = request_id
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h


def as_endpoint(base_url: str | Endpoint) -> Endpoint:
    return base_url if isinstance(base_url, Endpoint) else parse_endpoint(base_url)


def request_headers(settings: ClientSettings, ep: Endpoint, request_id: str | None = None) -> dict[str, str]:
    """Headers of every request to ep: request id, and credentials (the API key
    as a bearer token; else user:password from the URL as basic auth)."""
    headers = settings.headers(request_id)
    if ep.user and "Authorization" not in headers:
        headers["Authorization"] = aiohttp.encode_basic_auth(ep.user, ep.password or "")
    return headers
