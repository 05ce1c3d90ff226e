"""The plan in each engine's own form, and the routing.

* engines: the ``k_per_band_with_fallback`` policy's k per load band for the speculative pool,
  as batch-size ranges ``[[start, end, k], ...]`` (``schedule``), handed to every engine's
  adapter (``Engine.deployment``), which writes it in its own form: vLLM takes the schedule
  (``specdec/engines/vllm/deploy.py``), llama.cpp one k per server, the k that maximises the
  pool's gain over every band (``specdec/engines/llama_cpp/adapter.py``).
* routing: category -> ``speculative`` or ``plain`` pool. Given the rules file that
  categorised the traffic (the recording proxy's format, capture/proxy/rules.py), the same
  rules with each category replaced by its pool: a rules file the proxy reads as it is, whose
  "categories" are pools.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from specdec.analytics.plan.recommend import band_ranges
from specdec.engines import ENGINES

__all__ = ["engine_exports", "routing", "schedule", "speculative_categories"]

POOLS = ("speculative", "plain")


def _fallback(policies: list[dict]) -> dict:
    return next(p for p in policies if p["name"] == "k_per_band_with_fallback")


def speculative_categories(policies: list[dict]) -> list[str]:
    """Categories the fallback policy speculates for in at least one band."""
    bands = _fallback(policies)["bands"]
    return sorted({cat for band in bands for cat, k in band["k"].items() if k > 0})


def schedule(policies: list[dict], levels: list[int]) -> list[list[int]]:
    """The speculative pool's k per batch-size range: each load band's largest k over the
    categories, ``[[start, end, k], ...]`` from 1 (``recommend.band_ranges``)."""
    bands = _fallback(policies)["bands"]
    return [[start, end, max(band["k"].values(), default=0)] for (start, end), band in zip(band_ranges(levels), bands)]


def engine_exports(
    policies: list[dict], levels: list[int], one_k: int, captured: dict[str, Any] | None, pool_note: str
) -> dict[str, dict[str, Any]]:
    """Every engine's form of the plan (``Engine.deployment``), by engine name."""
    ranges = schedule(policies, levels)
    return {
        name: dataclasses.asdict(engine.deployment(ranges, one_k, captured, pool_note))
        for name, engine in ENGINES.items()
    }


def routing(categories: list[str], speculative: list[str], rules: dict | None = None) -> dict:
    """``{"pools": {category: pool}, "rules": ...}``: ``rules`` is the given rules file with each
    rule's category replaced by its pool (None without a rules file)."""
    pools = {c: ("speculative" if c in speculative else "plain") for c in categories}
    mapped: dict[str, list[dict]] | None = None
    if rules is not None:
        mapped = {
            "rules": [{**rule, "category": pools.get(rule.get("category"), "plain")} for rule in rules.get("rules", [])]
        }
    return {"pools": pools, "rules": mapped}
