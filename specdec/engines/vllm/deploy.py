"""A speculative setting per batch size in vLLM's own form: ``--speculative-config`` whose
``num_speculative_tokens_per_batch_size`` is a list of inclusive batch-size ranges
``[range_start, range_end, k]`` (vLLM 0.32.0: ``vllm/config/speculative.py``, checked by
``vllm/v1/spec_decode/dynamic/utils.py:validate_and_normalize_dynamic_sd_schedule``: each
range positive, start <= end, k >= 0, ranges sorted and non-overlapping, the first starting
at 1). The V1 scheduler expands it to a per-batch-size lookup
(``build_dynamic_sd_schedule_lookup``, ``vllm/v1/core/sched/scheduler.py``), clamping each k
to ``num_speculative_tokens`` and carrying the last range's k up to max_num_seqs; vLLM turns
it off under data parallelism (``vllm/config/vllm.py``)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

__all__ = ["schedule_config", "validate_schedule"]


def schedule_config(schedule: list[list[int]], captured: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The ``--speculative-config`` for ``schedule`` (None when every k is 0): the captured
    vLLM settings (a llama.cpp capture, which has no "method", gives vLLM's ngram) with
    ``num_speculative_tokens`` the largest k."""
    top = max((k for _, _, k in schedule), default=0)
    if top <= 0:
        return None
    vllm_like = captured is not None and "method" in captured
    config: dict[str, Any] = (
        copy.deepcopy(dict(captured)) if vllm_like and captured is not None else {"method": "ngram"}
    )
    config["num_speculative_tokens"] = top
    config["num_speculative_tokens_per_batch_size"] = schedule
    return config


def validate_schedule(schedule: object) -> list[tuple[int, int, int]]:
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
