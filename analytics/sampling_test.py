"""The sampling-mode test: does speculation leave the output distribution
unchanged at temperature > 0? Computed in Python (numpy only) from
``stg_sample_checks`` into the table ``sampling_tests``, which the mart
``sampling`` reads.

Method, per run, category and concurrency level, baseline against speculative
(a run's arms are compared with each other only: many runs in one database
never pool):

- **samples**: the successful samples of each arm whose (prompt, sample index)
  also has a successful sample in the other arm, so both arms weigh every
  prompt alike (a failure in one arm drops its partner too). The samples of a
  category mix its prompts; the test compares the mixtures.
- **two statistics**, each of which must have the same distribution in both
  arms if the output distribution is unchanged:
  ``sequence_logprob``: the sum of the emitted tokens' logprobs under the
  target [nats]; ``natural_length``: ``natural_end_position`` (the first
  end-of-sequence token sampled), or ``max_tokens`` when the model did not end
  within max_tokens: such a sample is *censored* at max_tokens. Censoring is
  the same in both arms, so the test stays valid; it only cannot see beyond
  max_tokens (and the means are then lower bounds). Not tested when the
  end-of-sequence ids are unknown (an external server).
- **test**: the two-sample Kolmogorov-Smirnov test. D = the largest distance
  between the two empirical CDFs; p-value from the asymptotic (Kolmogorov)
  distribution, p = Q(sqrt(n m / (n + m)) D) with
  Q(x) = 2 sum_{k>=1} (-1)^(k-1) exp(-2 k^2 x^2). Ties (natural lengths are
  integers) make it conservative; below about 20 samples per arm it is
  approximate.
- **alpha**: 0.05 for the pair of statistics, Bonferroni-corrected: each is
  tested at 0.05 / 2 = 0.025. A row's verdict is ``differs`` when p < 0.025,
  else ``same distribution (not rejected at 0.05)``.
- **smallest detectable effect**: ``min_detectable_d`` = the critical D at the
  row's alpha, c(alpha) sqrt((n + m) / (n m)) with c(alpha) =
  sqrt(-ln(alpha / 2) / 2); no smaller D can be rejected. In the statistic's
  units, ``min_detectable_shift`` = (z_(1 - alpha/2) + z_0.80) s
  sqrt(1/n + 1/m), s the pooled standard deviation: the shift of the mean a
  test at the same alpha would detect with 80% power (normal approximation;
  the KS test needs about as much).
"""

from __future__ import annotations

import math
from collections import defaultdict
from statistics import NormalDist

import numpy as np
import pyarrow as pa

from specdec.analytics.arrow_tables import create_empty_table

__all__ = ["ALPHA", "DIFFERS", "FAMILY_ALPHA", "METHOD", "SAME", "SAMPLING_TESTS_SCHEMA", "STATISTICS", "TABLE",
           "compare", "compute", "create_table", "critical_d", "fill", "kolmogorov_sf", "ks_2samp",
           "min_detectable_shift"]

TABLE = "sampling_tests"
FAMILY_ALPHA = 0.05
STATISTICS = ("sequence_logprob", "natural_length")
ALPHA = FAMILY_ALPHA / len(STATISTICS)  # Bonferroni: each statistic at 0.025
POWER = 0.80
SAME = "same distribution (not rejected at 0.05)"
DIFFERS = "differs"
METHOD = ("two-sample Kolmogorov-Smirnov test, asymptotic p-value Q(sqrt(nm/(n+m)) D); family alpha 0.05 "
          f"over {len(STATISTICS)} statistics, Bonferroni: each at {ALPHA:g}; samples matched by prompt and "
          "sample index, successful in both arms; natural_length censored at max_tokens")

