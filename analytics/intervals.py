"""Confidence intervals and labels of the speedup, computed at build time.

``build`` creates the table ``int_speedup_intervals`` empty before the SQL
models (so the ``speedup`` mart can be created over it), then fills it from the
paired rows once every view exists (``fill``). Everything is a geometric mean
of paired ratios, so intervals are built on ``log_ratio`` and mapped back with
``exp``.

**Block figures.** The noise that counts is the noise of a whole block (one
arm running one level once) and of a server process (shared by every level of
a repeat): requests within a block move together, so the unit is the block.
Each repeat r of a group (category, level) gives one block figure: the mean
log ratio over the group's pairs in that repeat (``(system)``: the block
throughput log ratio; ``(weighted)``: ln(sum w Tb / sum w Ts) over the level's
weighted categories; a natural-end segment: its pairs' mean).

**Noise model** (``variance.level_noise``): per series (one category, or
``(system)``, across its levels) the block figures are mu[level] + g *
order + a[repeat] + w[level, repeat]: the arm order (which arm's block ran
second, read from the blocks' first send times) as a fixed effect, a shift
shared by the levels of a repeat, and the block's own noise, whose variance
is pooled over the levels unless the pooling test (``POOL_ALPHA``: the
calibration check's p-value for the level, ``fit.py``, on the figures with
or without slow blocks) sets the level apart with a variance of its own.
Slow blocks (a figure far from its level's others in at least half of the
family's series, ``variance.slow_blocks``) are kept: the calibration check
reads the figures without them, the pooling test with and without, so a
level with a slow block gets a variance of its own and the block widens that
level's interval and no other. Variances by method of moments, Satterthwaite's degrees of
freedom for the design. Each category has its own variances (no
pooling across categories: chat's request noise is 2-3x the others'). The
row's ``method`` says what the model did for it (own or pooled variance, the
order effect fitted, slow blocks found at the level): the run's notes.

**Interval kinds** (``interval`` column), on the log scale, mapped back with exp:

- ``measurement`` (``comparison = 'ab'``; categories, ``(system)``, segments,
  ``(weighted)``): prompts fixed, centre = mean of the group's R block
  figures, +- t(0.975, df) * sqrt(V / R). The plain (pointwise) 95% interval.
- ``family``: the same interval at the step-down level for the row's rank in
  the run's family (every measurement row of the ``speedup`` mart, or of the
  natural-end segments; ``labels.step_down_levels``, rows at one level
  correlated as their series' residuals), and the label read from it
  (``labels.py``: faster / slower / equivalent / inconclusive against the
  run's margin). ci_level says the level (0.95 for a family of one; at most
  Sidak's 0.95^(1/m) for the first row, lower where the rows move together).
- ``prompts`` (categories): prompts *and* runs: the prompts are a sample of
  the category, so centre = mean over prompts of each prompt's mean log
  ratio, se^2 = V / R + s2_prompt / P (s2_prompt: the variance of the
  prompts' means, which holds the prompt-to-prompt spread of the effect and
  the request noise; V / R: the run-to-run noise), df by Satterthwaite. Its
  scope in words: "this category's prompts in general, on another run of
  this setup". 95%, not adjusted. NULL with one prompt or one repeat.
- ``fit`` (categories, one row per level): the calibration check
  (``fit.py``): does one variance per category fit every level? Per level,
  the spread of the categories' A/B block figures about the level's mean
  against the other levels' (shared noise counted), one-sided, Holm over the
  levels at a family-wise 5%. ``p_value``: the level's; ``ci_level``: Holm's
  level for its rank; ``family_size``: levels tested; ``df``: the effective df
  of the level's sum of squares; ``label``: 'noisier' where Holm rejects and
  the category's own figures vary more at that level (``noise_ratio`` > 1),
  else 'fits'; ``noise_ratio``: the category's block-figure SD at that level
  over its other levels' (pooled); no interval (ci_low, ci_high NULL). The
  A/A figures (the baseline against itself) are not used: they measure
  host drift, which the paired design cancels. It is no hurdle for any label.

Rows carry ``df``, ``ci_level``, ``p_value`` (two-sided, against a ratio of
1; ``fit`` rows: see above), ``family_size``, for ``family`` rows the
``label``, ``clears_margin``, ``detectable_effect`` and ``repeats_needed``,
and for ``fit`` rows ``noise_ratio``.

**One run at a time.** ``fill`` splits the paired rows by ``run_id`` and
calls ``compute`` once per run (one machine, one noise; each run's own
margin from ``int_run_settings``). ``compute`` itself knows nothing of runs.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence

import pyarrow as pa

from specdec.analytics.fit import LevelFit, level_fit
from specdec.analytics.labels import ALPHA, DEFAULT_MARGIN, judge, step_down_levels, z_score
from specdec.analytics.sequential import apply_looks
from specdec.analytics.sql_models import has_view
from specdec.analytics.variance import (
    level_noise,
    residual_correlation,
    satterthwaite,
    slow_blocks,
    t_interval,
    t_quantile,
    t_sf,
)
from specdec.arms import ROLES_TABLE

__all__ = [
    "LEVEL",
    "METHOD",
    "POOL_ALPHA",
    "SYSTEM",
    "TABLE",
    "WEIGHTED",
    "arm_order",
    "compute",
    "compute_summed",
    "create_table",
    "fill",
    "geometric_mean",
    "t_quantile",
]

LEVEL = 0.95
#: The pooling test: a level whose calibration-check p-value (``fit.py``, one-sided: noisier than the
#: other levels) is at most this gets a block variance of its own; the others pool (see the docstring).
POOL_ALPHA = 0.10
TABLE = "int_speedup_intervals"
SYSTEM = "(system)"
WEIGHTED = "(weighted)"

#: One paragraph for the report and the data dictionary: how the intervals are computed.
METHOD = (
    f"{LEVEL:.0%} intervals on the log scale over block figures (one per repeat: the group's mean log ratio "
    "in that repeat). Noise model per category: block figure = effect at the level + the arm order's effect "
    "(which arm ran second: a fixed effect) + a shift shared by every level of the repeat (the server process) "
    "+ the block's own noise, whose variance is pooled over the levels unless the pooling test (the "
    f"calibration check's p-value <= {POOL_ALPHA:.0%} at that level, with or without slow blocks) gives the "
    "level its own (a slow block stays in its level's variance); variances by method of moments, with "
    "Satterthwaite's degrees of freedom for that design (repeats - 1 when the shared shift dominates); the "
    "row's method says what was done. measurement: prompts fixed, mean +- t(df) * se. "
    "family: the same at the step-down level for the row's rank among the run's labels, rows at a level "
    f"correlated as their series' residuals (family-wise error rate {ALPHA:.0%}); faster and slower read it, "
    f"equivalent reads the {1 - 2 * ALPHA:.0%} interval (two one-sided tests). prompts: prompts and runs "
    "together, se^2 = V / R + s2_prompt / P. fit: the calibration check, whether one variance per category fits every level (analytics/fit.py); labels: "
    "analytics/labels.py."
)

_COLUMNS = """run_id varchar, comparison varchar, category varchar, level integer, segment varchar,
    "interval" varchar, ci_low double, ci_high double, ci_level double, df double, p_value double,
    family_size integer, label varchar, clears_margin boolean, detectable_effect double, repeats_needed integer,
    margin double, method varchar, noise_ratio double, equivalence_low double, equivalence_high double"""
_WIDTH = 20  # columns of a compute() row (the table adds run_id)

GroupKey = tuple  # (comparison, category, level)
Summed = list  # [sum, count]


def geometric_mean(log_ratios: Iterable[float]) -> float:
    """exp of the mean log ratio: the geometric mean of the ratios."""
    values = list(log_ratios)
    return math.exp(sum(values) / len(values))


def _by_repeat(repeats: Iterable[tuple], blocks: Iterable[tuple]) -> dict:
    """Per group (comparison, category, level): the summed log ratios by
    repeat (blocks go to the group '(system)'). ``repeats`` rows end in (log
    ratio sum, count): one pair each, or a repeat's pairs summed."""
    by_repeat: dict[tuple, dict[int, Summed]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0]))
    for comparison, category, level, repeat, total, n in repeats:
        acc = by_repeat[comparison, category, level][repeat]
        acc[0] += total
        acc[1] += n
    for comparison, level, repeat, log_ratio in blocks:
        acc = by_repeat[comparison, SYSTEM, level][repeat]
        acc[0] += log_ratio
        acc[1] += 1
    return by_repeat


