"""The stall rule of streamed structured-output and tool cells (issue 43,
item 2; vLLM #49002: a 5-12 s stall at the closing brace of a tool call's JSON
under speculation).

A streamed reply's *arrivals* are the reads that brought content or tool-call
deltas (``Reply.arrivals_ms``); its gaps are the times between consecutive
arrivals (a verify step that emits several tokens is one arrival, so
speculation's bursts are not gaps of 0). A reply's *tail gap* is the largest
gap among its last ``STALL_TAIL`` arrivals, its *stall ratio* the tail gap over
the reply's median gap.

**The rule.** The cell ``degrades`` when every speculative reply of the cell
(one per repeat) has a stall ratio of at least ``STALL_K`` and a tail gap of
at least ``STALL_K`` times the largest tail gap of the baseline arm's replies
of the cell (the same bodies, the same repeats): a slow chunk near the end
that the baseline shows too (host noise, the engine's own end-of-request
work) is not speculation's, nor one that a repeat does not show (a stall at
a closing brace happens at every closing brace). Simulated
(tests/experiments/compat/test_stall.py: 15 arrivals 10 ms apart, lognormal gaps, 5% of
chunks 5x slow in both arms, 2 repeats, 2,000 cells): flagged in 0.4% of
cells where no reply stalled, and in every cell with a 1 s stall at the end of
every speculative reply; with one stalled speculative reply
enough, about 6% of the cells with no stall were flagged.
Only a valid, lossless cell that drafted (``works`` or already ``degrades``) is read so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specdec.experiments.compat.send import Reply

#: Arrivals at the end of a reply where a stall is looked for (a closing brace, the call's last argument).
STALL_TAIL = 8
#: A tail gap this many times the reply's median gap, and this many times the baseline's largest tail gap.
STALL_K = 4.0
#: Features whose streamed cells the rule reads.
STALL_FEATURES = ("structured_output", "tools")
_MIN_GAPS = 3  # fewer gaps: no median worth the name


@dataclass(frozen=True)
class Tail:
    """One reply's tail: its largest gap among the last arrivals, its median gap (ms), their ratio."""

    gap_ms: float
    median_ms: float

    @property
    def ratio(self) -> float:
        return self.gap_ms / self.median_ms


def tail(reply: Reply) -> Tail | None:
    """The reply's tail (module docstring); None when not streamed or with fewer than 3 gaps."""
    t = reply.arrivals_ms
    if not reply.accepted or t is None or len(t) < _MIN_GAPS + 1:
        return None
    gaps = [b - a for a, b in zip(t, t[1:])]
    ordered = sorted(gaps)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    if median <= 0:
        return None  # arrivals within the clock's resolution: no median gap to compare with
    return Tail(max(gaps[-(STALL_TAIL - 1) :]), median)


@dataclass(frozen=True)
class Stall:
    """Both arms' largest stall ratios over a cell's replies, and why the cell stalls (None: it does not)."""

    baseline_ratio: float | None
    speculative_ratio: float | None
    why: str | None


def judge(baseline: Sequence[Reply], speculative: Sequence[Reply]) -> Stall:
    """The rule (module docstring) over a cell's feature replies of both arms; ``why`` names the
    largest stall."""
    bt = [x for x in (tail(r) for r in baseline) if x is not None]
    st = [x for x in (tail(r) for r in speculative) if x is not None]
    b_ratio = max((x.ratio for x in bt), default=None)
    s_ratio = max((x.ratio for x in st), default=None)
    if not bt or not st:
        return Stall(b_ratio, s_ratio, None)
    b_gap = max(x.gap_ms for x in bt)
    stalled = [x for x in st if x.ratio >= STALL_K and x.gap_ms >= STALL_K * b_gap]
    if len(stalled) < len(st):  # a stall that one speculative reply does not show is a chance slow chunk
        return Stall(b_ratio, s_ratio, None)
    worst = max(stalled, key=lambda x: x.gap_ms)
    why = (
        f"the speculative arm stalls near the end of its stream: a gap of {worst.gap_ms:.0f} ms among the last "
        f"{STALL_TAIL} arrivals, {worst.ratio:.1f}x its median gap ({worst.median_ms:.0f} ms) and "
        f"{worst.gap_ms / b_gap if b_gap > 0 else float('inf'):.1f}x the baseline's largest ({b_gap:.0f} ms); "
        f"rule: both at least {STALL_K:g}x"
    )
    return Stall(b_ratio, s_ratio, why)
