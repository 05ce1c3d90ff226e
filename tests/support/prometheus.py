"""Reading a Prometheus text exposition in the tests (the sidecar's /metrics),
and the fixed clock the sidecar tests render it at."""

from __future__ import annotations

#: the sidecar tests' "now": 2026-05-28 20:26:40 UTC
NOW_NS = 1_780_000_000 * 10**9


def samples(text: str) -> dict[str, float]:
    """'name{labels}' -> value of a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out