def _means(reps: Mapping[int, Summed]) -> dict[int, float]:
    """Per repeat, the mean of its log ratios: the block figures."""
    return {r: total / n for r, (total, n) in sorted(reps.items()) if n}


#: How a series' per-level noise is estimated: (cells (level, repeat) -> figure, order (level,
#: repeat) -> +-1/2, levels with a variance of their own) -> {level: LevelNoise}. ``variance.level_noise``;
#: the calibration benchmark plants others.
NoiseModel = Callable[[Mapping[tuple, float], Mapping[tuple, float], frozenset], Mapping]


def _series(figures: Mapping[GroupKey, Mapping[int, float]]) -> dict[tuple, dict[tuple[int, int], float]]:
    """Per series (comparison, category, segment-or-None): its block figures keyed by
    (level, repeat). Keys of ``figures``: (comparison, category, level[, segment])."""
    series: dict[tuple, dict[tuple[int, int], float]] = defaultdict(dict)
    for key, reps in figures.items():
        skey = (key[0], key[1], key[3] if len(key) > 3 else None)
        for r, y in reps.items():
            series[skey][key[2], r] = y
    return series


def _slow_cells(raw: Mapping[tuple, Mapping[tuple[int, int], float]]) -> set:
    """The cells (level, repeat) that at least half of the family's series that hold them call a
    slow block (``variance.slow_blocks``: a slow block slows every category of it)."""
    votes: dict[tuple, int] = defaultdict(int)
    for cells in raw.values():
        for cell in slow_blocks(cells):
            votes[cell] += 1
    held: dict[tuple, int] = defaultdict(int)  # series that hold the cell
    for cells in raw.values():
        for cell in cells:
            held[cell] += 1
    return {cell for cell, v in votes.items() if 2 * v >= held[cell]}


