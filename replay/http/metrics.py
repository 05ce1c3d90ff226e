"""A server's counters and gauges, read from its ``/metrics`` page: the
replay's counter snapshots around each block (``runner.py``) and its resource
samples during one (``resources.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiohttp

from specdec.engines.metrics import COUNTERS, GAUGES, parse_counters, parse_gauges
from specdec.http.metrics import metrics_text
from specdec.http.urls import ClientSettings, Endpoint

__all__ = ["read_counters", "read_gauges"]


async def read_counters(
    session: aiohttp.ClientSession,
    base_url: str | Endpoint,
    settings: ClientSettings | None = None,
    counters: dict[str, str] | None = None,
    parse: Callable[[str], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Counters of a server (vLLM's names unless ``counters`` says otherwise); all None
    if it has no /metrics. ``parse``: the engine's ``parse_snapshot`` (the counters and
    the per-position counter) instead of the counters alone."""
    counters = COUNTERS if counters is None else counters
    text = await metrics_text(session, base_url, settings)
    if text is None:
        return {k: None for k in counters} | ({"accepted_per_position": None} if parse else {})
    return parse(text) if parse else parse_counters(text, counters)


async def read_gauges(
    session: aiohttp.ClientSession,
    base_url: str | Endpoint,
    settings: ClientSettings | None = None,
    timeout_s: float = 30,
) -> dict[str, float | None]:
    """The gauges of a server; all None if it has no /metrics."""
    text = await metrics_text(session, base_url, settings, timeout_s)
    return {k: None for k in GAUGES} if text is None else parse_gauges(text)
