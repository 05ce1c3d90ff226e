"""Paired speedups of ``specdec compat``'s cells: the feature probes' and the
quantization cells' alike.

A *pair* is one request body sent once to each arm, the two sends adjacent
(their order alternated from pair to pair); its log ratio is
ln(baseline e2e / speculative e2e). A cell's speedup is the geometric mean of
its pairs' ratios with a 95% Student t interval of the mean log ratio (pairs
- 1 degrees of freedom), mapped back with exp. The pairs of a cell share two
server processes: the interval covers request-to-request noise, not
server-to-server, and it is pointwise (not adjusted across cells).

``relative``: per repeat, the mean log ratio of the feature's pairs minus the
log ratio of the plain twin's pair, pooled the same way: the speedup with the
feature over the speedup without it, on the same prompt and the same servers.
An interval wholly below 1 is a gain that falls with the feature.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # light at import: ``run`` reads DEFAULT_REPEATS before any request module is loaded
    from specdec.experiments.compat.send import Reply

#: Times each feature probe's requests are sent per arm (``--repeats``). 2 pairs are the fewest that give
#: a 95% interval, on 1 df (t = 12.7): about 3x wider on the log scale than 3 pairs' (t = 4.3), so that
#: almost no speed difference clears the ``degrades`` margin. 2 keeps ``specdec compat --engine both``
#: near its time goal on a 2-core host (docs/compat.md); ask for 3 or more where the speed rule matters.
DEFAULT_REPEATS = 2

#: (geometric mean, 95% interval low, high, n); low/high None with n < 2, all None with n = 0.
Interval = tuple[float | None, float | None, float | None, int]


def log_ratio(base: Reply, spec: Reply) -> float | None:
    """ln(baseline e2e / speculative e2e) of one pair; None unless both arms answered and were timed."""
    if base.accepted and spec.accepted and base.e2e_ms and spec.e2e_ms:
        return math.log(base.e2e_ms / spec.e2e_ms)
    return None


def interval(logs: Sequence[float]) -> Interval:
    """The geometric mean of exp(logs) with its 95% t interval (module docstring)."""
    n = len(logs)
    if n == 0:
        return None, None, None, 0
    mean = sum(logs) / n
    if n < 2:
        return math.exp(mean), None, None, n
    from scipy.stats import t  # heavy: scipy, only when a cell's interval is drawn

    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    half = float(t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half), n


def speedup(base: Sequence[Reply], spec: Sequence[Reply]) -> Interval:
    """The paired speedup over the pairs (base[i], spec[i]) that both arms timed."""
    return interval([x for x in (log_ratio(b, s) for b, s in zip(base, spec)) if x is not None])


def relative(feature: Sequence[Sequence[tuple[Reply, Reply]]], twin: Sequence[tuple[Reply, Reply]]) -> Interval:
    """Speedup with the feature / speedup on the twin, per repeat then pooled (module docstring).
    ``feature[r]``: repeat r's (baseline, speculative) feature pairs; ``twin[r]``: its twin pair."""
    diffs = []
    for pairs, (tb, ts) in zip(feature, twin):
        logs = [x for x in (log_ratio(b, s) for b, s in pairs) if x is not None]
        t = log_ratio(tb, ts)
        if logs and t is not None:
            diffs.append(sum(logs) / len(logs) - t)
    return interval(diffs)


def text(iv: Interval) -> str:
    """'x0.93 over 3 pairs'; '' without a speedup. No interval: a cell's own, on repeats - 1 df, can
    span orders of magnitude; its speed is decided once the pair's cells are in (``speed``)."""
    point, _lo, _hi, n = iv
    if point is None:
        return ""
    return f"x{point:.2f} over {n} pair{'s' if n != 1 else ''}"


def log_ratios(per_repeat_b: Sequence[Sequence[Reply]], per_repeat_s: Sequence[Sequence[Reply]]) -> list[list]:
    """[body, repeat, log ratio] of every timed pair (``speed``'s input)."""
    out: list[list] = []
    for r, (bs, ss) in enumerate(zip(per_repeat_b, per_repeat_s)):
        for i, (b, s) in enumerate(zip(bs, ss)):
            x = log_ratio(b, s)
            if x is not None:
                out.append([i, r, x])
    return out