class _Noise:
    """One family's series: per series its slow blocks (``variance.slow_blocks``, where half of
    the family's series agree), its figures without them (what the calibration check reads), the
    levels with a variance of their own, and per level its LevelNoise (from every figure)."""

    def __init__(
        self,
        figures: Mapping[GroupKey, Mapping[int, float]],
        order: Mapping[tuple, float],
        model: NoiseModel,
        own_of: Callable[[Mapping[tuple, dict], Mapping[tuple, dict]], frozenset] | None = None,
    ):
        raw = _series(figures)
        slow = _slow_cells(raw)
        self.slow = {skey: {c for c in cells if c in slow} for skey, cells in raw.items()}
        self.clean = {skey: {c: y for c, y in cells.items() if c not in self.slow[skey]} for skey, cells in raw.items()}
        self.own = own_of(raw, self.clean) if own_of is not None else frozenset()
        # the intervals keep every figure: a slow block goes into its level's own variance (the pooling
        # test sets the level apart), where it widens that level's interval and no other; set aside, it
        # left intervals too narrow in runs with heavy tails (benchmarks/calibration.py: 7.7% of A/A runs
        # with a false label in the 'all' scenario against 2-3% keeping it)
        self.levels = {skey: model(cells, order, self.own) for skey, cells in raw.items()}

    def of(self, key: tuple, segment=None):
        """(LevelNoise or None, slow blocks found at this level of the series) of a group key
        (comparison, category, level)."""
        skey = (key[0], key[1], segment)
        return self.levels.get(skey, {}).get(key[2]), sum(c[0] == key[2] for c in self.slow.get(skey, ()))


