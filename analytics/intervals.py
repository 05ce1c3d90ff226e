"""Confidence intervals of the speedup, computed at build time.

``build`` creates the table ``int_speedup_intervals`` empty before the SQL
models (so the ``speedup`` mart can be created over it), then fills it from the
paired rows once every view exists (``fill``). Everything is a geometric mean
of paired ratios, so intervals are built on ``log_ratio`` and mapped back with
``exp``.

Method (stated again in the ``speedup`` mart header and in the report):

- **measurement** (per category and level, and ``(system)``; ``comparison =
  'ab'``): the prompts are fixed and the noise that counts is the noise of a
  whole *block* (one arm running one level once): on this 2-core machine two
  blocks of the same arm and prompts differ by up to 10% while requests within
  a block move together (a request-level bootstrap treats them as independent
  and gave "faster" for an A/A run). So each repeat r of a group gives one
  paired block figure m_r (the mean log ratio over the group's prompts in that
  repeat, or the block throughput log ratio for ``(system)``), and the
  interval is a **Student t interval over repeats with a pooled variance**:
  mean m +- t(0.975, df) * sqrt(s2 / R), s2 and df from the run's noise pool.
  NULL with one repeat, or a pool with no degree of freedom.

  Why t and not a bootstrap (the method until this change): with 2-3 repeats a
  residual bootstrap draws from a handful of values and cannot produce tails
  wider than they are, so its "95%" interval behaved like a +-1.96 sigma
  interval with sigma estimated from 2-4 degrees of freedom. A clean-clone CI
  run of the A/A engine test (both arms the same server) had every group at
  level 1 near 0.94 [0.90-0.98]. The t quantile is what pays for a variance
  estimated from few values (t(0.975, 4) = 2.78 against 1.96).
- **the noise pool** (one machine, one noise; every group of the run, on the
  log scale) is two sets of values, each value a difference of two blocks, so
  each has the variance of a block figure's noise:
  - the A/B residuals (m_r - mean m) * sqrt(R / (R - 1)) of every group;
  - the A/A block figures d_r (baseline block of repeat r + 1 against repeat
    r, same prompts; for ``(system)`` the throughput ratio), *not* centred:
    both blocks ran the same configuration, so anything but 0 is noise,
    including drift of the host (or a fresh server) between the two blocks.
  s2 pools the two sets' mean squares, weighted by their degrees of freedom,
  and df is the sum of theirs (two estimates of the same noise, pooled as a
  pooled variance is). The A/A set is there because A/B residuals alone missed
  noise that moves whole repeats together: in an A/A probe of 6 repeats the
  A/B figures of all categories were at +3% in repeats 0-3 and -3% in 4-5.
  (Taking the larger of the two sets instead, tried for a day, covered 1 in
  98-99% of simulated no-effect runs: so wide that the demo's code speedup of
  2.4x read "within noise".)
- **degrees of freedom**: the groups of one level share their blocks, so their
  residuals are not independent: each level counts once, df = sum over levels
  of (R_level - 1) (R_level: the most repeats of any group at that level; for
  the A/A set, the most A/A figures at that level), summed over the two sets.
  Levels are counted as independent, which they are not quite when a server
  process is reused across levels (see ``replay/schedule.py``);
  ``tests/analytics/test_intervals.py`` checks the coverage on simulated runs,
  with and without noise shared across levels: 3-5.5% of intervals miss a
  true ratio of 1 (the residual bootstrap this replaced: 4.5-8.6%).
- **prompts** (per category and level): a paired bootstrap, prompts resampled
  with replacement within the category, each with all its pairs (a cluster
  bootstrap): ``RESAMPLES`` = 2000 resamples, a fresh
  ``numpy.random.default_rng(SEED)`` with ``SEED`` = 0 per group (so one
  group's interval does not depend on which other groups the run has), the
  2.5% and 97.5% quantiles. Covers the choice of prompts from the category as
  well as the measurement noise. NULL with fewer than 2 prompts.
- **A/A** (``comparison = 'aa'``): per group (category and level, and
  ``(system)``), the t interval of the group's A/A block figures d_r (R - 1 of
  them): mean d +- t(0.975, df) * sqrt(s2 / (R - 1)), same pool. From 2
  repeats (one A/A block figure), for ``(system)`` too. The A/A floor of the
  ``speedup`` mart mirrors this interval about 1.
- **segments** (``segment`` = 'before_natural_end' / 'after_natural_end',
  per category and level; ``speedup_natural_end``): the measurement interval
  of the segment's paired log ratios (``int_natural_end_pairs``), block
  figures per repeat and the run's noise pool, as above. ``segment`` is NULL
  on every other row.
- **weighted** (category '(weighted)', ``speedup_weighted``): per repeat the
  block figure ln(sum_c w_c Tb_c / sum_c w_c Ts_c) over the level's weighted
  categories (repeats where each has pairs), and the run's noise pool.

Rows of the table carry ``resamples`` and ``seed`` for the bootstrap
intervals and NULL in both for the t intervals, and ``df`` for the t
intervals (NULL for the bootstrap).

**One run at a time.** A database can hold many runs (``build``); ``fill``
splits the paired rows by ``run_id`` and calls ``compute`` once per run, so
each run's intervals use that run's noise pool only (one machine, one noise:
another run may have run on another host) and every row carries its
``run_id``. ``compute`` itself knows nothing of runs.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from statistics import NormalDist
from typing import Iterable, Mapping, Sequence

import numpy as np

from specdec.analytics.models import has_view

__all__ = ["LEVEL", "RESAMPLES", "SEED", "SYSTEM", "TABLE", "METHOD", "NoisePool", "block_interval",
           "block_residuals", "cluster_interval", "compute", "compute_summed", "create_table", "fill", "geometric_mean",
           "noise_pool", "request_level_interval", "summed_cluster_interval", "t_quantile"]

RESAMPLES = 2000
_CHUNK = 64  # resamples drawn at once (summed_cluster_interval)
SEED = 0
LEVEL = 0.95
TABLE = "int_speedup_intervals"
SYSTEM = "(system)"

#: One line for the report: how the intervals are computed.
METHOD = (f"{LEVEL:.0%} intervals. measurement (categories and (system)): prompts fixed, a Student t interval over "
          "repeats, mean of the per-repeat block figures +- t(df) * sqrt(s2 / R), s2 the run's pooled block noise: "
          "every group's A/B block residuals (scaled by sqrt(R/(R-1))) and every A/A block figure (baseline repeat "
          "r+1 against r, not centred), their mean squares pooled by degrees of freedom, so noise shared by a whole "
          "block or repeat counts; df = sum over levels of (repeats - 1), for each set. prompts: paired bootstrap, prompts resampled "
          f"within the category with their pairs, {RESAMPLES} resamples, seed {SEED} (numpy default_rng, fresh per "
          "group), percentile interval. A/A: the t interval of the A/A block figures with the same s2 and df.")

_COLUMNS = """run_id varchar, comparison varchar, category varchar, concurrency integer, segment varchar,
    "interval" varchar, ci_low double, ci_high double, resamples integer, seed integer, df integer,
    method varchar"""

Interval = tuple[float, float]
GroupKey = tuple  # (comparison, category, concurrency)


def geometric_mean(log_ratios: Iterable[float]) -> float:
    """exp of the mean log ratio: the geometric mean of the ratios."""
    values = list(log_ratios)
    return math.exp(sum(values) / len(values))


def _quantiles(log_stats: np.ndarray) -> Interval:
    tail = (1 - LEVEL) / 2
    lo, hi = np.quantile(log_stats, [tail, 1 - tail])
    return float(math.exp(lo)), float(math.exp(hi))


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def _t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The p quantile of Student's t with ``df`` degrees of freedom (bisection
    on the CDF through the regularized incomplete beta; checked against scipy
    in the tests). ``df`` = inf gives the normal quantile."""
    if not 0.0 < p < 1.0 or not df > 0:
        raise ValueError(f"t_quantile: p={p}, df={df}")
    if math.isinf(df):
        return NormalDist().inv_cdf(p)
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if _t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class NoisePool:
    """The run's estimate of the noise of one block figure (log scale): the
    A/B scaled residuals and the A/A block figures (each with its mirror),
    each set with its degrees of freedom; ``mean_square`` (s2) pools the two
    sets' mean squares weighted by their degrees of freedom, ``df`` is their sum."""

    ab_values: tuple[float, ...] = ()
    ab_df: int = 0
    aa_values: tuple[float, ...] = ()
    aa_df: int = 0

    @property
    def df(self) -> int:
        return (self.ab_df if self.ab_values else 0) + (self.aa_df if self.aa_values else 0)

    @property
    def mean_square(self) -> float:
        if not self.df:
            return 0.0
        ab = self.ab_df * _mean_square(self.ab_values) if self.ab_values else 0.0
        aa = self.aa_df * _mean_square(self.aa_values) if self.aa_values else 0.0
        return (ab + aa) / self.df

    @property
    def source(self) -> str:
        parts = [f"A/B residuals df {self.ab_df}" if self.ab_values else "",
                 f"A/A figures df {self.aa_df}" if self.aa_values else ""]
        return " + ".join(p for p in parts if p) or "none"


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