SAMPLING_TESTS_SCHEMA = pa.schema([
    ("run_id", pa.string()), ("category", pa.string()), ("concurrency", pa.int64()), ("statistic", pa.string()),
    ("n_baseline", pa.int64()), ("n_speculative", pa.int64()),
    ("failed_baseline", pa.int64()), ("failed_speculative", pa.int64()),
    ("censored_baseline", pa.int64()), ("censored_speculative", pa.int64()),
    ("mean_baseline", pa.float64()), ("mean_speculative", pa.float64()),
    ("ks_statistic", pa.float64()), ("p_value", pa.float64()), ("alpha", pa.float64()),
    ("min_detectable_d", pa.float64()), ("min_detectable_shift", pa.float64()),
    ("verdict", pa.string()), ("excluded_reason", pa.string()), ("method", pa.string()),
])

_SAMPLES_SQL = """
    select arm, category, concurrency, prompt_id, sample_index, success, sequence_logprob,
           natural_end_position, max_tokens, eos_token_ids is not null as eos_known, run_id
    from stg_sample_checks
    order by run_id, category, concurrency, arm, prompt_id, sample_index, request_id"""


# ------------------------------------------------------------------ the test
def ks_2samp(x, y) -> tuple[float, float]:
    """Two-sample Kolmogorov-Smirnov: (D, asymptotic two-sided p-value)."""
    a, b = np.sort(np.asarray(x, dtype=float)), np.sort(np.asarray(y, dtype=float))
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        raise ValueError("both samples need at least one value")
    points = np.concatenate([a, b])
    cdf_a = np.searchsorted(a, points, side="right") / n
    cdf_b = np.searchsorted(b, points, side="right") / m
    d = float(np.max(np.abs(cdf_a - cdf_b)))
    return d, kolmogorov_sf(math.sqrt(n * m / (n + m)) * d)


def kolmogorov_sf(x: float) -> float:
    """P(K > x) for the Kolmogorov distribution: 2 sum (-1)^(k-1) exp(-2 k^2 x^2)
    for x >= 1; for x < 1 the equivalent, faster-converging form
    1 - sqrt(2 pi) / x sum exp(-(2k - 1)^2 pi^2 / (8 x^2))."""
    if x <= 0:
        return 1.0
    k = np.arange(1, 101)
    if x >= 1:
        value = 2 * np.sum((-1.0) ** (k - 1) * np.exp(-2 * k**2 * x * x))
    else:
        value = 1 - math.sqrt(2 * math.pi) / x * np.sum(np.exp(-((2 * k - 1) ** 2) * math.pi**2 / (8 * x * x)))
    return float(min(1.0, max(0.0, value)))


def critical_d(n: int, m: int, alpha: float = ALPHA) -> float:
    """The smallest D the test rejects at ``alpha``: c(alpha) sqrt((n + m) / (n m))."""
    return math.sqrt(-math.log(alpha / 2) / 2) * math.sqrt((n + m) / (n * m))


