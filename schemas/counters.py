"""The engine counters specdec keeps, stated once, and the record the sidecar
writes besides the rounds: one scrape of a vLLM server's ``/metrics``
(``specdec-capture sidecar``, lake folder ``counters/``).

``COUNTER_FIELDS`` is the one table of the counter and gauge columns: every
record that carries them (``CounterScrape`` here, ``MetricSnapshot`` and
``PassCounters`` in ``records.py``) takes its columns from it through
``with_counters``, at the place in its column order where they stand. The
reader of ``/metrics`` (``specdec.engines.metrics``: ``COUNTERS``, ``GAUGES``)
takes its metric names from the same table. A
failed scrape is a row too (``scrape_ok`` false, ``error`` set, every value
None): failures are data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, create_model

#: specdec's key -> (vLLM's metric, what it counts). Counters are cumulative; the last two
#: are gauges. Every column is a float, None where the server does not export it.
COUNTER_FIELDS: dict[str, tuple[str, str]] = {
    "spec_num_drafts": ("vllm:spec_decode_num_drafts_total", "drafts proposed = verify rounds, cumulative"),
    "spec_num_draft_tokens": ("vllm:spec_decode_num_draft_tokens_total", "draft tokens proposed, cumulative"),
    "spec_num_accepted_tokens": ("vllm:spec_decode_num_accepted_tokens_total", "draft tokens accepted, cumulative"),
    "generation_tokens": ("vllm:generation_tokens_total", "tokens generated, cumulative"),
    "prefix_cache_queries": ("vllm:prefix_cache_queries_total", "tokens looked up in the prefix cache, cumulative"),
    "prefix_cache_hits": ("vllm:prefix_cache_hits_total", "tokens found in the prefix cache, cumulative"),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "share of the KV cache in use, 0..1, largest over engines"),
    "requests_running": ("vllm:num_requests_running", "requests running, summed over engines"),
}
#: The speculation counters: what a pass's reads keep (``PassCounters``).
SPEC_COUNTERS = ("spec_num_drafts", "spec_num_draft_tokens", "spec_num_accepted_tokens", "generation_tokens")
#: The cumulative counters (``MetricSnapshot``): the speculation ones and the prefix cache's.
ENGINE_COUNTERS = (*SPEC_COUNTERS, "prefix_cache_queries", "prefix_cache_hits")

M = TypeVar("M", bound=BaseModel)


def counter_fields(keys: Sequence[str], none_if: str, optional: Sequence[str] = ()) -> dict[str, Any]:
    """``create_model`` definitions of the columns ``keys`` of ``COUNTER_FIELDS``, each
    described as "metric (meaning); None if ``none_if``". A key in ``optional`` defaults
    to None (a column added after files were written without it); the others are required."""
    out: dict[str, Any] = {}
    for key in keys:
        metric, meaning = COUNTER_FIELDS[key]
        description = f"{metric} ({meaning}); None if {none_if}."
        info = Field(default=None, description=description) if key in optional else Field(description=description)
        out[key] = (float | None, info)
    return out


def with_counters(
    after: str, keys: Sequence[str], none_if: str, optional: Sequence[str] = ()
) -> Callable[[type[M]], type[M]]:
    """Class decorator: the model as written, with the counter columns ``keys``
    (``counter_fields``) inserted right after its field ``after``, so that its
    Arrow schema keeps the column order. The model is rebuilt from its fields,
    so it may have no methods or validators of its own (it raises if it has)."""

    def build(cls: type[M]) -> type[M]:
        own = [n for n in vars(cls) if n != "_abc_impl" and not n.startswith("__") and n != "model_config"]
        if own:
            raise TypeError(f"{cls.__name__}: with_counters would drop its own {own}")
        fields: dict[str, Any] = {}
        for name, info in cls.model_fields.items():
            fields[name] = (info.annotation, info)
            if name == after:
                fields.update(counter_fields(keys, none_if, optional))
        if after not in cls.model_fields:
            raise TypeError(f"{cls.__name__} has no field {after!r} to put the counters after")
        built = create_model(
            cls.__name__, __base__=cls.__base__, __doc__=cls.__doc__, __module__=cls.__module__, **fields
        )
        built.__qualname__ = cls.__qualname__
        if built.model_config != cls.model_config:  # create_model takes the config from __base__ only
            raise TypeError(f"{cls.__name__}: set model_config on its base, not on the model")
        return cast("type[M]", built)

    return build


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


@with_counters("server", list(COUNTER_FIELDS), none_if="absent or the read failed")
class CounterScrape(_Row):
    """One read of a server's Prometheus ``/metrics`` by the sidecar."""

    wall_time_ns: int
    """Unix wall clock when the read started, ns."""
    server: str
    """Base URL of the server read (the sidecar's --server)."""
    scrape_ok: bool
    """True if /metrics answered 200 and was parsed."""
    error: str | None
    """Why the read failed (exception type and message, or the HTTP status); None when scrape_ok."""
