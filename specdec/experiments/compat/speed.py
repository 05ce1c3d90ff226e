"""A feature cell's speed, decided by the verdict's machinery or said to be
not measured (issue 43, item 4).

At ``--repeats 2`` a cell's own t interval (``timing.interval``) rests on 1
degree of freedom (t = 12.7): one run printed ``speedup x0.81 [0.00,
132.68]``. Here the noise of one pair's log ratio is estimated once per pair
of servers, from every feature cell's pairs together, by the verdict's
variance model (``specdec.analytics.variance.block_noise``: figures keyed by
(level, repeat), a level being one body of one cell; it splits the noise a
repeat shares from the noise of one pair and gives Satterthwaite's df), and
each cell is labelled by the verdict's rule (``specdec.analytics.labels``:
Holm over the pair's cells, 5% family-wise; ``equivalent`` by TOST at the
margin) from its mean log ratio and

    se^2 = max(repeat / R + pair / n,  s^2_cell / n)

(R repeats, n pairs of the cell; s^2_cell the cell's own spread, where it
has 2 pairs or more: a cell noisier than the pool keeps its own noise, so a
stall in one pair widens that cell, not the others). A cell whose label is
``faster``, ``slower`` or ``equivalent`` shows it with its family-wise
interval; any other says ``not measured`` (with the repeats that would
resolve the margin), never an interval.

``replay`` does not import ``analytics`` (the layers): the CLI hands the
functions in (``Machinery``); without them the cells keep ``speed_label``
None (not judged).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specdec.schemas.compat import CompatCell

#: What a cell's speed says when the verdict cannot decide it (a cell with no timed pair is not judged: None).
NOT_MEASURED = "not measured"
#: A level (one body of one cell) whose spread over its repeats is over this many times the median level's is
#: left out of the pooled noise: on 1 df (2 repeats) a normal level's spread passes 30x the median (chi2_1
#: over 13.6) about once in 4,000 levels; a pair that stalled for seconds does it.
OUTLIER_K = 30.0
#: The labels a cell's speed may carry.
SPEED_LABELS = ("faster", "slower", "equivalent", NOT_MEASURED)


@dataclass(frozen=True)
class Machinery:
    """The verdict's functions (``specdec.analytics.variance`` and ``labels``) and its margin."""

    block_noise: Callable[..., Any]
    judge: Callable[..., Any]
    holm_levels: Callable[..., Mapping[Any, float]]
    t_sf: Callable[[float, float], float]
    margin: float
    alpha: float = 0.05


def pooled_noise(ratios: Mapping[str, Sequence[Sequence[Any]]], m: Machinery) -> Any:
    """The verdict's ``block_noise`` over every body of every cell, a level being (cell, body) and a
    repeat (cell, repeat): the bodies of one probe's repeat are sent back to back, while repeat r of
    two probes is not (one probe's repeats, then the next probe's). Levels whose spread is over
    ``OUTLIER_K`` times the median level's are left out of the pool (one stalled pair must not hide
    every other cell's speed); their cells keep their own spread (``judge_cells``)."""
    levels: dict[tuple[str, int], dict[int, float]] = {}
    for c, rows in ratios.items():
        for b, r, x in rows:
            levels.setdefault((c, int(b)), {})[int(r)] = float(x)
    spread = {k: _var(list(v.values())) for k, v in levels.items() if len(v) >= 2}
    if spread:
        ref = sorted(spread.values())[len(spread) // 2]
        levels = {k: v for k, v in levels.items() if not (ref > 0 and spread.get(k, 0.0) > OUTLIER_K * ref)}
    blocks = {key: i for i, key in enumerate(sorted({(k[0], r) for k, reps in levels.items() for r in reps}))}
    return m.block_noise({(k, blocks[(k[0], r)]): x for k, reps in levels.items() for r, x in reps.items()})


def _var(xs: Sequence[float]) -> float:
    mean = sum(xs) / len(xs)
    return sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)


def judge_cells(
    cells: Sequence[CompatCell], ratios: Mapping[str, Sequence[Sequence[Any]]], m: Machinery | None
) -> list[CompatCell]:
    """``cells`` with ``speed_*`` filled (module docstring); ``ratios[probe]``: the cell's pairs as
    (body, repeat, log ratio). Cells without an entry (quantization cells) are left as they are."""
    if m is None:
        return list(cells)
    noise = pooled_noise(ratios, m)
    stats: dict[str, tuple[float, float, float, int, int]] = {}  # centre, se, df, n, repeats
    for c, rows in ratios.items():
        xs = [float(x) for _b, _r, x in rows]
        n, reps = len(xs), len({int(r) for _b, r, _x in rows})
        if n == 0 or noise is None or noise.df <= 0:
            continue
        centre = sum(xs) / n
        own = _var(xs) if n >= 2 else 0.0
        var = max(noise.repeat / max(reps, 1) + noise.block / n, own / n)
        stats[c] = (centre, math.sqrt(var), noise.df, n, reps)
    p = {c: 2.0 * m.t_sf(abs(centre) / se, df) for c, (centre, se, df, _n, _r) in stats.items() if se > 0}
    levels = m.holm_levels(p, m.alpha) if p else {}
    out = []
    for cell in cells:
        if not ratios.get(cell.probe):  # no timed pair (a refusal, a failure) or no feature cell: not judged
            out.append(cell)
            continue
        if cell.probe not in p:
            why = "no noise measured"
            if noise is None or noise.df <= 0:
                why = "no body was timed in two repeats: the pair's noise is not measured"
            out.append(_with(cell, NOT_MEASURED, None, None, None, why))
            continue
        centre, se, df, _n, reps = stats[cell.probe]
        j = m.judge(centre, se, df, levels[cell.probe], m.margin, max(reps, 1))
        if j.label in ("faster", "slower", "equivalent"):
            out.append(_with(cell, j.label, j.ci_low, j.ci_high, df, None))
        else:
            need = j.repeats_needed
            many = f"more than {need - 1}" if need is not None and need > 100 else f"about {need}"
            more = f"; {many} repeats would resolve +-{m.margin:.0%}" if need else ""
            why = f"neither faster, slower nor within +-{m.margin:.0%} at this noise{more}"
            out.append(_with(cell, NOT_MEASURED, None, None, df, why))
    return out


def _with(cell: CompatCell, label: str, lo: float | None, hi: float | None, df: float | None, why: str | None):
    """The cell with its speed label, and its detail's speed put as the label says."""
    point = f"x{cell.speedup:.2f}" if cell.speedup is not None else "x?"
    pairs = f"over {cell.speedup_pairs} pair{'s' if cell.speedup_pairs != 1 else ''}"
    if lo is not None and hi is not None:
        said = f"speed {label}: {point} [{lo:.2f}, {hi:.2f}] {pairs} (pooled noise, {df:.0f} df, Holm)"
    else:
        said = f"speed {NOT_MEASURED} ({point} {pairs}: {why})"
    detail = cell.detail
    head = "speedup x"
    if detail.startswith(head) and "; " in detail:
        detail = detail.split("; ", 1)[1]
    return cell.model_copy(
        update={
            "speed_label": label,
            "speed_ci_low": lo,
            "speed_ci_high": hi,
            "speed_df": df,
            "detail": f"{said}; {detail}",
        }
    )