def min_detectable_shift(x, y, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """(z_(1 - alpha/2) + z_power) * pooled sd * sqrt(1/n + 1/m); None with
    fewer than 3 values in all (no pooled sd)."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n, m = len(a), len(b)
    if n + m < 3 or n == 0 or m == 0:
        return None
    ss = ((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum()
    sd = math.sqrt(ss / (n + m - 2))
    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    return z * sd * math.sqrt(1 / n + 1 / m)


def compare(x, y, alpha: float = ALPHA) -> dict:
    """One test's figures: ks_statistic, p_value, min_detectable_d,
    min_detectable_shift, verdict (None when no difference could be detected
    at all, i.e. the critical D >= 1), excluded_reason."""
    d, p = ks_2samp(x, y)
    crit = critical_d(len(x), len(y), alpha)
    out = {"ks_statistic": d, "p_value": p, "alpha": alpha, "min_detectable_d": crit,
           "min_detectable_shift": min_detectable_shift(x, y, alpha), "verdict": None, "excluded_reason": None}
    if crit >= 1:
        out["excluded_reason"] = (f"too few samples ({len(x)} and {len(y)}): no difference could be "
                                  f"detected (critical D {crit:.2f} >= 1)")
    else:
        out["verdict"] = DIFFERS if p < alpha else SAME
    return out


# ------------------------------------------------------------------ the table
def _rows(samples: list[tuple]) -> list[dict]:
    """Test rows from (arm, category, concurrency, prompt_id, sample_index,
    success, sequence_logprob, natural_end_position, max_tokens, eos_known,
    run_id), one group per (run_id, category, concurrency)."""
    groups: dict[tuple, dict[str, list]] = defaultdict(lambda: {"baseline": [], "speculative": []})
    for s in samples:
        groups[s[10], s[1], s[2]][s[0]].append(s)
    out = []
    for (run_id, category, level), arms in sorted(groups.items()):
        ok = {arm: {(s[3], s[4]) for s in rows if _usable(s)} for arm, rows in arms.items()}
        both = ok["baseline"] & ok["speculative"]
        used = {arm: [s for s in rows if _usable(s) and (s[3], s[4]) in both] for arm, rows in arms.items()}
        base = {"run_id": run_id, "category": category, "concurrency": level,

                "failed_baseline": sum(not s[5] for s in arms["baseline"]),
                "failed_speculative": sum(not s[5] for s in arms["speculative"])}
        for statistic in STATISTICS:
            row = {**base, "statistic": statistic, "method": METHOD, "alpha": ALPHA,
                   "n_baseline": len(used["baseline"]), "n_speculative": len(used["speculative"])}
            out.append(row)
            reason = _missing(arms, used)
            if statistic == "natural_length" and reason is None and not all(s[9] for a in used.values() for s in a):
                reason = "end-of-sequence ids unknown: the natural end was not recorded"
            if reason is not None:
                row["excluded_reason"] = reason
                continue
            values = {arm: [_value(statistic, s) for s in rows] for arm, rows in used.items()}
            if statistic == "natural_length":
                row["censored_baseline"] = sum(s[7] is None for s in used["baseline"])
                row["censored_speculative"] = sum(s[7] is None for s in used["speculative"])
            row["mean_baseline"] = float(np.mean(values["baseline"]))
            row["mean_speculative"] = float(np.mean(values["speculative"]))
            row.update(compare(values["baseline"], values["speculative"]))
    return out


def _usable(s: tuple) -> bool:
    """Succeeded, with its sequence logprob (a successful check always has one)."""
    return bool(s[5]) and s[6] is not None


def _missing(arms: dict[str, list], used: dict[str, list]) -> str | None:
    for arm in ("baseline", "speculative"):
        if not arms[arm]:
            return f"no {arm} samples at this level"
    if not used["baseline"]:
        return "no prompt and sample index succeeded in both arms"
    return None


def _value(statistic: str, s: tuple) -> float:
    if statistic == "sequence_logprob":
        return float(s[6])
    return float(s[8] if s[7] is None else s[7])  # censored at max_tokens


def _test_rows(con) -> list[dict]:
    """The ``sampling_tests`` rows from the ``stg_sample_checks`` view, as dicts."""
    return _rows(con.execute(_SAMPLES_SQL).fetchall())


def compute(con) -> pa.Table:
    """The ``sampling_tests`` rows from the ``stg_sample_checks`` view."""
    return pa.Table.from_pylist(_test_rows(con), schema=SAMPLING_TESTS_SCHEMA)


def create_table(con) -> None:
    """The empty table, so the mart over it can be created before it is filled."""
    create_empty_table(con, TABLE, SAMPLING_TESTS_SCHEMA)


def fill(con) -> None:
    """Compute the tests once the views exist, and insert them (a run without sampled
    checks makes no Arrow table: building even an empty one imports pandas)."""
    rows = _test_rows(con)
    if rows:
        con.from_arrow(pa.Table.from_pylist(rows, schema=SAMPLING_TESTS_SCHEMA)).insert_into(TABLE)
