"""Prefix-cache hits per arm in the multi-turn cells (issue 43, item 2; vLLM
#53670: EAGLE/MTP drops the last block, the hit rate falls from 97.5% to
87-92%).

Each arm's hit rate is ``prefix_cache_hits / prefix_cache_queries`` (vLLM's
``vllm:prefix_cache_hits_total`` and ``vllm:prefix_cache_queries_total``)
summed over the differences around the cell's own requests (``probing``
reads each arm's counters before and after each request).

**The rule.** A multi-turn cell ``degrades`` when the speculative arm's hit
rate is below the baseline's by more than ``HIT_MARGIN`` over the cell's
repeats together, and below it in every repeat where both arms' counters
were read (the noise between repeats: a shortfall that one repeat does not
show is not called). Only a valid, lossless cell that drafted (``works`` or already ``degrades``) is read so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: The shortfall in hit rate (absolute: 0.02 = 2 points) the speculative arm must exceed.
HIT_MARGIN = 0.02


@dataclass(frozen=True)
class Hits:
    """Both arms' hit rates (None: not exported, or no query), what the detail says, and why the cell
    degrades (None: it does not)."""

    baseline: float | None
    speculative: float | None
    said: str | None
    why: str | None


def rate(diff: dict[str, Any] | None) -> tuple[float, float] | None:
    """(hits, queries) of one counter difference; None when not read or no query was counted."""
    if diff is None:
        return None
    hits, queries = diff.get("prefix_cache_hits"), diff.get("prefix_cache_queries")
    if not isinstance(hits, int | float) or not isinstance(queries, int | float) or queries <= 0:
        return None
    return float(hits), float(queries)


def _pooled(per: Sequence[tuple[float, float] | None]) -> float | None:
    got = [x for x in per if x is not None]
    if not got or len(got) < len(per):
        return None
    return sum(h for h, _q in got) / sum(q for _h, q in got)


def _per_repeat(log: Any, buckets: Sequence[str]) -> list[tuple[float, float] | None]:
    """Per repeat, (hits, queries) summed over ``buckets`` (``cells.ArmLog.diffs``)."""
    n = max((len(log.diffs.get(b, [])) for b in buckets), default=0)
    out: list[tuple[float, float] | None] = []
    for r in range(n):
        parts = [rate(log.diffs[b][r]) if r < len(log.diffs.get(b, [])) else None for b in buckets]
        got = [p for p in parts if p is not None]
        out.append((sum(h for h, _q in got), sum(q for _h, q in got)) if len(got) == len(parts) else None)
    return out


def judge(baseline: Any, speculative: Any, buckets: Sequence[str]) -> Hits:
    """The rule (module docstring) on one multi-turn cell's two ``cells.ArmLog``."""
    bp, sp = _per_repeat(baseline, buckets), _per_repeat(speculative, buckets)
    b, s = _pooled(bp), _pooled(sp)
    said = f"prefix cache hit rate: baseline {_pct(b)}, speculative {_pct(s)}"
    if b is None or s is None:
        return Hits(b, s, said, None)
    both = [(x[0] / x[1], y[0] / y[1]) for x, y in zip(bp, sp) if x is not None and y is not None]
    if b - s > HIT_MARGIN and both and all(ss < bb for bb, ss in both):
        why = (
            f"the speculative arm's prefix cache hit rate falls: {_pct(s)} against the baseline's {_pct(b)} "
            f"(lower in each of {len(both)} repeat{'s' if len(both) != 1 else ''}; rule: over {HIT_MARGIN:.0%} "
            "lower, in every repeat)"
        )
        return Hits(b, s, None, why)
    return Hits(b, s, said, None)


def _pct(x: float | None) -> str:
    return "not measured" if x is None else f"{x:.1%}"