def block_interval(block_means: Sequence[float], pool: NoisePool, *, min_blocks: int = 2) -> Interval | None:
    """The t interval of a group's block figures: mean +- t(0.975, pool.df) *
    sqrt(pool.mean_square / n), n the number of block figures. None with fewer
    than ``min_blocks`` block figures (2 for an A/B group: one repeat says
    nothing of its own spread; 1 for an A/A group, whose figures are noise by
    construction) or a pool without a degree of freedom."""
    n = len(block_means)
    if n < max(min_blocks, 1) or pool.df < 1:
        return None
    centre = sum(block_means) / n
    half = t_quantile(1 - (1 - LEVEL) / 2, pool.df) * math.sqrt(pool.mean_square / n)
    return math.exp(centre - half), math.exp(centre + half)


def noise_pool(block_means: Mapping[GroupKey, Sequence[float]]) -> NoisePool:
    """The run's noise pool from every group's block figures, keyed by
    (comparison, category, concurrency): the A/B block residuals of every
    group with 2 or more repeats, and every A/A block figure d as it is (not
    centred) together with -d (which repeat is the A/A "treatment" is
    arbitrary, so the set is symmetric about 0). Degrees of freedom per set:
    per level, the most (repeats - 1) of any A/B group there, or the most A/A
    figures of any A/A group there, summed over levels."""
    ab = {k: m for k, m in block_means.items() if k[0] == "ab"}
    aa = {k: m for k, m in block_means.items() if k[0] == "aa"}
    ab_values = block_residuals(ab[k] for k in sorted(ab))
    aa_values = [float(v) for k in sorted(aa) for d in aa[k] for v in (d, -d)]
    return NoisePool(tuple(ab_values), _df_per_level(ab, lambda n: n - 1),
                     tuple(aa_values), _df_per_level(aa, lambda n: n))


