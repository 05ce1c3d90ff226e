"""The sequential design (issue 41, item 3): look after every repeat, decide
what is decided, send only what is still open, and keep the verdict's error
rates under that stopping.

**The rule.** A run may repeat its levels up to ``max_repeats`` times (R). It
looks after repeat r = ``repeats`` (the first look, at least 2), r + 1, ...
Look j has the information fraction t_j = r_j / R and spends

    alpha_j = A(t_j) - A(t_{j-1}),   A(t) = alpha * t^RHO   (alpha = 5%, RHO = 1)

of the family-wise error: Holm over the cells still open, at alpha_j, on
each open cell's interval from the verdict's own variance model
(``intervals.compute`` on the repeats so far), labelled by the verdict's
own rule (``labels.judge``); ``equivalent`` by two one-sided tests at
alpha_j each (each label at 5% over the run, as in the fixed design). The
last look (R reached, or the budget cannot pay for another repeat) spends
what is left: alpha - A(t_{j-1}). A cell labelled ``faster``, ``slower`` or
``equivalent`` keeps that label and the interval of its look; a level leaves
the schedule once every cell at it is decided (its categories were sent
together; they leave together).

**Why this holds.** The looks' levels sum to at most alpha, and a false
``faster``/``slower`` at any look is a false rejection at that look's level;
by the union bound (Bonferroni over the looks) the family-wise error over the
whole run is at most the sum, alpha. The union bound needs no model of how
the looks' statistics are correlated: the intervals are t intervals on a
handful of degrees of freedom from a variance model fitted anew at each look,
so the Gaussian boundaries of a Lan-DeMets design (which assume a known
variance and independent increments) would not be exact here, and an
anytime-valid confidence sequence is wider than a t interval at every look
of a run this short. The price is conservatism where the looks' statistics
are correlated (they share repeats): measured in BENCHMARKS.md.
RHO = 1 (spending in proportion to the repeats): at the demo's noise, the first
look (2 repeats) decides little whatever it spends (a t interval on 1-3 df);
against quadratic spending, linear decided the demo's cells in 0.61 of a fixed
8-repeat design's repeats instead of 0.66, with the same power at 1.20x
(BENCHMARKS.md; 20-run exploration, then ``benchmarks/sequential.py``).

**Arms leave.** In a run of named arms each comparison's cells are its own (keyed by
the analysis run, ``<run>/<treatment>``). A comparison decided below another of the same
reference by more than the margin at every cell it has leaves: its open cells close as
``inconclusive`` (``leave_dominated``), and the replay stops sending to an arm with no open
cell (``sequential_look``'s ``open_arms``). It rejects nothing, so no error rate rises.

**Futility.** An open cell that could not be decided even at R repeats (its
standard error shrunk as the square root of R / r, its degrees of freedom
grown in proportion, the level of all the alpha not yet spent, and its point
estimate one standard error the favourable way) leaves as ``inconclusive``
with the repeats that would resolve the margin (``repeats_needed``). Leaving
for futility never rejects anything, so it cannot raise an error rate; it
costs power only where the projection is wrong. (Kept open instead while its
level ran on for another cell, it would be judged again at no cost in
repeats, but it would widen Holm's family at every look: tried 2026-12-08,
power at 1.20x in one category fell from 68% to 46%, ``benchmarks/sequential.py
--runs 300``.) Its interval in the marts is the run's at its end, drawn at
the level of the look that left it (where its label was read), so an
``inconclusive`` never shows an interval that clears 1.

**Equivalent needs 2 degrees of freedom.** A look reads ``equivalent`` only from a
cell whose interval rests on at least ``EQUIVALENT_MIN_DF`` degrees of freedom.
On 1 (two repeats, a level's own variance) a small spread met by chance makes a
tight two-one-sided-tests interval beside a family-wise one wide enough to span
0.6-1.8x (seen on llama.cpp, 2026-12-06): valid if the noise is Gaussian, and
the first thing a heavy tail or a slow block breaks. ``faster`` and ``slower``
on 1 df stand: their wide t interval has to clear 1 on its own.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace

from specdec.analytics.labels import ALPHA, holm_levels, judge
from specdec.analytics.variance import t_quantile, t_sf

__all__ = [
    "EQUIVALENT_MIN_DF",
    "RHO",
    "Cell",
    "Decision",
    "Look",
    "apply_looks",
    "cells_from_rows",
    "decide",
    "leave_dominated",
    "open_levels",
    "spent",
]

#: The spending function's power: A(t) = alpha * t^RHO (module docstring).
RHO = 1.0
#: Futility's benefit of the doubt: the estimate moved this many standard errors the favourable way.
FUTILITY_SE = 1.0
#: The fewest degrees of freedom a look reads ``equivalent`` from (module docstring).
EQUIVALENT_MIN_DF = 2.0

Key = tuple  # (comparison, category, level)


def spent(t: float, alpha: float = ALPHA, rho: float = RHO) -> float:
    """The family-wise error spent by information fraction ``t`` (0-1)."""
    return alpha * min(max(t, 0.0), 1.0) ** rho


@dataclass(frozen=True)
class Cell:
    """One open cell's measurement at a look: log-scale centre, standard error, df."""

    centre: float
    se: float
    df: float