def _t(centre: float, se: float, df: float, level: float = LEVEL) -> tuple[float, float]:
    return t_interval(centre, se, df, level)[:2]


def _p(centre: float, se: float, df: float) -> float:
    if se <= 0:
        return 0.0 if centre != 0 else 1.0
    return min(1.0, 2.0 * t_sf(abs(centre) / se, df))


def _row(
    key: tuple,
    segment,
    kind: str,
    ci: tuple[float | None, float | None],
    level: float,
    df: float,
    p: float | None,
    method: str,
    **extra,
) -> tuple:
    return (
        *key,
        segment,
        kind,
        ci[0],
        ci[1],
        level,
        df,
        p,
        extra.get("family_size"),
        extra.get("label"),
        extra.get("clears_margin"),
        extra.get("detectable_effect"),
        extra.get("repeats_needed"),
        extra.get("margin"),
        method,
        extra.get("noise_ratio"),
        extra.get("equivalence_low"),
        extra.get("equivalence_high"),
    )


class _Measured:
    """One A/B group's measurement: centre, standard error, df, repeats (``variance.LevelNoise``)."""

    def __init__(self, key: tuple, segment, means: Mapping[int, float], found: tuple):
        noise, slow = found
        self.key, self.segment = key, segment
        usable = noise if noise is not None and noise.repeats >= 2 and noise.df > 0 else None
        self.ok = usable is not None
        self.repeats = usable.repeats if usable is not None else len(means)
        self.centre = usable.centre if usable is not None else (sum(means.values()) / len(means) if means else 0.0)
        self.se = usable.se if usable is not None else math.nan
        self.df = usable.df if usable is not None else math.nan
        self.p = _p(self.centre, self.se, self.df) if usable is not None else None
        self.notes = _notes(usable, slow)


def _notes(noise, slow: int) -> str:
    """What the variance model did for this row, for the method column (the run's notes)."""
    if noise is None:
        return ""
    parts = [
        "a block variance of its own at this level (the pooling test set it apart)"
        if noise.own
        else "block variance pooled over the levels (the pooling test allowed it)"
    ]
    if noise.order is not None:
        parts.append(f"arm order fitted: the ratio {math.expm1(noise.order):+.1%} where the speculative arm ran second")
    if slow:
        parts.append(f"{slow} slow block(s) at this level: kept, in the level's own variance where it has one")
    return "; ".join(parts)


def _family_rows(
    groups: Sequence[_Measured],
    margin: float,
    method: str,
    correlation: Mapping[tuple, float] | None = None,
) -> list[tuple]:
    """The pointwise and the family-wise rows of one family, with labels. The family-wise levels:
    ``labels.step_down_levels`` over the rows' z scores, two rows at one level correlated as their
    series' residuals are (``correlation``: per pair of series keys (comparison, category,
    segment), ``variance.residual_correlation``), rows at different levels as independent."""
    ok = [g for g in groups if g.ok]
    corr = correlation or {}

    def between(i: int, j: int) -> float:
        a, b = ok[i], ok[j]
        if a.key[2] != b.key[2] or a.segment != b.segment:
            return 0.0
        return corr.get(((a.key[0], a.key[1], a.segment), (b.key[0], b.key[1], b.segment)), 0.0)

    levels = step_down_levels({i: z_score(g.centre, g.se, g.df) for i, g in enumerate(ok)}, between)
    out: list[tuple] = []
    for i, g in enumerate(ok):
        text = f"{method}; {g.notes}" if g.notes else method
        out.append(
            _row(g.key, g.segment, "measurement", _t(g.centre, g.se, g.df), LEVEL, g.df, g.p, f"{text}; pointwise")
        )
        j = judge(g.centre, g.se, g.df, levels[i], margin, g.repeats)
        out.append(
            _row(
                g.key,
                g.segment,
                "family",
                (j.ci_low, j.ci_high),
                j.level,
                g.df,
                g.p,
                f"{text}; step-down level for its rank among {len(ok)} (rows at a level correlated as "
                f"their series' residuals); equivalence read on the "
                f"{1 - 2 * ALPHA:.0%} interval {j.tost_low:.4f}-{j.tost_high:.4f} (TOST)",
                family_size=len(ok),
                label=j.label,
                clears_margin=j.clears_margin,
                detectable_effect=j.detectable_effect,
                repeats_needed=j.repeats_needed,
                margin=margin,
                equivalence_low=j.tost_low,
                equivalence_high=j.tost_high,
            )
        )
    return out


