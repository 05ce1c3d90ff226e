"""The record the sidecar writes besides the rounds: one scrape of a vLLM
server's ``/metrics`` (``specdec-capture sidecar``, lake folder ``counters/``).

The counter and gauge columns are those of ``specdec.engines.metrics``
(``COUNTERS``, ``GAUGES``), combined over label sets the same way; a test
keeps the two lists equal. A failed scrape is a row too (``scrape_ok`` false,
``error`` set, every value None): failures are data.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class CounterScrape(BaseModel):
    """One read of a server's Prometheus ``/metrics`` by the sidecar."""

    model_config = ConfigDict(extra="forbid")

    wall_time_ns: int = Field(description="Unix wall clock when the read started, ns.")
    server: str = Field(description="Base URL of the server read (the sidecar's --server).")
    spec_num_drafts: float | None = Field(
        description="vllm:spec_decode_num_drafts_total (verify rounds, cumulative); None if absent or the read failed."
    )
    spec_num_draft_tokens: float | None = Field(
        description="vllm:spec_decode_num_draft_tokens_total (cumulative); None if absent or the read failed."
    )
    spec_num_accepted_tokens: float | None = Field(
        description="vllm:spec_decode_num_accepted_tokens_total (cumulative); None if absent or the read failed."
    )
    generation_tokens: float | None = Field(
        description="vllm:generation_tokens_total (cumulative); None if absent or the read failed."
    )
    prefix_cache_queries: float | None = Field(
        description="vllm:prefix_cache_queries_total (cumulative, tokens); None if absent or the read failed."
    )
    prefix_cache_hits: float | None = Field(
        description="vllm:prefix_cache_hits_total (cumulative, tokens); None if absent or the read failed."
    )
    kv_cache_usage: float | None = Field(
        description="vllm:kv_cache_usage_perc, share of the KV cache in use, 0..1 (largest over engines); None if absent or the read failed."
    )
    requests_running: float | None = Field(
        description="vllm:num_requests_running (summed over engines); None if absent or the read failed."
    )
    scrape_ok: bool = Field(description="True if /metrics answered 200 and was parsed.")
    error: str | None = Field(
        description="Why the read failed (exception type and message, or the HTTP status); None when scrape_ok."
    )
