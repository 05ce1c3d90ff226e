"""Read vLLM's Prometheus metrics from ``/metrics``: the cumulative counters
around each block, and two gauges sampled during it (``replay/resources.py``).

Counters are summed over label sets (engine, model_name); a metric the server
does not export (no speculation in the baseline) is None, not 0. Gauges: the
KV-cache usage is the largest over engines, the running requests their sum.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiohttp

from specdec.engines.urls import ClientSettings, Endpoint, as_endpoint, request_headers

COUNTERS = {
    "spec_num_drafts": "vllm:spec_decode_num_drafts_total",
    "spec_num_draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "spec_num_accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
    "prefix_cache_queries": "vllm:prefix_cache_queries_total",
    "prefix_cache_hits": "vllm:prefix_cache_hits_total",
}


#: specdec's key -> (vLLM's gauge, how the values of its label sets combine)
GAUGES: dict[str, tuple[str, Callable[[list[float]], float]]] = {
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", max),
    "requests_running": ("vllm:num_requests_running", sum),
}


def parse_counters(text: str, counters: dict[str, str] | None = None) -> dict[str, float | None]:
    """Sum the wanted counters in a Prometheus text exposition; ``counters`` (specdec key ->
    metric name) defaults to vLLM's, another engine's adapter passes its own
    (``specdec/engines``)."""
    counters = COUNTERS if counters is None else counters
    values = _samples(text, {v: k for k, v in counters.items()})
    return {k: (sum(values[k]) if values[k] else None) for k in counters}


def parse_metrics(text: str) -> dict[str, float | None]:
    """Every counter of ``COUNTERS`` and gauge of ``GAUGES`` in one page."""
    return {**parse_counters(text), **parse_gauges(text)}


def parse_gauges(text: str) -> dict[str, float | None]:
    """The gauges of ``GAUGES``, each combined over label sets as stated there."""
    values = _samples(text, {name: k for k, (name, _how) in GAUGES.items()})
    return {k: (how(values[k]) if values[k] else None) for k, (_name, how) in GAUGES.items()}


def _samples(text: str, wanted: dict[str, str]) -> dict[str, list[float]]:
    """Metric name -> key in ``wanted``; every sample value per key. A sample
    line is ``name[{labels}] value [timestamp]``; unparsable values are skipped."""
    out: dict[str, list[float]] = {k: [] for k in wanted.values()}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        brace = line.find("{")
        space = line.find(" ")
        if brace >= 0 and (space < 0 or brace < space):
            name, rest = line[:brace], line[line.find("}", brace) + 1 :]
        elif space >= 0:
            name, rest = line[:space], line[space:]
        else:
            continue
        key = wanted.get(name)
        if key is None:
            continue
        fields = rest.split()
        try:
            out[key].append(float(fields[0]))
        except (IndexError, ValueError):
            continue
    return out


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


async def metrics_text(
    session: aiohttp.ClientSession,
    base_url: str | Endpoint,
    settings: ClientSettings | None = None,
    timeout_s: float = 30,
) -> str | None:
    """The /metrics page; None when the server has none (404). Any other
    status that is not a success raises aiohttp.ClientResponseError."""
    ep = as_endpoint(base_url)
    settings = settings or ClientSettings()
    async with session.get(
        ep.url("/metrics"),
        params=ep.params or None,
        headers=request_headers(settings, ep),
        timeout=aiohttp.ClientTimeout(total=timeout_s),
    ) as resp:
        if resp.status == 404:
            return None
        resp.raise_for_status()
        return await resp.text(errors="replace")


async def reset_prefix_cache(
    session: aiohttp.ClientSession, base_url: str | Endpoint, settings: ClientSettings | None = None
) -> bool:
    """POST /reset_prefix_cache (vLLM serves it with VLLM_SERVER_DEV_MODE=1,
    which specdec sets for the servers it starts). True if the server did it;
    False if it has no such endpoint or refused (e.g. requests still running)."""
    ep = as_endpoint(base_url)
    settings = settings or ClientSettings()
    try:
        async with session.post(
            ep.url("/reset_prefix_cache"),
            params=ep.params or None,
            headers=request_headers(settings, ep),
            timeout=aiohttp.ClientTimeout(total=30),
        ) as resp:
            return 200 <= resp.status < 300
    except (aiohttp.ClientError, OSError, TimeoutError):
        return False