def _prompts_row(key: tuple, prompts: tuple[Sequence[float], Sequence[int]], g: _Measured) -> list[tuple]:
    """The prompts-and-runs interval of one category group (see the module docstring)."""
    sums, counts = prompts
    means = [s / n for s, n in zip(sums, counts) if n]
    p = len(means)
    if p < 2 or not g.ok:
        return []
    centre = sum(means) / p
    s2_prompt = sum((m - centre) ** 2 for m in means) / (p - 1)
    run_part, prompt_part = g.se**2, s2_prompt / p
    se = math.sqrt(run_part + prompt_part)
    df = satterthwaite([(run_part, g.df), (prompt_part, p - 1)])
    if se <= 0 or math.isinf(df):
        df = g.df
    return [
        _row(
            key,
            None,
            "prompts",
            _t(centre, se, df),
            LEVEL,
            df,
            _p(centre, se, df),
            "prompts and runs: se^2 = V / R + s2_prompt / P (this category's prompts in general, "
            "on another run of this setup)",
        )
    ]


def _fit_rows(found: Mapping[int, LevelFit]) -> list[tuple]:
    """The calibration check (``fit.py``): one row per category and level tested."""
    out: list[tuple] = []
    for level, fit in sorted(found.items()):
        for category, ratio in sorted(fit.ratio.items()):
            out.append(
                _row(
                    ("ab", category, level),
                    None,
                    "fit",
                    (None, None),
                    fit.level,
                    fit.df,
                    fit.p_value,
                    f"calibration check: this level's block figures against the other levels' (Holm over "
                    f"{fit.tested} levels, family-wise {ALPHA:.0%}); analytics/fit.py",
                    family_size=fit.tested,
                    label="noisier" if fit.noisier and ratio > 1 else "fits",
                    noise_ratio=ratio,
                )
            )
    return out


def _categories(series: Mapping[tuple, Mapping[tuple, float]]) -> dict[str, Mapping[tuple, float]]:
    """The categories' series for the check; ``(system)`` is built from the same requests (the same noise twice)."""
    return {skey[1]: cells for skey, cells in series.items() if skey[1] != SYSTEM and skey[2] is None}


def compute(
    pairs: Iterable[tuple],
    blocks: Iterable[tuple],
    segments: Iterable[tuple] = (),
    times: Iterable[tuple] = (),
    margin: float = DEFAULT_MARGIN,
    noise_model: NoiseModel = level_noise,
    order: Mapping[tuple[int, int], float] | None = None,
    pool_alpha: float = POOL_ALPHA,
    correlated: bool = True,
) -> list[tuple]:
    """Rows of ``int_speedup_intervals`` (without run_id).

    ``pairs``: (comparison, category, level, prompt_id, repeat, log_ratio)
    from ``int_requests_paired``; ``blocks``: (comparison, level, repeat,
    log_ratio) from ``int_blocks_paired``; ``segments``: (category,
    level, segment, prompt_id, repeat, log_ratio) from
    ``int_natural_end_pairs`` (split pairs only); ``times``: the weighted
    categories' mean times per level and repeat (``_weighted``); ``margin``:
    the run's declared margin; ``noise_model``: how a series' block noise is
    estimated (``variance.level_noise``; the calibration benchmark plants
    others); ``order``: per (level, repeat), +1/2 where the speculative
    arm's block ran second, -1/2 where it ran first (absent: unknown, no
    order effect fitted); ``pool_alpha``: the pooling test's threshold. Returns (comparison, category, level,
    segment, interval, ci_low, ci_high, ci_level, df, p_value, family_size,
    label, clears_margin, detectable_effect, repeats_needed, margin, method,
    noise_ratio, equivalence_low, equivalence_high: the family rows' 1 - 2 alpha interval that
    equivalence reads). 'aa' pairs and blocks are ignored (see the module docstring)."""
    pairs = list(pairs)
    by_prompt: dict[tuple, dict[str, Summed]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0]))
    for comparison, category, level, prompt_id, _repeat, log_ratio in pairs:
        acc = by_prompt[comparison, category, level][prompt_id]
        acc[0] += log_ratio
        acc[1] += 1
    prompts = {
        key: ([group[p][0] for p in sorted(group)], [group[p][1] for p in sorted(group)])
        for key, group in by_prompt.items()
    }
    return compute_summed(
        [(c, cat, lv, rep, lr, 1) for c, cat, lv, _p, rep, lr in pairs],
        prompts,
        blocks,
        [(c, lv, seg, rep, lr, 1) for c, lv, seg, _p, rep, lr in segments],
        times,
        margin,
        noise_model,
        order,
        pool_alpha,
        correlated,
    )