@dataclass(frozen=True)
class Decision:
    comparison: str
    category: str
    level: int
    label: str  # faster, slower, equivalent; inconclusive when it left for futility or at the last look
    ci_low: float
    ci_high: float
    ci_level: float
    repeats: int  # the repeats it was decided on
    repeats_needed: int | None = None  # inconclusive: the repeats that would resolve the margin
    futile: bool = False
    # the 1 - 2 alpha_j interval of the two one-sided tests this look read ``equivalent`` from
    # (None where it was not computed): the run's equivalence_low/high, so the bar drawn is the one read
    tost_low: float | None = None
    tost_high: float | None = None
    # left with its arm: the comparison (same reference) whose interval clears this one's by more
    # than the margin at every cell this one has (``leave_dominated``)
    dominated_by: str | None = None


@dataclass
class Look:
    repeat: int  # repeats done at this look
    alpha_look: float
    alpha_spent: float  # after this look
    final: bool
    decided: list[Decision] = field(default_factory=list)
    open: list[Key] = field(default_factory=list)

    def record(self) -> dict:
        """The look as the manifest keeps it (JSON)."""
        return {
            "repeat": self.repeat,
            "alpha_look": self.alpha_look,
            "alpha_spent": self.alpha_spent,
            "final": self.final,
            "decided": [asdict(d) for d in self.decided],
            "open_cells": [list(k) for k in self.open],
        }


def _read_back(low: float, high: float, ci_level: float, df: float) -> Cell:
    """The cell a t interval [low, high] at ``ci_level`` on ``df`` was drawn from: centre and
    standard error of its log ratio (exp(centre +- t(1 - (1 - ci_level) / 2, df) se))."""
    lo, hi = math.log(low), math.log(high)
    q = t_quantile(1 - (1 - ci_level) / 2, df)
    return Cell((lo + hi) / 2, (hi - lo) / (2 * q) if q > 0 else math.inf, df)


def cells_from_rows(rows: Sequence[Sequence]) -> dict[Key, Cell]:
    """The measurement rows of ``intervals.compute`` (segment None) as cells: centre and standard
    error read back from the pointwise interval (``_read_back``) and its df."""
    out: dict[Key, Cell] = {}
    for row in rows:
        comparison, category, level, segment, kind, low, high, ci_level, df = row[:9]
        if kind != "measurement" or segment is not None or low is None or high is None or not df or df <= 0:
            continue
        out[comparison, category, int(level)] = _read_back(low, high, ci_level, df)
    return out


def _futile(c: Cell, repeat: int, max_repeats: int, margin: float, alpha: float, rho: float) -> bool:
    """Could the cell be decided at ``max_repeats``, at the level the last look would read it
    (alpha - A((R - 1) / R), Holm aside: the favourable case) (module docstring)?"""
    if repeat >= max_repeats or repeat < 2:
        return False
    left = alpha - spent((max_repeats - 1) / max_repeats, alpha, rho)
    if left <= 0:  # nothing left for the last look (a spending that spends everything at once)
        return False
    se = c.se * math.sqrt(repeat / max_repeats)
    df = c.df * (max_repeats - 1) / (repeat - 1)
    far = abs(c.centre) + FUTILITY_SE * c.se  # the favourable way, for a difference
    near = max(abs(c.centre) - FUTILITY_SE * c.se, 0.0)  # and for equivalence
    can_differ = far > t_quantile(1 - left / 2, df) * se
    can_be_equal = near + t_quantile(1 - left, df) * se <= math.log1p(margin)
    return not (can_differ or can_be_equal)


