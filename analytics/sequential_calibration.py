"""The sequential design (``sequential``) and the fixed one on the same synthetic runs
(``calibration.simulate``: the noise structures the intervals do not assume).

One synthetic run is drawn at ``max_repeats`` repeats. The fixed design reads its first
``fixed_repeats`` (``intervals.compute``, the verdict's labels). The sequential design looks
after repeat ``first``, ``first`` + 1, ...: at each look the data it has are, for a level still
open, its repeats so far, and for a level that left at repeat c, its first c repeats (what the
replay would have sent: a level leaves the schedule once every cell at it is decided); its
intervals are ``intervals.compute`` on those data and its decisions ``sequential.decide``.

Per run it reports the false ``faster``/``slower`` labels (against the truth), the labels of
the cells with a true effect, ``equivalent`` at a true 1.00x, the repeats each level ran, and
how many of the fixed design's decisions (faster, slower, equivalent) the sequential design
also reached. ``spend=False`` is the planted method that looks at the full 5% every time
(stopping without spending), which must fail the family-wise goal under A/A.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from specdec.analytics import intervals
from specdec.analytics.calibration import Design, Noise, simulate
from specdec.analytics.sequential import RHO, cells_from_rows, decide

__all__ = ["SequentialResult", "compare"]

DECIDED = ("faster", "slower", "equivalent")


@dataclass(frozen=True)
class SequentialResult:
    runs: int
    fixed_repeats: int
    max_repeats: int
    fixed_false_runs: float  # runs with a false faster/slower label, fixed design
    sequential_false_runs: float  # the same, sequential design
    fixed_power: float  # category cells with a true effect > 0 labelled faster, fixed
    sequential_power: float
    fixed_equivalent: float  # cells at a true 1.00x labelled equivalent, fixed
    sequential_equivalent: float
    fixed_decisions_reached: float  # of the fixed design's decided cells, share the sequential one decided alike
    mean_repeats: float  # repeats per level, sequential (the fixed design: fixed_repeats)
    repeats_ratio: float  # mean_repeats / fixed_repeats

    def line(self) -> dict:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def _cut(pairs, blocks, closed: Mapping[int, int], upto: int):
    """The rows a replay would have by now: a level that left at repeat c keeps its first c."""

    def keep(level, repeat):
        return repeat < min(closed.get(level, upto), upto)

    return [p for p in pairs if keep(p[2], p[4])], [b for b in blocks if keep(b[1], b[2])]


def _labels(rows) -> dict[tuple, str]:
    return {(r[0], r[1], r[2]): r[11] for r in rows if r[4] == "family" and r[3] is None}


def _sequential(pairs, blocks, design: Design, order, max_repeats, first, margin, spend, rho):
    closed: dict[int, int] = {}
    labels: dict[tuple, str] = {}
    spent_before = 0.0
    for r in range(first, max_repeats + 1):
        p, b = _cut(pairs, blocks, closed, r)
        # a look reads the measurement rows only (cells_from_rows): the family rows' correlated step-down
        # (a Monte Carlo per family) is not needed here, and was half this benchmark's time
        rows = intervals.compute(
            p, b, margin=margin, order={k: v for k, v in order.items() if k[1] < r}, correlated=False
        )
        cells = {k: c for k, c in cells_from_rows(rows).items() if k not in labels and k[2] not in closed}
        final = r == max_repeats
        if spend:
            look = decide(cells, r, max_repeats, spent_before, final, margin, rho=rho)
            spent_before = look.alpha_spent
        else:  # planted: the full 5% at every look
            look = decide(cells, r, max_repeats, 0.0, final, margin, rho=0.0)
        for d in look.decided:
            labels[d.comparison, d.category, d.level] = d.label
        still = {k[2] for k in look.open}
        for lv in design.levels:
            if lv not in closed and lv not in still:
                closed[lv] = r
        if not look.open:
            break
    return labels, {lv: closed.get(lv, max_repeats) for lv in design.levels}


def compare(
    design: Design,
    noise: Noise,
    ratio: float | Mapping[tuple[str, int], float],
    runs: int,
    max_repeats: int,
    seed: int = 0,
    first: int = 2,
    margin: float = 0.05,
    spend: bool = True,
    rho: float = RHO,
) -> SequentialResult:
    """The fixed design (``design.repeats``) and the sequential one (up to ``max_repeats``) on
    ``runs`` synthetic runs (module docstring)."""
    rng = np.random.default_rng(seed)
    full = replace(design, repeats=max(max_repeats, design.repeats))
    order = full.order()
    false = [0, 0]
    power = [[0, 0], [0, 0]]  # [design][hit, cells]
    equal = [[0, 0], [0, 0]]
    reached = [0, 0]
    repeats_used: list[int] = []
    for _ in range(runs):
        pairs, blocks, truth, _category = simulate(full, noise, ratio, rng)
        p, b = _cut(pairs, blocks, {}, design.repeats)
        fixed_order = {k: v for k, v in order.items() if k[1] < design.repeats}
        fixed = _labels(intervals.compute(p, b, margin=margin, order=fixed_order))
        seq, used = _sequential(pairs, blocks, design, order, max_repeats, first, margin, spend, rho)
        repeats_used.extend(used.values())
        for i, labels in enumerate((fixed, seq)):
            wrong = False
            for (_c, cat, lv), label in labels.items():
                t = truth[cat, lv]
                wrong = wrong or (label == "faster" and t <= 0) or (label == "slower" and t >= 0)
                if t > 1e-12 and cat != intervals.SYSTEM:
                    power[i][0] += label == "faster"
                    power[i][1] += 1
                if abs(t) <= 1e-12:
                    equal[i][0] += label == "equivalent"
                    equal[i][1] += 1
            false[i] += wrong
        for key, label in fixed.items():
            if label in DECIDED:
                reached[1] += 1
                reached[0] += seq.get(key) == label
    mean_repeats = float(np.mean(repeats_used)) if repeats_used else math.nan
    return SequentialResult(
        runs,
        design.repeats,
        max_repeats,
        false[0] / runs,
        false[1] / runs,
        power[0][0] / max(power[0][1], 1),
        power[1][0] / max(power[1][1], 1),
        equal[0][0] / max(equal[0][1], 1),
        equal[1][0] / max(equal[1][1], 1),
        reached[0] / max(reached[1], 1),
        mean_repeats,
        mean_repeats / design.repeats,
    )
