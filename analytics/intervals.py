"""Bootstrap confidence intervals of the speedup, computed at build time.

``build`` creates the table ``int_speedup_intervals`` empty before the SQL
models (so the ``speedup`` mart can be created over it), then fills it from the
paired rows once every view exists (``fill``). Everything is a geometric mean
of paired ratios, so the bootstrap works on ``log_ratio`` and the statistic of
a resample is ``exp(sum of its log ratios / its number of pairs)``.

Method (stated again in the ``speedup`` mart header and in the report):

- **resamples and seed**: ``RESAMPLES`` = 2000 resamples; a fresh
  ``numpy.random.default_rng(SEED)`` with ``SEED`` = 0 for every group and
  interval, so one group's interval does not depend on which other groups the
  run has. The interval is the percentile interval: the 2.5% and 97.5%
  quantiles of the resampled statistic (95%).
- **measurement** (per category and level, and ``(system)``; ``comparison =
  'ab'``): the prompts are fixed and the *repeats* are resampled, because the
  noise that matters is shared by a whole block (one arm running one level
  once): on this 2-core machine two blocks of the same arm and prompts differ
  by up to 10% while requests within a block move together. A request-level
  bootstrap treats them as independent and gave "faster" for an A/A run (both
  arms identical). So each repeat r of a group gives one paired block figure
  m_r (the mean log ratio over the group's prompts in that repeat, or the
  block throughput log ratio for ``(system)``), and a resample is mean m + the
  mean of R values drawn from the run's *noise pool* (a residual bootstrap with
  pooled block noise). NULL with one repeat, or a pool of fewer than 2 values.
- **the noise pool** (one machine, one noise; every group of the run, on the
  log scale) is one of two sets of values, each value a difference of two
  blocks, so each has the variance of a block figure's noise:
  - the A/B residuals (m_r - mean m) * sqrt(R / (R - 1)) of every group;
  - the A/A block figures d_r (baseline block of repeat r + 1 against repeat
    r, same prompts; for ``(system)`` the throughput ratio), *not* centred:
    both blocks ran the same configuration, so anything but 0 is noise,
    including drift of the host (or a fresh server) between the two blocks;
    each with its mirror -d, since which repeat is the A/A "treatment" is
    arbitrary (so the pool is symmetric and shifts no interval).
  Whichever set has the larger mean square is the pool (the larger of two
  estimates of the same noise: the conservative choice). The A/A set is there
  because A/B residuals alone missed noise that moves whole repeats together:
  in an A/A run on one server (both arms the same) on this machine, a probe of
  6 repeats had the A/B figures of all categories at +3% in repeats 0-3 and
  -3% in 4-5, which a few repeats cannot tell from an effect, and a
  clean-clone CI run with 3 repeats labelled code at level 1 "slower", 0.967
  [0.946-0.985], from A/B residuals only.
- **prompts** (per category and level): prompts resampled with replacement
  within the category, each with all its pairs (a cluster bootstrap). Covers
  the choice of prompts from the category as well as the measurement noise.
  NULL with fewer than 2 prompts.
- **A/A** (``comparison = 'aa'``): per group (category and level, and
  ``(system)``), the A/A block figures d_r of the group (R - 1 of them) plus
  the mean of R - 1 values drawn from the same noise pool. From 2 repeats
  (one A/A block figure), for ``(system)`` too. The A/A floor of the
  ``speedup`` mart mirrors this interval about 1.
- **segments** (``segment`` = 'before_natural_end' / 'after_natural_end',
  per category and level; ``speedup_natural_end``): the measurement interval
  of the segment's paired log ratios (``int_natural_end_pairs``), block
  figures per repeat plus the run's noise pool, as above. ``segment`` is NULL
  on every other row.
- **weighted** (category '(weighted)', ``speedup_weighted``): per repeat the
  block figure ln(sum_c w_c Tb_c / sum_c w_c Ts_c) over the level's weighted
  categories (repeats where each has pairs), plus the run's noise pool.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Iterable, Sequence

import numpy as np

from specdec.analytics.models import has_view

__all__ = ["LEVEL", "RESAMPLES", "SEED", "SYSTEM", "TABLE", "METHOD", "block_interval", "block_residuals",
           "cluster_interval", "compute", "create_table", "fill", "geometric_mean", "request_level_interval",
           "noise_pool"]

RESAMPLES = 2000
SEED = 0
LEVEL = 0.95
TABLE = "int_speedup_intervals"
SYSTEM = "(system)"

#: One line for the report: how the intervals are computed.
METHOD = (f"{LEVEL:.0%} percentile bootstrap intervals, {RESAMPLES} resamples, seed {SEED} "
          "(numpy default_rng, fresh per group). measurement (categories and (system)): prompts fixed, repeats "
          "resampled: the mean of the per-repeat block figures plus the mean of R values drawn from the run's "
          "noise pool: every group's A/B block residuals (scaled by sqrt(R/(R-1))) or every A/A block figure "
          "(baseline repeat r+1 against r, not centred, with its mirror), whichever set has the larger mean square, so noise "
          "shared by a whole block or repeat counts; prompts: prompts resampled within the category with their pairs; A/A: the A/A block "
          "figures plus R-1 values drawn from the same pool.")

_COLUMNS = """comparison varchar, category varchar, concurrency integer, segment varchar, "interval" varchar,
    ci_low double, ci_high double, resamples integer, seed integer, method varchar"""

Interval = tuple[float, float]


def geometric_mean(log_ratios: Iterable[float]) -> float:
    """exp of the mean log ratio: the geometric mean of the ratios."""
    values = list(log_ratios)
    return math.exp(sum(values) / len(values))


def _quantiles(log_stats: np.ndarray) -> Interval:
    tail = (1 - LEVEL) / 2
    lo, hi = np.quantile(log_stats, [tail, 1 - tail])
    return float(math.exp(lo)), float(math.exp(hi))


def request_level_interval(clusters: Sequence[Sequence[float]], *, seed: int = SEED,
                           resamples: int = RESAMPLES) -> Interval | None:
    """The request-level bootstrap the measurement interval replaced, kept as
    the reference the tests show it failing against: prompts fixed, each
    cluster's (prompt's) values resampled as if independent (residuals scaled
    by sqrt(n/(n-1))). It misses noise shared by a block; not used for any
    figure. None when no cluster has two values."""
    arrays = [np.asarray(c, dtype=float) for c in clusters if len(c)]
    if not any(len(a) >= 2 for a in arrays):
        return None
    rng = np.random.default_rng(seed)
    total = sum(float(a.sum()) for a in arrays)
    count = sum(len(a) for a in arrays)
    shift = np.zeros(resamples)
    for a in arrays:
        n = len(a)
        if n < 2:
            continue
        resid = (a - a.mean()) * math.sqrt(n / (n - 1))
        shift += resid[rng.integers(0, n, size=(resamples, n))].sum(axis=1)
    return _quantiles((total + shift) / count)


def block_interval(block_means: Sequence[float], pool: Sequence[float], *, min_blocks: int = 2,
                   seed: int = SEED, resamples: int = RESAMPLES) -> Interval | None:
    """Blocks resampled: mean(block_means) plus the mean of as many values
    drawn from the noise pool as there are block figures. None with fewer than
    ``min_blocks`` block figures (2 for an A/B group: one repeat says nothing
    of its own spread; 1 for an A/A group, whose figures are noise by
    construction) or a pool of fewer than 2 values."""
    means = np.asarray(block_means, dtype=float)
    residuals = np.asarray(pool, dtype=float)
    if len(means) < max(min_blocks, 1) or len(residuals) < 2:
        return None
    rng = np.random.default_rng(seed)
    draws = residuals[rng.integers(0, len(residuals), size=(resamples, len(means)))]
    return _quantiles(means.mean() + draws.mean(axis=1))


def noise_pool(ab_groups: Iterable[Sequence[float]], aa_groups: Iterable[Sequence[float]]) -> list[float]:
    """The run's noise pool: the A/B block residuals of every group with 2 or
    more repeats, or every A/A block figure d as it is (not centred) together
    with -d (which repeat is the A/A "treatment" is arbitrary, so the pool is
    symmetric about 0 and does not shift the intervals), whichever has the
    larger mean square (the A/B residuals on a tie or with no A/A figure)."""
    ab = block_residuals(ab_groups)
    aa = [float(v) for means in aa_groups for d in means for v in (d, -d)]
    return aa if _mean_square(aa) > _mean_square(ab) else ab


def _mean_square(values: Sequence[float]) -> float:
    return sum(v * v for v in values) / len(values) if values else 0.0


def block_residuals(groups: Iterable[Sequence[float]]) -> list[float]:
    """Scaled residuals (m_r - mean m) * sqrt(R / (R - 1)) of every group with R >= 2."""
    out: list[float] = []
    for means in groups:
        r = len(means)
        if r >= 2:
            mean = sum(means) / r
            out += [(m - mean) * math.sqrt(r / (r - 1)) for m in means]
    return out


def cluster_interval(clusters: Sequence[Sequence[float]], *, seed: int = SEED,
                     resamples: int = RESAMPLES) -> Interval | None:
    """Clusters (prompts, or single repeats) resampled with replacement, each
    with all its values. None with fewer than two clusters."""
    arrays = [np.asarray(c, dtype=float) for c in clusters if len(c)]
    if len(arrays) < 2:
        return None
    rng = np.random.default_rng(seed)
    sums = np.array([a.sum() for a in arrays])
    counts = np.array([len(a) for a in arrays], dtype=float)
    idx = rng.integers(0, len(arrays), size=(resamples, len(arrays)))
    return _quantiles(sums[idx].sum(axis=1) / counts[idx].sum(axis=1))


def compute(pairs: Iterable[tuple], blocks: Iterable[tuple], segments: Iterable[tuple] = ()) -> list[tuple]:
    """Rows of ``int_speedup_intervals``.

    ``pairs``: (comparison, category, concurrency, prompt_id, repeat, log_ratio)
    from ``int_requests_paired``; ``blocks``: (comparison, concurrency, repeat,
    log_ratio) from ``int_blocks_paired``; ``segments``: (category,
    concurrency, segment, prompt_id, repeat, log_ratio) from
    ``int_natural_end_pairs`` (split pairs only). Returns (comparison,
    category, concurrency, segment, interval, ci_low, ci_high, resamples, seed,
    method) for every interval that exists; ``segment`` is NULL except for the
    speedup before and after the natural end, whose measurement interval uses
    the same noise pool as the whole requests (one machine, one noise)."""
    by_prompt: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    by_repeat: dict[tuple, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for comparison, category, concurrency, prompt_id, repeat, log_ratio in pairs:
        by_prompt[comparison, category, concurrency][prompt_id].append(log_ratio)
        by_repeat[comparison, category, concurrency][repeat].append(log_ratio)
    for comparison, concurrency, repeat, log_ratio in blocks:
        by_repeat[comparison, SYSTEM, concurrency][repeat].append(log_ratio)
    by_segment: dict[tuple, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for category, concurrency, segment, _prompt_id, repeat, log_ratio in segments:
        by_segment[category, concurrency, segment][repeat].append(log_ratio)

    # per group, its per-repeat block figures; the run's noise pool from all of them
    block_means = {key: _means(reps) for key, reps in by_repeat.items()}
    pool = _pool(block_means)

    out = []

    def add(key, segment, interval, method, ci):
        if ci is not None:
            out.append((*key, segment, interval, ci[0], ci[1], RESAMPLES, SEED, method))

    measurement = "repeats resampled: block figures plus the run's pooled block noise, prompts fixed"
    aa = "A/A block figures plus the run's pooled block noise"
    for key in sorted(block_means):
        if key[0] == "ab":
            add(key, None, "measurement", measurement, block_interval(block_means[key], pool))
            if key[1] != SYSTEM:
                clusters = [by_prompt[key][p] for p in sorted(by_prompt[key])]
                add(key, None, "prompts", "prompts resampled within the category", cluster_interval(clusters))
        else:
            add(key, None, "measurement", aa, block_interval(block_means[key], pool, min_blocks=1))
    for (category, concurrency, segment) in sorted(by_segment):
        add(("ab", category, concurrency), segment, "measurement", measurement,
            block_interval(_means(by_segment[category, concurrency, segment]), pool))
    return out


def _pool(block_means: dict[tuple, list[float]]) -> list[float]:
    return noise_pool((m for k, m in sorted(block_means.items()) if k[0] == "ab"),
                      (m for k, m in sorted(block_means.items()) if k[0] == "aa"))


def weighted(pairs: Iterable[tuple], blocks: Iterable[tuple], times: Iterable[tuple]) -> list[tuple]:
    """Rows of ``int_speedup_intervals`` for the weighted overall speedup
    (``speedup_weighted``, category '(weighted)').

    ``pairs`` and ``blocks`` as for ``compute`` (they give the run's noise
    pool); ``times``: (concurrency, repeat, category, weight, baseline mean
    e2e, speculative mean e2e) per weighted category (weight > 0) with pairs in
    that repeat. A repeat's block figure is ln(sum w Tb / sum w Ts) over the
    level's weighted categories, used only when every one of them has pairs in
    that repeat; the interval needs 2 such repeats, like the speedup mart's."""
    by_repeat: dict[tuple, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for comparison, category, concurrency, _prompt_id, repeat, log_ratio in pairs:
        by_repeat[comparison, category, concurrency][repeat].append(log_ratio)
    for comparison, concurrency, repeat, log_ratio in blocks:
        by_repeat[comparison, SYSTEM, concurrency][repeat].append(log_ratio)
    pool = _pool({key: _means(reps) for key, reps in by_repeat.items()})

    level_categories: dict[int, set[str]] = defaultdict(set)
    sums: dict[tuple[int, int], list] = defaultdict(lambda: [0.0, 0.0, set()])
    for concurrency, repeat, category, weight, base_ms, spec_ms in times:
        level_categories[concurrency].add(category)
        acc = sums[concurrency, repeat]
        acc[0] += weight * base_ms
        acc[1] += weight * spec_ms
        acc[2].add(category)
    out = []
    for level in sorted(level_categories):
        figures = [math.log(b / s) for (lv, _r), (b, s, cats) in sorted(sums.items())
                   if lv == level and cats == level_categories[level] and b > 0 and s > 0]
        ci = block_interval(figures, pool)
        if ci is not None:
            out.append(("ab", "(weighted)", level, None, "measurement", ci[0], ci[1], RESAMPLES, SEED,
                        "repeats resampled: per-repeat weighted mean e2e ratio plus the run's pooled block noise"))
    return out


def _means(reps: dict[int, list[float]]) -> list[float]:
    """Per repeat (in repeat order), the mean of its log ratios: the block figures."""
    return [sum(v) / len(v) for _, v in sorted(reps.items())]


def create_table(con) -> None:
    """The empty table, so the marts over it can be created."""
    con.execute(f"create table {TABLE} ({_COLUMNS})")


def fill(con) -> None:
    """Compute every interval from the paired views and insert them."""
    pairs = con.execute("select comparison, category, concurrency, prompt_id, repeat, log_ratio "
                        "from int_requests_paired "
                        "order by comparison, category, concurrency, prompt_id, repeat, pair_index").fetchall()
    blocks = con.execute("select comparison, concurrency, repeat, log_ratio from int_blocks_paired "
                         "order by comparison, concurrency, repeat").fetchall()
    segments = con.execute("select category, concurrency, segment, prompt_id, repeat, log_ratio "
                           "from int_natural_end_pairs where segment <> 'unknown' and log_ratio is not null "
                           "order by category, concurrency, segment, prompt_id, repeat, pair_index").fetchall()
    rows = compute(pairs, blocks, segments)
    if has_view(con, "speedup_weighted"):
        times = con.execute("""
            select p.concurrency, p.repeat, p.category, w.share_used,
                   avg(p.reference_e2e_ms), avg(p.treatment_e2e_ms)
            from int_requests_paired p
            join speedup_weighted w on w.category = p.category and w.concurrency = p.concurrency
            where p.comparison = 'ab' and w.category <> '(weighted)' and w.share_used > 0
            group by all order by all""").fetchall()
        rows += weighted(pairs, blocks, times)
    if rows:
        con.executemany(f"insert into {TABLE} values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