def compute_summed(
    repeats: Iterable[tuple],
    prompts: Mapping[tuple, tuple[Sequence[float], Sequence[int]]],
    blocks: Iterable[tuple],
    segments: Iterable[tuple] = (),
    times: Iterable[tuple] = (),
    margin: float = DEFAULT_MARGIN,
    noise_model: NoiseModel = level_noise,
    order: Mapping[tuple[int, int], float] | None = None,
    pool_alpha: float = POOL_ALPHA,
    correlated: bool = True,
) -> list[tuple]:
    """``compute`` from the pairs already summed, as ``fill`` reads them from
    DuckDB. ``repeats``: (comparison, category, level, repeat, log ratio
    sum, count); ``prompts``: per group (comparison, category, level),
    the per-prompt log ratio sums and counts; ``segments``: (category,
    level, segment, repeat, log ratio sum, count)."""
    order = order or {}
    block_means = {key: _means(reps) for key, reps in _by_repeat(repeats, blocks).items()}
    ab = {k: v for k, v in block_means.items() if k[0] == "ab"}
    found: dict[int, LevelFit] = {}

    def own_of(raw: Mapping[tuple, dict], clean: Mapping[tuple, dict]) -> frozenset:
        # the check reads the figures without slow blocks (a stalled block is not a noisier level); the
        # pooling test asks those and every figure, so that a level with a slow block gets its own
        # variance, and a noisier level whose extremes passed for slow blocks too
        found.update(level_fit(_categories(clean)))
        tests = [*found.items(), *level_fit(_categories(raw)).items()]
        return frozenset(lv for lv, f in tests if f.p_value <= pool_alpha)

    noise = _Noise(ab, order, noise_model, own_of)
    groups = [_Measured(key, None, ab[key], noise.of(key)) for key in sorted(ab)]
    measurement = (
        "t interval over repeats: variance components per category and level group, arm order as a "
        "fixed effect, Satterthwaite df"
    )
    out = _family_rows(groups, margin, measurement, residual_correlation(noise.clean, order) if correlated else None)
    for g in groups:
        if g.key[1] != SYSTEM and g.key in prompts:
            out += _prompts_row(g.key, prompts[g.key], g)
    out += _fit_rows(found)

    by_segment: dict[tuple, dict[int, Summed]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0]))
    for category, level, segment, repeat, total, n in segments:
        acc = by_segment[category, level, segment][repeat]
        acc[0] += total
        acc[1] += n
    seg_means = {("ab", cat, lv, seg): _means(reps) for (cat, lv, seg), reps in by_segment.items()}
    seg_noise = _Noise(seg_means, order, noise_model)
    seg_groups = [_Measured(k[:3], k[3], seg_means[k], seg_noise.of(k[:3], k[3])) for k in sorted(seg_means)]
    out += _family_rows(
        seg_groups, margin, measurement, residual_correlation(seg_noise.clean, order) if correlated else None
    )
    return out + _weighted(times, noise_model, order)