def _df_per_level(groups: Mapping[GroupKey, Sequence[float]], df_of) -> int:
    per_level: dict[int, int] = defaultdict(int)
    for (_comparison, _category, concurrency), means in groups.items():
        per_level[concurrency] = max(per_level[concurrency], max(df_of(len(means)), 0))
    return sum(per_level.values())


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
    return summed_cluster_interval([float(a.sum()) for a in arrays], [len(a) for a in arrays],
                                   seed=seed, resamples=resamples)


def summed_cluster_interval(sums: Sequence[float], counts: Sequence[int], *, seed: int = SEED,
                            resamples: int = RESAMPLES) -> Interval | None:
    """``cluster_interval`` from each cluster's sum and count of values (all the
    resampled mean needs). None with fewer than two clusters."""
    if len(sums) < 2:
        return None
    rng = np.random.default_rng(seed)
    sums_ = np.asarray(sums, dtype=float)
    counts_ = np.asarray(counts, dtype=float)
    k = len(sums_)
    equal = bool((counts_ == counts_[0]).all())  # every cluster as large (prompts x repeats): one count
    means = np.empty(resamples)
    # Drawn and summed _CHUNK resamples at a time: the same draws as one (resamples, k) array
    # (the generator's stream is consumed in the same order), with the gathered values kept
    # in cache instead of written to and read back from memory (half the time at k = 3000).
    # int32 indices (a cluster count is far below 2**31): half the memory traffic of int64.
    for start in range(0, resamples, _CHUNK):
        idx = rng.integers(0, k, size=(min(_CHUNK, resamples - start), k), dtype=np.int32)
        total = sums_[idx].sum(axis=1)
        means[start:start + len(idx)] = total / (counts_[0] * k) if equal else total / counts_[idx].sum(axis=1)
    return _quantiles(means)


#: A sum of log ratios and their count.
Summed = list  # [sum, count]


def _by_repeat(repeats: Iterable[tuple], blocks: Iterable[tuple]) -> dict:
    """Per group (comparison, category, concurrency): the summed log ratios by
    repeat (blocks go to the group '(system)'). ``repeats`` rows end in (log
    ratio sum, count): one pair each, or a repeat's pairs summed."""
    by_repeat: dict[tuple, dict[int, Summed]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0]))
    for comparison, category, concurrency, repeat, total, n in repeats:
        acc = by_repeat[comparison, category, concurrency][repeat]
        acc[0] += total
        acc[1] += n
    for comparison, concurrency, repeat, log_ratio in blocks:
        acc = by_repeat[comparison, SYSTEM, concurrency][repeat]
        acc[0] += log_ratio
        acc[1] += 1
    return by_repeat


