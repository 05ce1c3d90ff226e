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
- **measurement** (per category and level, ``comparison = 'ab'``): the
  prompts are fixed; within each prompt its pairs (repeats, and repeated sends
  of the prompt in one block) are resampled with replacement. Technically a
  residual bootstrap: a prompt's pairs are its mean plus its residuals, and
  the residuals are scaled by ``sqrt(n / (n - 1))`` so that a prompt with few
  pairs (n = 2 with two repeats) does not understate its spread. Prompts with
  one pair contribute their value unchanged; with one pair for every prompt
  (one repeat) there is no measurement interval (NULL). Covers request-to-
  request noise for this prompt set; a drift shared by a whole block is what
  the A/A floor is for.
- **prompts** (per category and level): prompts resampled with replacement
  within the category, each with all its pairs (a cluster bootstrap). Covers
  the choice of prompts from the category as well as the measurement noise.
  NULL with fewer than 2 prompts.
- **(system)** (``comparison = 'ab'``): the per-repeat ratios of whole-level
  throughput (``int_blocks_paired``) resampled with replacement; with 2 repeats
  this is the range of the two ratios; NULL with one repeat.
- **A/A** (``comparison = 'aa'``, baseline repeat r + 1 against repeat r): per
  category, the A/A pairs resampled by prompt (cluster bootstrap). Both sides
  of an A/A pair are the same server on the same prompt, so the prompt's effect
  cancels and their spread across prompts is measurement noise; this works
  from 2 repeats, where each prompt has one A/A pair. For (system), the
  consecutive-repeat throughput ratios are resampled (needs 3 repeats: 2 ratios).
  A prompt's consecutive A/A log ratios telescope (their sum is first minus
  last repeat), so with 3 or more repeats the A/A statistic sees the noise of
  the middle repeats only through the other prompts; the floor is the interval
  of that statistic, not of every repeat's noise.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Iterable, Sequence

import numpy as np

__all__ = ["LEVEL", "RESAMPLES", "SEED", "SYSTEM", "TABLE", "METHOD", "cluster_interval", "compute",
           "create_table", "fill", "geometric_mean", "measurement_interval"]

RESAMPLES = 2000
SEED = 0
LEVEL = 0.95
TABLE = "int_speedup_intervals"
SYSTEM = "(system)"

#: One line for the report: how the intervals are computed.
METHOD = (f"{LEVEL:.0%} percentile bootstrap intervals, {RESAMPLES} resamples, seed {SEED} "
          "(numpy default_rng, fresh per group). measurement: prompts fixed, each prompt's pairs resampled "
          "(residuals scaled by sqrt(n/(n-1))); prompts: prompts resampled within the category with their "
          "pairs; (system): per-repeat throughput ratios resampled; A/A: A/A pairs resampled by prompt.")

_COLUMNS = """comparison varchar, category varchar, concurrency integer, "interval" varchar,
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


def measurement_interval(clusters: Sequence[Sequence[float]], *, seed: int = SEED,
                         resamples: int = RESAMPLES) -> Interval | None:
    """Prompts fixed, each cluster's (prompt's) values resampled: residual
    bootstrap with residuals scaled by sqrt(n/(n-1)). None when no cluster has
    two values (nothing to estimate the noise from)."""
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


def compute(pairs: Iterable[tuple], blocks: Iterable[tuple]) -> list[tuple]:
    """Rows of ``int_speedup_intervals``.

    ``pairs``: (comparison, category, concurrency, prompt_id, log_ratio) from
    ``int_requests_paired``; ``blocks``: (comparison, concurrency, log_ratio)
    from ``int_blocks_paired``. Returns (comparison, category, concurrency,
    interval, ci_low, ci_high, resamples, seed, method) for every interval that
    exists."""
    by_prompt: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for comparison, category, concurrency, prompt_id, log_ratio in pairs:
        by_prompt[comparison, category, concurrency][prompt_id].append(log_ratio)
    by_level: dict[tuple, list[list[float]]] = defaultdict(list)
    for comparison, concurrency, log_ratio in blocks:
        by_level[comparison, concurrency].append([log_ratio])

    out = []

    def add(key, interval, method, ci):
        if ci is not None:
            out.append((*key, interval, ci[0], ci[1], RESAMPLES, SEED, method))

    for key in sorted(by_prompt):
        clusters = [by_prompt[key][p] for p in sorted(by_prompt[key])]
        if key[0] == "ab":
            add(key, "measurement", "per-prompt residual resampling, prompts fixed", measurement_interval(clusters))
            add(key, "prompts", "prompts resampled within the category", cluster_interval(clusters))
        else:
            add(key, "measurement", "A/A pairs resampled by prompt", cluster_interval(clusters))
    for (comparison, concurrency) in sorted(by_level):
        add((comparison, SYSTEM, concurrency), "measurement", "per-repeat level throughput ratios resampled",
            cluster_interval(by_level[comparison, concurrency]))
    return out


def create_table(con) -> None:
    """The empty table, so the marts over it can be created."""
    con.execute(f"create table {TABLE} ({_COLUMNS})")


def fill(con) -> None:
    """Compute every interval from the paired views and insert them."""
    pairs = con.execute("select comparison, category, concurrency, prompt_id, log_ratio from int_requests_paired "
                        "order by comparison, category, concurrency, prompt_id, repeat, pair_index").fetchall()
    blocks = con.execute("select comparison, concurrency, log_ratio from int_blocks_paired "
                         "order by comparison, concurrency, repeat").fetchall()
    rows = compute(pairs, blocks)
    if rows:
        con.executemany(f"insert into {TABLE} values (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
