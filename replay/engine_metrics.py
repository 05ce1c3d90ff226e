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
}


def parse_counters(text: str) -> dict[str, float | None]:
    """Sum the wanted counters in a Prometheus text exposition."""
    wanted = {v: k for k, v in COUNTERS.items()}
    out: dict[str, float | None] = {k: None for k in COUNTERS}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        name_end = min((i for i in (line.find("{"), line.find(" ")) if i >= 0), default=-1)
        if name_end < 0:
            continue
        key = wanted.get(line[:name_end])
        if key is None:
            continue
        value = float(line.rsplit(" ", 1)[1])
        out[key] = (out[key] or 0.0) + value
    return out


async def read_counters(session: aiohttp.ClientSession, base_url: str) -> dict[str, float | None]:
    """Counters of a server; all None if it has no /metrics (not vLLM)."""
    async with session.get(f"{base_url}/metrics", timeout=aiohttp.ClientTimeout(total=30)) as resp:
        if resp.status == 404:
            return {k: None for k in COUNTERS}
        resp.raise_for_status()
        return parse_counters(await resp.text())