def _t_row(key: tuple, segment, ci: Interval | None, pool: NoisePool, method: str) -> list[tuple]:
    if ci is None:
        return []
    return [(*key, segment, "measurement", ci[0], ci[1], None, None, pool.df, f"{method} ({pool.source})")]


def compute(pairs: Iterable[tuple], blocks: Iterable[tuple], segments: Iterable[tuple] = (),
            times: Iterable[tuple] = ()) -> list[tuple]:
    """Rows of ``int_speedup_intervals``.

    ``pairs``: (comparison, category, concurrency, prompt_id, repeat, log_ratio)
    from ``int_requests_paired``; ``blocks``: (comparison, concurrency, repeat,
    log_ratio) from ``int_blocks_paired``; ``segments``: (category,
    concurrency, segment, prompt_id, repeat, log_ratio) from
    ``int_natural_end_pairs`` (split pairs only); ``times``: the weighted
    categories' mean times per level and repeat (``_weighted``). Returns (comparison,
    category, concurrency, segment, interval, ci_low, ci_high, resamples, seed,
    df, method) for every interval that exists; ``segment`` is NULL except for
    the speedup before and after the natural end, whose measurement interval
    uses the same noise pool as the whole requests (one machine, one noise)."""
    pairs = list(pairs)
    by_prompt: dict[tuple, dict[str, Summed]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0]))
    for comparison, category, concurrency, prompt_id, _repeat, log_ratio in pairs:
        acc = by_prompt[comparison, category, concurrency][prompt_id]
        acc[0] += log_ratio
        acc[1] += 1
    prompts = {key: ([group[p][0] for p in sorted(group)], [group[p][1] for p in sorted(group)])
               for key, group in by_prompt.items()}
    return compute_summed([(c, cat, lv, rep, lr, 1) for c, cat, lv, _p, rep, lr in pairs], prompts, blocks,
                          [(c, lv, seg, rep, lr, 1) for c, lv, seg, _p, rep, lr in segments], times)


def compute_summed(repeats: Iterable[tuple], prompts: Mapping[tuple, tuple[Sequence[float], Sequence[int]]],
                   blocks: Iterable[tuple], segments: Iterable[tuple] = (),
                   times: Iterable[tuple] = ()) -> list[tuple]:
    """``compute`` from the pairs already summed, as ``fill`` reads them from
    DuckDB (which sums a few hundred thousand pairs faster than Python can
    receive them one by one). Every figure needs only sums: a block figure is
    a repeat's mean, a resampled cluster a prompt's sum and count.
    ``repeats``: (comparison, category, concurrency, repeat, log ratio sum,
    count); ``prompts``: per group (comparison, category, concurrency), the
    per-prompt log ratio sums and counts in prompt_id order (the order the
    bootstrap draws from); ``segments``: (category, concurrency, segment,
    repeat, log ratio sum, count)."""
    by_repeat = _by_repeat(repeats, blocks)
    by_segment: dict[tuple, dict[int, Summed]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0]))
    for category, concurrency, segment, repeat, total, n in segments:
        acc = by_segment[category, concurrency, segment][repeat]
        acc[0] += total
        acc[1] += n

    # per group, its per-repeat block figures; the run's noise pool from all of them
    block_means = {key: _means(reps) for key, reps in by_repeat.items()}
    pool = noise_pool(block_means)

    out: list[tuple] = []
    measurement = "t interval over repeats: block figures with the run's pooled block noise, prompts fixed"
    aa = "t interval of the A/A block figures with the run's pooled block noise"
    for key in sorted(block_means):
        if key[0] == "ab":
            out += _t_row(key, None, block_interval(block_means[key], pool), pool, measurement)
            if key[1] != SYSTEM and key in prompts:
                ci = summed_cluster_interval(*prompts[key])
                if ci is not None:
                    out.append((*key, None, "prompts", ci[0], ci[1], RESAMPLES, SEED, None,
                                "paired bootstrap: prompts resampled within the category"))
        else:
            out += _t_row(key, None, block_interval(block_means[key], pool, min_blocks=1), pool, aa)
    for (category, concurrency, segment) in sorted(by_segment):
        out += _t_row(("ab", category, concurrency), segment,
                      block_interval(_means(by_segment[category, concurrency, segment]), pool), pool, measurement)
    return out + _weighted(times, pool)


