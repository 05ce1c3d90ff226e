"""Listening addresses: whether a server command binds beyond loopback, and
the one warning every server command prints when it does.

``specdec-capture proxy`` and ``specdec-capture sidecar`` listen on
127.0.0.1 unless told otherwise. When the user passes another address
(``0.0.0.0``, ``::``, a LAN address, a host name), anyone who can reach that
address reaches the server, and none of these servers authenticates. The
warning names the address and what it exposes, so the choice is a conscious
one. No name is resolved here (a slow resolver must not delay a start): only
``localhost`` and loopback IP literals count as loopback.

    warn_if_exposed("0.0.0.0", "the recording proxy: an unauthenticated route to http://127.0.0.1:8000")
"""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import Callable

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


def is_loopback(host: str) -> bool:
    """True when ``host`` (as given to ``--listen``, brackets allowed) is a
    loopback address or ``localhost``; an unresolved name is not."""
    name = host.strip().strip("[]").lower()
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def reach(host: str) -> str:
    """Who can reach a server bound to ``host``, in words."""
    name = host.strip().strip("[]")
    if name in ("", "0.0.0.0", "::", "0:0:0:0:0:0:0:0"):
        return f"every network interface of this machine ({name or 'all addresses'})"
    return f"anyone who can reach {name}"


def exposure_warning(host: str, what: str) -> str | None:
    """The warning for a server listening on ``host`` that offers ``what``
    (e.g. "an unauthenticated route to the upstream http://..."); None on loopback."""
    if is_loopback(host):
        return None
    return (
        f"WARNING: listening beyond loopback, on {reach(host)}: this exposes {what}, "
        f"with no authentication. Listen on 127.0.0.1 unless that is what you want."
    )


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def warn_if_exposed(host: str, what: str, emit: Callable[[str], None] | None = None) -> str | None:
    """Emit (default: print to stderr) and return the warning when ``host`` is
    not loopback; do nothing and return None when it is."""
    text = exposure_warning(host, what)
    if text is not None:
        (emit or _stderr)(text)
    return text