def decide(
    cells: Mapping[Key, Cell],
    repeat: int,
    max_repeats: int,
    spent_before: float,
    final: bool,
    margin: float,
    alpha: float = ALPHA,
    rho: float = RHO,
) -> Look:
    """One look at the open ``cells`` after ``repeat`` repeats (module docstring)."""
    total = spent(repeat / max_repeats, alpha, rho)
    alpha_look = max(alpha - spent_before, 0.0) if final else max(total - spent_before, 0.0)
    look = Look(repeat, alpha_look, spent_before + alpha_look, final)
    if not cells:
        return look
    p: dict[Hashable, float] = {
        k: 2.0 * t_sf(abs(c.centre) / c.se, c.df) for k, c in cells.items() if c.se > 0 and math.isfinite(c.se)
    }
    levels = holm_levels(p, alpha_look) if alpha_look > 0 and p else dict.fromkeys(p, 1.0)
    for key, c in cells.items():
        if not (c.se > 0 and math.isfinite(c.se)):  # no spread measured: nothing to decide on, ever
            if final:
                look.decided.append(Decision(key[0], key[1], key[2], "inconclusive", 0.0, math.inf, 0.0, repeat))
            else:
                look.open.append(key)
            continue
        j = judge(c.centre, c.se, c.df, levels[key], margin, repeat, tost_alpha=max(alpha_look, 1e-12))
        if j.label == "equivalent" and c.df < EQUIVALENT_MIN_DF:
            j = replace(j, label="inconclusive")
        futile = j.label == "inconclusive" and not final and _futile(c, repeat, max_repeats, margin, alpha, rho)
        if j.label != "inconclusive" or final or futile:
            look.decided.append(
                Decision(
                    key[0],
                    key[1],
                    key[2],
                    j.label,
                    j.ci_low,
                    j.ci_high,
                    j.level,
                    repeat,
                    j.repeats_needed,
                    futile,
                    _finite(j.tost_low),
                    _finite(j.tost_high),
                )
            )
        else:
            look.open.append(key)
    return look


def leave_dominated(
    look: Look,
    cells: Mapping[Key, Cell],
    past: Sequence[Mapping],
    references: Mapping[str, str],
    margin: float,
) -> dict[str, str]:
    """Close the open cells of every comparison that is decided below another by more than the
    margin at every cell it has (an arm of a sweep that cannot be the best k), as ``inconclusive``
    with ``dominated_by``; returns comparison -> the comparison that beats it.

    Comparison X is beaten by Y (same reference arm, ``references``: comparison -> its reference)
    when at each (category, level) of X, Y's interval lies above X's by more than the margin:
    low_Y > high_X * (1 + margin). The intervals are those the looks read: a decided cell's, from
    the look that decided it (``past`` and ``look``); an open cell's, a t interval at this look's
    level split evenly over the open cells (Bonferroni: jointly at least as wide as Holm's). Where
    every interval holds, so does every such ordering; leaving rejects nothing, so no label's error
    rate rises: what an arm that left would have measured further is what it gives up."""
    bounds: dict[Key, tuple[float, float]] = {}
    for old in past:
        for d in old.get("decided") or ():
            bounds[d["comparison"], d["category"], int(d["level"])] = (float(d["ci_low"]), float(d["ci_high"]))
    for d in look.decided:
        bounds[d.comparison, d.category, d.level] = (d.ci_low, d.ci_high)
    share = look.alpha_look / max(len(look.open), 1)
    for key in look.open:
        c = cells.get(key)
        if c is None or share <= 0 or not (c.se > 0 and math.isfinite(c.se)):
            bounds[key] = (0.0, math.inf)
            continue
        half = t_quantile(1 - share / 2, c.df) * c.se
        bounds[key] = (math.exp(c.centre - half), math.exp(c.centre + half))
    by_comparison: dict[str, dict[tuple[str, int], tuple[float, float]]] = {}
    for (comparison, category, level), b in bounds.items():
        by_comparison.setdefault(comparison, {})[category, int(level)] = b
    beaten: dict[str, str] = {}
    for x, own in by_comparison.items():
        if not any(k[0] == x for k in look.open):
            continue  # nothing of it left to close
        rivals = [y for y in by_comparison if y != x and references.get(y) == references.get(x) is not None]
        for y in rivals:
            theirs = by_comparison[y]
            if all(cell in theirs and theirs[cell][0] > high * (1 + margin) for cell, (_low, high) in own.items()):
                beaten[x] = y
                break
    if beaten:
        still = []
        for key in look.open:
            if key[0] in beaten:
                low, high = bounds[key]
                level = 1 - share if share > 0 else 0.0
                look.decided.append(
                    Decision(
                        key[0],
                        key[1],
                        key[2],
                        "inconclusive",
                        low,
                        high,
                        level,
                        look.repeat,
                        dominated_by=beaten[key[0]],
                    )
                )
            else:
                still.append(key)
        look.open = still
    return beaten


def _finite(x: float) -> float | None:
    """``x``, or None where it is NaN or infinite (the manifest holds JSON)."""
    return x if math.isfinite(x) else None


