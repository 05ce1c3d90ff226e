"""The plan in each engine's own form.

* vLLM: a ``--speculative-config`` whose ``num_speculative_tokens_per_batch_size`` is a
  list of inclusive batch-size ranges ``[range_start, range_end, k]`` (vLLM 0.32.0:
  ``vllm/config/speculative.py``, checked by
  ``vllm/v1/spec_decode/dynamic/utils.py:validate_and_normalize_dynamic_sd_schedule``: each
  range positive, start <= end, k >= 0, ranges sorted and non-overlapping, the first starting
  at 1). The V1 scheduler expands it to a per-batch-size lookup
  (``build_dynamic_sd_schedule_lookup``, ``vllm/v1/core/sched/scheduler.py``), clamping each
  k to ``num_speculative_tokens`` and carrying the last range's k up to max_num_seqs; vLLM
  turns it off under data parallelism (``vllm/config/vllm.py``). The schedule is the
  ``k_per_band_with_fallback`` policy's k per load band for the speculative pool, and
  ``num_speculative_tokens`` its largest k.
* llama.cpp: one k per server (no batch-size schedule): the speculative pool's flags
  ``--spec-type ngram-mod --spec-ngram-mod-n-max K --spec-ngram-mod-n-min 0``, or
  ``-md D.gguf --spec-type draft-simple --spec-draft-n-max K --spec-draft-n-min 0`` (the built
  llama-server's names, ``specdec.engines.llama_cpp.speculation_flags``), with the k that
  maximises the pool's gain over every band.
* routing: category -> ``speculative`` or ``plain`` pool. Given the rules file that
  categorised the traffic (the recording proxy's format, capture/proxy/rules.py), the same
  rules with each category replaced by its pool: a rules file the proxy reads as it is, whose
  "categories" are pools.
"""

from __future__ import annotations

import copy
from typing import Any

from specdec.analytics.plan.recommend import band_ranges
from specdec.engines.llama_cpp import speculation_flags

__all__ = ["llama_cpp_flags", "routing", "vllm_schedule", "vllm_validate"]

POOLS = ("speculative", "plain")


def _fallback(policies: list[dict]) -> dict:
    return next(p for p in policies if p["name"] == "k_per_band_with_fallback")


def speculative_categories(policies: list[dict]) -> list[str]:
    """Categories the fallback policy speculates for in at least one band."""
    bands = _fallback(policies)["bands"]
    return sorted({cat for band in bands for cat, k in band["k"].items() if k > 0})


def vllm_schedule(policies: list[dict], levels: list[int], captured_config: dict[str, Any] | None) -> dict:
    """``{"num_speculative_tokens_per_batch_size": [[start, end, k], ...], "speculative_config": {...}}``;
    the config is None when the plan turns speculation off everywhere."""
    bands = _fallback(policies)["bands"]
    schedule = []
    for (start, end), band in zip(band_ranges(levels), bands):
        schedule.append([start, end, max(band["k"].values(), default=0)])
    top = max(k for _, _, k in schedule)
    config: dict[str, Any] | None = None
    if top > 0:
        # the captured arm's vLLM settings; a llama.cpp capture (no "method") gives vLLM's ngram
        vllm_like = captured_config is not None and "method" in captured_config
        config = copy.deepcopy(dict(captured_config)) if vllm_like else {"method": "ngram"}  # type: ignore[arg-type]
        config["num_speculative_tokens"] = top
        config["num_speculative_tokens_per_batch_size"] = schedule
    return {
        "num_speculative_tokens_per_batch_size": schedule,
        "speculative_config": config,
        "note": "the last range's k carries on to max_num_seqs (vLLM's lookup); serve the plain pool's "
        "categories without --speculative-config",
    }


def vllm_validate(schedule: object) -> list[tuple[int, int, int]]:
    """The rules of vLLM 0.32.0's ``validate_and_normalize_dynamic_sd_schedule``, restated
    (for hosts without vLLM; a test checks both agree on the export): ValueError when broken."""
    if not isinstance(schedule, list) or not schedule:
        raise ValueError("must be a non-empty list of (range_start, range_end, k)")
    out = []
    for entry in schedule:
        if not isinstance(entry, list | tuple) or len(entry) != 3:
            raise ValueError("each entry must be a 3-item sequence")
        s, e, k = (int(v) for v in entry)
        if s <= 0 or e <= 0 or s > e or k < 0:
            raise ValueError(f"bad entry {entry!r}")
        out.append((s, e, k))
    out.sort(key=lambda t: t[0])
    prev = 0
    for s, e, _ in out:
        if s <= prev:
            raise ValueError("ranges must be non-overlapping and sorted")
        prev = e
    if out[0][0] != 1:
        raise ValueError("the first range must start at 1")
    return out


def llama_cpp_flags(pool_k: int, captured_config: dict[str, Any] | None) -> dict:
    """The speculative pool's llama-server flags (none when k is 0), and the arm mapping specdec's
    llama.cpp adapter takes (``speculation``: type, n_max, n_min)."""
    if pool_k <= 0:
        return {"k": 0, "speculation": None, "flags": []}
    kind = (captured_config or {}).get("type", "ngram-mod")
    speculation: dict[str, Any] = {"type": kind, "n_max": pool_k, "n_min": 0}
    if kind == "draft-simple" and (captured_config or {}).get("draft_model"):
        speculation["draft_model"] = captured_config["draft_model"]  # type: ignore[index]
    return {"k": pool_k, "speculation": speculation, "flags": speculation_flags(speculation)}


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