def _weighted(times: Iterable[tuple], pool: NoisePool) -> list[tuple]:
    """Rows of ``int_speedup_intervals`` for the weighted overall speedup
    (``speedup_weighted``, category '(weighted)'), with the run's noise pool.

    ``times``: (concurrency, repeat, category, weight, baseline mean e2e,
    speculative mean e2e) per weighted category (weight > 0) with pairs in
    that repeat. A repeat's block figure is ln(sum w Tb / sum w Ts) over the
    level's weighted categories, used only when every one of them has pairs in
    that repeat; the interval needs 2 such repeats, like the speedup mart's."""
    level_categories: dict[int, set[str]] = defaultdict(set)
    sums: dict[tuple[int, int], list] = defaultdict(lambda: [0.0, 0.0, set()])
    for concurrency, repeat, category, weight, base_ms, spec_ms in times:
        level_categories[concurrency].add(category)
        acc = sums[concurrency, repeat]
        acc[0] += weight * base_ms
        acc[1] += weight * spec_ms
        acc[2].add(category)
    out: list[tuple] = []
    for level in sorted(level_categories):
        figures = [math.log(b / s) for (lv, _r), (b, s, cats) in sorted(sums.items())
                   if lv == level and cats == level_categories[level] and b > 0 and s > 0]
        out += _t_row(("ab", "(weighted)", level), None, block_interval(figures, pool), pool,
                      "t interval over repeats: per-repeat weighted mean e2e ratio with the run's pooled block noise")
    return out


def _means(reps: dict[int, Summed]) -> list[float]:
    """Per repeat (in repeat order), the mean of its log ratios: the block figures."""
    return [total / n for _, (total, n) in sorted(reps.items()) if n]


def create_table(con) -> None:
    """The empty table, so the marts over it can be created."""
    con.execute(f"create table {TABLE} ({_COLUMNS})")


def _by_run(rows: list[tuple]) -> dict[str, list[tuple]]:
    """Rows whose first value is the run_id, grouped by it (run_id dropped), in order."""
    out: dict[str, list[tuple]] = defaultdict(list)
    for row in rows:
        out[row[0]].append(row[1:])
    return out


def fill(con) -> None:
    """Compute every interval from the paired views, one run at a time, and insert them."""
    repeats = _by_run(con.execute(
        "select run_id, comparison, category, concurrency, repeat, sum(log_ratio), count(log_ratio) "
        "from int_requests_paired group by all order by all").fetchall())
    prompts: dict[str, dict[tuple, tuple[list[float], list[int]]]] = defaultdict(dict)
    for run_id, comparison, category, concurrency, sums, counts in con.execute("""
            select run_id, comparison, category, concurrency, list(s order by prompt_id), list(n order by prompt_id)
            from (select run_id, comparison, category, concurrency, prompt_id,
                         sum(log_ratio) as s, count(log_ratio) as n
                  from int_requests_paired where comparison = 'ab' and log_ratio is not null group by all)
            group by all""").fetchall():
        prompts[run_id][comparison, category, concurrency] = (sums, counts)
    blocks = _by_run(con.execute(
        "select run_id, comparison, concurrency, repeat, log_ratio from int_blocks_paired "
        "order by run_id, comparison, concurrency, repeat").fetchall())
    segments = _by_run(con.execute(
        "select run_id, category, concurrency, segment, repeat, sum(log_ratio), count(log_ratio) "
        "from int_natural_end_pairs where segment <> 'unknown' and log_ratio is not null "
        "group by all order by all").fetchall())
    times: dict[str, list[tuple]] = {}
    if has_view(con, "speedup_weighted"):
        times = _by_run(con.execute("""
            select p.run_id, p.concurrency, p.repeat, p.category, w.share_used,
                   avg(p.reference_e2e_ms), avg(p.treatment_e2e_ms)
            from int_requests_paired p
            join speedup_weighted w
              on w.run_id = p.run_id and w.category = p.category and w.concurrency = p.concurrency
            where p.comparison = 'ab' and w.category <> '(weighted)' and w.share_used > 0
            group by all order by all""").fetchall())
    rows = [(run_id, *row)
            for run_id in sorted(set(repeats) | set(blocks) | set(segments) | set(times))
            for row in compute_summed(repeats.get(run_id, ()), prompts.get(run_id, {}), blocks.get(run_id, ()),
                                      segments.get(run_id, ()), times.get(run_id, ()))]
    if rows:
        con.executemany(f"insert into {TABLE} values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