def _weighted(
    times: Iterable[tuple], noise_model: NoiseModel = level_noise, order: Mapping[tuple, float] | None = None
) -> list[tuple]:
    """Measurement rows for the weighted overall speedup (``speedup_weighted``,
    category '(weighted)'): its own series of block figures.

    ``times``: (level, repeat, category, weight, baseline mean e2e,
    speculative mean e2e) per weighted category (weight > 0) with pairs in
    that repeat. A repeat's block figure is ln(sum w Tb / sum w Ts) over the
    level's weighted categories, used only when every one of them has pairs in
    that repeat; the interval needs 2 such repeats, like the speedup mart's."""
    level_categories: dict[int, set[str]] = defaultdict(set)
    sums: dict[tuple[int, int], list] = defaultdict(lambda: [0.0, 0.0, set()])
    for level, repeat, category, weight, base_ms, spec_ms in times:
        level_categories[level].add(category)
        acc = sums[level, repeat]
        acc[0] += weight * base_ms
        acc[1] += weight * spec_ms
        acc[2].add(category)
    figures: dict[tuple, dict[int, float]] = defaultdict(dict)
    for (lv, r), (b, s, cats) in sorted(sums.items()):
        if cats == level_categories[lv] and b > 0 and s > 0:
            figures["ab", WEIGHTED, lv][r] = math.log(b / s)
    noise = _Noise(figures, order or {}, noise_model)
    out: list[tuple] = []
    for key in sorted(figures):
        g = _Measured(key, None, figures[key], noise.of(key))
        if g.ok:
            out.append(
                _row(
                    key,
                    None,
                    "measurement",
                    _t(g.centre, g.se, g.df),
                    LEVEL,
                    g.df,
                    g.p,
                    "t interval over repeats: per-repeat weighted mean e2e ratio, its own variance "
                    "components, arm order as a fixed effect, Satterthwaite df",
                )
            )
    return out


def create_table(con) -> None:
    """The empty table, so the marts over it can be created."""
    con.execute(f"create table {TABLE} ({_COLUMNS})")


def _by_run(rows: list[tuple]) -> dict[str, list[tuple]]:
    """Rows whose first value is the run_id, grouped by it (run_id dropped), in order."""
    out: dict[str, list[tuple]] = defaultdict(list)
    for row in rows:
        out[row[0]].append(row[1:])
    return out


def sequential_looks(con) -> dict[str, tuple[list, bool]]:
    """Per analysis run of a sequential run, the run's looks (its manifest's ``looks``) and
    whether the analysis run is one comparison of a run of named arms (``<run>/<treatment>``,
    from the roles table ``arms.ROLES_TABLE``) rather than the run itself; absent for a fixed run."""
    by_run = {}
    for run_id, looks in con.execute("select run_id, json_extract(manifest, '$.looks') from raw_manifest").fetchall():
        value = json.loads(looks) if isinstance(looks, str) else looks
        if value:
            by_run[run_id] = value
    out = {run_id: (looks, False) for run_id, looks in by_run.items()}
    for run_id, analysis in con.execute(f"select distinct run_id, analysis_run_id from {ROLES_TABLE}").fetchall():
        if run_id in by_run and analysis != run_id:
            out[analysis] = (by_run[run_id], True)
    return out


def arm_order(con) -> dict[str, dict[tuple[int, int], float]]:
    """Per run, per (level, repeat): +1/2 where the speculative arm's block started second,
    -1/2 where it started first (the arm-order fixed effect), from the requests' send times."""
    order: dict[str, dict[tuple[int, int], float]] = defaultdict(dict)
    for run_id, level, repeat, second in con.execute("""
            select run_id, level, repeat,
                   min(wall_send_ns) filter (where arm = 'speculative')
                   > min(wall_send_ns) filter (where arm = 'baseline')
            from int_requests_measured group by all""").fetchall():
        if second is not None:
            order[run_id][level, repeat] = 0.5 if second else -0.5
    return order