def open_levels(look: Look, levels: Sequence[int]) -> list[int]:
    """The levels of ``levels`` with a cell still open after ``look``."""
    still = {k[2] for k in look.open}
    return [lv for lv in levels if lv in still]


def _at_look_level(row: tuple, d: Mapping) -> tuple:
    """A cell left for futility: the run's own interval at its end (``row``: centre and standard
    error read back from its family interval, its df) redrawn at the level of the look that left it,
    where its label was read; if that interval clears 1 (the run's figures at the end moved past
    what the look saw), the look's own, which does not: an ``inconclusive`` never shows an interval
    that excludes 1."""
    low, high, level, df = row[5], row[6], row[7], row[8]
    look = (d["ci_low"], d["ci_high"], d["ci_level"])
    if None in (low, high, level, df) or not (0 < low <= high) or not (0 < level < 1) or df <= 0:
        return (low, high, level)
    c = _read_back(low, high, level, df)
    q_look = t_quantile(1 - (1 - float(d["ci_level"])) / 2, df)
    if not (math.isfinite(c.se) and math.isfinite(q_look)):
        return look
    lo, hi = math.exp(c.centre - q_look * c.se), math.exp(c.centre + q_look * c.se)
    return (lo, hi, float(d["ci_level"])) if lo <= 1.0 <= hi else look


def apply_looks(
    rows: Sequence[tuple],
    looks: Sequence[Mapping],
    margin: float,
    run_id: str | None = None,
    one_of_several: bool = False,
) -> list[tuple]:
    """``intervals.compute`` rows of a sequential run with its family rows' labels and intervals
    taken from the look that decided each cell (the manifest's ``looks``): read at the end at
    the full 5% on every repeat, a run that stopped when its labels looked decided would not keep
    its error rates (stopping without spending). A cell no look decided (the run was stopped
    before its last look) is ``inconclusive``; so is one a look left for futility, with the run's
    interval at its end drawn at that look's level (``_at_look_level``).

    ``run_id``: the analysis run the rows are of. A look names a cell's comparison by its
    analysis run (the run, or ``<run>/<treatment>`` for one comparison of named arms:
    ``one_of_several``); the rows name it 'ab'. Looks written before that (2026-12-06) named it
    'ab': read so for the run itself, never for one comparison of several (they collided there)."""
    from specdec.analytics.labels import label_of

    decided: dict[Key, tuple[Mapping, int]] = {}
    for look in looks:
        for d in look.get("decided") or ():
            comparison = d["comparison"]
            if run_id is not None and comparison == run_id:
                comparison = "ab"
            elif one_of_several:
                continue  # another comparison's cell, or an old look's 'ab'
            decided[comparison, d["category"], int(d["level"])] = (d, int(look["repeat"]))
    out = []
    for row in rows:
        if row[4] != "family" or row[3] is not None:
            out.append(row)
            continue
        r = list(row)
        hit = decided.get((row[0], row[1], int(row[2])))
        if hit is None:
            r[11], r[12] = "inconclusive", None
            r[16] = f"{row[16]}; sequential: open when the run stopped (no look decided it)"
        else:
            d, at = hit
            r[11] = d["label"]
            if not d.get("futile") and not d.get("dominated_by"):  # a decided cell: the interval its look read
                r[5], r[6], r[7] = d["ci_low"], d["ci_high"], d["ci_level"]
            elif d.get("futile"):  # the run's figures at the level its label was read at
                r[5], r[6], r[7] = _at_look_level(row, d)
            # a cell left for futility is inconclusive whatever its interval: it keeps the run's own
            # at the end (its look's, read at the spent level on as few as 1 df, spanned up to 18
            # orders of magnitude on a llama.cpp demo: 99.9% CI 0.00-3e18 for 1.07x)
            r[12] = label_of(d["ci_low"], d["ci_high"], margin)[1] if d["label"] in ("faster", "slower") else None
            r[14] = d.get("repeats_needed")
            decided_here = not d.get("futile") and not d.get("dominated_by")
            if decided_here and d.get("tost_low") is not None and d.get("tost_high") is not None:
                r[18], r[19] = d["tost_low"], d["tost_high"]  # the look's equivalence bar, beside its interval
            # (a cell left for futility keeps the run's 90% interval too: its look's, at the spent level
            # on 1-2 df, drew 0.33-3.0x beside a family-wise 0.89-1.13x in a demo of 2026-12-07)
            why = (
                f"left with its arm, below {d['dominated_by']} by more than the margin wherever measured"
                if d.get("dominated_by")
                else "left for futility"
                if d.get("futile")
                else "decided"
            )
            r[16] = f"{row[16]}; sequential: {why} at the look after repeat {at} (level {d['ci_level']:.4f})"
        out.append(tuple(r))
    return out
