"""A server's Prometheus page (``GET /metrics``) and vLLM's prefix-cache reset
(``POST /reset_prefix_cache``), sent with the run's ``ClientSettings``. What the
page means is the engine adapter's (``specdec/engines/metrics.py``)."""

from __future__ import annotations

import aiohttp

from specdec.http.urls import ClientSettings, Endpoint, as_endpoint, request_headers

__all__ = ["metrics_text", "reset_prefix_cache"]


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