def fill(con) -> None:
    """Compute every interval from the paired views, one run at a time, and insert them."""
    repeats = _by_run(
        con.execute(
            "select run_id, comparison, category, level, repeat, sum(log_ratio), count(log_ratio) "
            "from int_requests_paired group by all order by all"
        ).fetchall()
    )
    prompts: dict[str, dict[tuple, tuple[list[float], list[int]]]] = defaultdict(dict)
    for run_id, comparison, category, level, sums, counts in con.execute("""
            select run_id, comparison, category, level, list(s order by prompt_id), list(n order by prompt_id)
            from (select run_id, comparison, category, level, prompt_id,
                         sum(log_ratio) as s, count(log_ratio) as n
                  from int_requests_paired where comparison = 'ab' and log_ratio is not null group by all)
            group by all""").fetchall():
        prompts[run_id][comparison, category, level] = (sums, counts)
    blocks = _by_run(
        con.execute(
            "select run_id, comparison, level, repeat, log_ratio from int_blocks_paired "
            "order by run_id, comparison, level, repeat"
        ).fetchall()
    )
    segments = _by_run(
        con.execute(
            "select run_id, category, level, segment, repeat, sum(log_ratio), count(log_ratio) "
            "from int_natural_end_pairs where segment <> 'unknown' and log_ratio is not null "
            "group by all order by all"
        ).fetchall()
    )
    times: dict[str, list[tuple]] = {}
    if has_view(con, "speedup_weighted"):
        times = _by_run(
            con.execute("""
            select p.run_id, p.level, p.repeat, p.category, w.share_used,
                   avg(p.reference_e2e_ms), avg(p.treatment_e2e_ms)
            from int_requests_paired p
            join speedup_weighted w
              on w.run_id = p.run_id and w.category = p.category and w.level = p.level
            where p.comparison = 'ab' and w.category <> '(weighted)' and w.share_used > 0
            group by all order by all""").fetchall()
        )
    margins = dict(con.execute("select run_id, margin from int_run_settings").fetchall())
    order = arm_order(con)
    # a failed level gives no speedup (the marts say why): it neither joins a family nor informs the noise
    excluded = set(
        con.execute("select run_id, level from int_levels_compared where excluded_reason is not null").fetchall()
    )
    if excluded:
        keep = lambda rows, at: [r for r in rows if (r[0], r[at]) not in excluded]  # noqa: E731
        repeats, blocks, segments, times = (
            _by_run(keep([(k, *r) for k, v in d.items() for r in v], at))
            for d, at in ((repeats, 3), (blocks, 2), (segments, 2), (times, 1))
        )
        prompts = {
            run: {key: v for key, v in groups.items() if (run, key[2]) not in excluded}
            for run, groups in prompts.items()
        }
    looks = sequential_looks(con)
    rows = []
    for run_id in sorted(set(repeats) | set(blocks) | set(segments) | set(times)):
        margin = margins.get(run_id) or DEFAULT_MARGIN
        found = compute_summed(
            repeats.get(run_id, ()),
            prompts.get(run_id, {}),
            blocks.get(run_id, ()),
            segments.get(run_id, ()),
            times.get(run_id, ()),
            margin,
            order=order.get(run_id),
        )
        if run_id in looks:  # a sequential run: each label is its look's (sequential.apply_looks)
            run_looks, one_of_several = looks[run_id]
            found = apply_looks(found, run_looks, margin, run_id, one_of_several)
        rows += [(run_id, *row) for row in found]
    if rows:  # through Arrow: executemany inserts a row at a time (200 runs' 9,600 rows: about 30 s)
        table = pa.table({f"c{i}": pa.array(column) for i, column in enumerate(zip(*rows))})
        con.register("interval_rows", table)
        try:
            con.execute(f"insert into {TABLE} select * from interval_rows")
        finally:
            con.unregister("interval_rows")
