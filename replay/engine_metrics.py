"""Read vLLM's cumulative Prometheus counters from ``/metrics``.

Counters are summed over label sets (engine, model_name); a counter the server
does not export (no speculation in the baseline) is None, not 0.
"""

from __future__ import annotations

import aiohttp

COUNTERS = {
    "spec_num_drafts": "vllm:spec_decode_num_drafts_total",
    "spec_num_draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "spec_num_accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
    "prefix_cache_queries": "vllm:prefix_cache_queries_total",
    "prefix_cache_hits": "vllm:prefix_cache_hits_total",
}


def parse_counters(text: str) -> dict[str, float | None]:
    """Sum the wanted counters in a Prometheus text exposition. A sample line is
    ``name[{labels}] value [timestamp]``; unparsable values are skipped."""
    wanted = {v: k for k, v in COUNTERS.items()}
    out: dict[str, float | None] = {k: None for k in COUNTERS}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        brace = line.find("{")
        space = line.find(" ")
        if brace >= 0 and (space < 0 or brace < space):
            name, rest = line[:brace], line[line.find("}", brace) + 1:]
        elif space >= 0:
            name, rest = line[:space], line[space:]
        else:
            continue
        key = wanted.get(name)
        if key is None:
            continue
        fields = rest.split()
        try:
            value = float(fields[0])
        except (IndexError, ValueError):
            continue
        out[key] = (out[key] or 0.0) + value
    return out


async def read_counters(session: aiohttp.ClientSession, base_url, settings=None) -> dict[str, float | None]:
    """Counters of a server; all None if it has no /metrics (not vLLM)."""
    from specdec.replay.client import ClientSettings, as_endpoint, request_headers

    ep = as_endpoint(base_url)
    settings = settings or ClientSettings()
    async with session.get(ep.url("/metrics"), params=ep.params or None,
                           headers=request_headers(settings, ep), timeout=aiohttp.ClientTimeout(total=30)) as resp:
        if resp.status == 404:
            return {k: None for k in COUNTERS}
        resp.raise_for_status()
        return parse_counters(await resp.text(errors="replace"))


async def reset_prefix_cache(session: aiohttp.ClientSession, base_url, settings=None) -> bool:
    """POST /reset_prefix_cache (vLLM serves it with VLLM_SERVER_DEV_MODE=1,
    which specdec sets for the servers it starts). True if the server did it;
    False if it has no such endpoint or refused (e.g. requests still running)."""
    from specdec.replay.client import ClientSettings, as_endpoint, request_headers

    ep = as_endpoint(base_url)
    settings = settings or ClientSettings()
    try:
        async with session.post(ep.url("/reset_prefix_cache"), params=ep.params or None,
                                headers=request_headers(settings, ep), timeout=aiohttp.ClientTimeout(total=30)) as resp:
            return 200 <= resp.status < 300
    except (aiohttp.ClientError, OSError, TimeoutError):
        return False
