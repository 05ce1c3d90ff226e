"""The sampling-mode test: does speculation leave the output distribution
unchanged at temperature > 0? Computed in Python (numpy only) from
``stg_sample_checks`` into the table ``sampling_tests``, which the mart
``sampling`` reads.

Method, per run, category and level, baseline against speculative
(a run's arms are compared with each other only: many runs in one database
never pool):

- **samples**: the successful samples of each arm whose (prompt, sample index)
  also has a successful sample in the other arm, so both arms weigh every
  prompt alike (a failure in one arm drops its partner too).
- **are the samples distinct?** Per prompt and arm, the share of distinct
  generated token sequences among its seeds' samples. A seed-ignoring arm
  gives one sequence for every seed: its samples are then no sample of its
  distribution, and a difference would say nothing about the sampler. The
  group's verdict is ``samples not distinct`` (not ``differs``) when, at some
  prompt with at least 2 samples per arm, one arm's samples are all one
  sequence while at least half of the other arm's are distinct, or when every
  prompt gave one sequence in both arms (no randomness reached the output).
  Unknown (NULL) when token ids were not recorded (files before they were).
- **three statistics**, each a function of a sample:
  ``rescored_logprob``: the sum of the generated tokens' logprobs as *one*
  server scores them, the comparison's reference arm, by teacher forcing
  (``replay/passes/rescore.py``), so both arms are measured with one instrument
  [nats]; ``natural_length``: ``natural_end_position`` (the first
  end-of-sequence token sampled), or ``max_tokens`` when the model did not end
  within max_tokens: such a sample is *censored* at max_tokens (the same in
  both arms, so the test stays valid; it only cannot see beyond max_tokens,
  and the means are lower bounds); not tested when the end-of-sequence ids
  are unknown (an external server). ``sequence_logprob``: the sum of the
  logprobs each arm reported for its own samples [nats]: two instruments, so
  a *diagnostic* (no verdict) beside ``rescored_logprob``; the test of the
  logprobs only where no sample was re-scored (files before re-scoring).
  ``reported_minus_rescored_*``: the mean over an arm's samples of the
  reported minus the re-scored sum: near 0 where an arm reports the target's
  logprobs of what it emitted.
- **test**: the permutation test stratified by prompt (``permutation.py``):
  T = the mean over prompts of the within-prompt difference of means
  (speculative minus baseline), arm labels permuted within prompts, 9999
  random relabellings with seed 0 (all of them, exact, when there are fewer),
  two-sided p. It sees a shift of the per-prompt mean.
- **alpha**: 0.05 for the pair of statistics that carry the verdict (the
  logprob one and natural_length), Bonferroni-corrected: each is tested at
  0.05 / 2 = 0.025. A row's verdict is ``differs`` when p < 0.025, else
  ``same distribution (not rejected at 0.05)``; ``samples not distinct`` over
  either (above). Not tested (excluded_reason) when the smallest p-value the
  prompts' relabellings allow is >= alpha (too few samples).
- **smallest detectable effect**: ``min_detectable_shift`` =
  (z_(1 - alpha/2) + z_0.80) sqrt(sum_p s_p^2 (1/n_p + 1/m_p)) / P, s_p^2 a
  prompt's pooled variance: the shift of T the test detects with 80% power
  (normal approximation). ``ks_statistic`` and ``min_detectable_d`` are
  descriptive: the two-sample Kolmogorov-Smirnov distance between the arms'
  pooled samples (prompts mixed) and the critical D at alpha,
  c(alpha) sqrt((n + m) / (n m)); the verdict no longer rests on them.
"""

from __future__ import annotations

from collections import defaultdict
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from specdec.analytics.arrow_tables import create_empty_table
from specdec.analytics.ks_distance import critical_d, kolmogorov_sf, ks_2samp
from specdec.analytics.permutation import (
    PERMUTATIONS,
    SEED,
    stratified_min_detectable_shift,
    stratified_permutation_test,
)
from specdec.analytics.sample_distinct import NOT_DISTINCT, distinctness

__all__ = [
    "ALPHA",
    "DIFFERS",
    "FAMILY_ALPHA",
    "METHOD",
    "NOT_DISTINCT",
    "SAME",
    "SAMPLING_TESTS_SCHEMA",
    "STATISTICS",
    "TABLE",
    "compare",
    "compute",
    "create_table",
    "critical_d",
    "fill",
    "kolmogorov_sf",
    "ks_2samp",
    "min_detectable_shift",
]

TABLE = "sampling_tests"
FAMILY_ALPHA = 0.05
#: Every statistic tested, in the mart's order; two of them carry the verdict (VERDICT_FAMILY).
STATISTICS = ("natural_length", "rescored_logprob", "sequence_logprob")
VERDICT_FAMILY = 2  # the logprob statistic (rescored, else self-reported) and natural_length
ALPHA = FAMILY_ALPHA / VERDICT_FAMILY  # Bonferroni: each statistic at 0.025
POWER = 0.80
SAME = "same distribution (not rejected at 0.05)"
DIFFERS = "differs"
DIAGNOSTIC = (
    "self-reported by each arm's own server (two instruments): a diagnostic beside rescored_logprob, "
    "which carries the verdict"
)
INSTRUMENTS = {"natural_length": "token ids (no logprob)", "sequence_logprob": "each arm's own server"}
METHOD = (
    f"permutation test stratified by prompt: T = mean over prompts of (speculative - baseline) mean, arm "
    f"labels permuted within prompts, {PERMUTATIONS} random relabellings (seed {SEED}; all of them, exact, "
    f"when fewer), two-sided p; rescored_logprob: both arms' samples scored on one server (the reference "
    f"arm's) by teacher forcing, sequence_logprob (each arm's own report) a diagnostic beside it; family "
    f"alpha 0.05 over {VERDICT_FAMILY} statistics (rescored_logprob, natural_length), Bonferroni: each at "
    f"{ALPHA:g}; samples matched by prompt and sample index, successful in both arms; natural_length "
    f"censored at max_tokens; '{NOT_DISTINCT}' when an arm's seeds gave one token sequence at a prompt "
    "where at least half of the other arm's were distinct, or every prompt gave one sequence in both arms"
)

SAMPLING_TESTS_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("category", pa.string()),
        ("level", pa.int64()),
        ("statistic", pa.string()),
        ("n_baseline", pa.int64()),
        ("n_speculative", pa.int64()),
        ("failed_baseline", pa.int64()),
        ("failed_speculative", pa.int64()),
        ("censored_baseline", pa.int64()),
        ("censored_speculative", pa.int64()),
        ("mean_baseline", pa.float64()),
        ("mean_speculative", pa.float64()),
        ("ks_statistic", pa.float64()),
        ("p_value", pa.float64()),
        ("alpha", pa.float64()),
        ("min_detectable_d", pa.float64()),
        ("min_detectable_shift", pa.float64()),
        ("verdict", pa.string()),
        ("excluded_reason", pa.string()),
        ("method", pa.string()),
        ("instrument", pa.string()),
        ("prompts", pa.int64()),
        ("mean_difference", pa.float64()),
        ("permutations", pa.int64()),
        ("permutation_exact", pa.bool_()),
        ("distinct_share_baseline", pa.float64()),
        ("distinct_share_speculative", pa.float64()),
        ("not_distinct_prompts_baseline", pa.int64()),
        ("not_distinct_prompts_speculative", pa.int64()),
        ("not_rescored_baseline", pa.int64()),
        ("not_rescored_speculative", pa.int64()),
        ("reported_minus_rescored_baseline", pa.float64()),
        ("reported_minus_rescored_speculative", pa.float64()),
    ]
)

_SAMPLES_SQL = """
    select run_id, category, level, arm, prompt_id, sample_index, success, sequence_logprob,
           natural_end_position, max_tokens, eos_token_ids is not null as eos_known, token_ids,
           rescored_logprob_sum, rescored_by, not_rescored_reason
    from stg_sample_checks
    order by run_id, category, level, arm, prompt_id, sample_index, request_id"""


class Sample(NamedTuple):
    """One row of ``_SAMPLES_SQL``."""

    run_id: str
    category: str
    level: int
    arm: str
    prompt_id: str
    sample_index: int
    success: bool
    sequence_logprob: float | None
    natural_end_position: int | None
    max_tokens: int
    eos_known: bool
    token_ids: list[int] | None
    rescored_logprob_sum: float | None
    rescored_by: str | None
    not_rescored_reason: str | None


# ------------------------------------------------------------------ the smallest detectable shift
def min_detectable_shift(x, y, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """One prompt's (z_(1 - alpha/2) + z_power) * pooled sd * sqrt(1/n + 1/m);
    None with fewer than 3 values in all (no pooled sd)."""
    return stratified_min_detectable_shift([(x, y)], alpha, power)


# ------------------------------------------------------------------ the test
def compare(strata: list[tuple[list, list]], alpha: float = ALPHA) -> dict:
    """One test's figures from (baseline values, speculative values) per prompt:
    the permutation test's p_value, mean_difference, permutations and exactness,
    min_detectable_shift; the pooled KS distance and its critical value; verdict
    (None, with excluded_reason, when the smallest attainable p-value is >= alpha)."""
    res = stratified_permutation_test(strata)
    x = [v for a, _ in strata for v in a]
    y = [v for _, b in strata for v in b]
    out: dict[str, object] = {
        "p_value": res.p_value,
        "alpha": alpha,
        "mean_difference": res.statistic,
        "prompts": res.prompts,
        "permutations": res.permutations,
        "permutation_exact": res.exact,
        "ks_statistic": ks_2samp(x, y)[0],
        "min_detectable_d": critical_d(len(x), len(y), alpha),
        "min_detectable_shift": stratified_min_detectable_shift(strata, alpha, POWER),
        "verdict": None,
        "excluded_reason": None,
    }
    if res.min_p_value >= alpha:
        out["excluded_reason"] = (
            f"too few samples ({len(x)} and {len(y)} over {res.prompts} prompt(s)): "
            f"the smallest p-value they allow is {res.min_p_value:.3g} >= {alpha:g}"
        )
    else:
        out["verdict"] = DIFFERS if res.p_value < alpha else SAME
    return out


# ------------------------------------------------------------------ the table
def _rows(samples: list[Sample]) -> list[dict]:
    """Test rows, one group per (run_id, category, level), one row per statistic."""
    groups: dict[tuple, dict[str, list[Sample]]] = defaultdict(lambda: {"baseline": [], "speculative": []})
    for s in samples:
        groups[s.run_id, s.category, s.level][s.arm].append(s)
    out = []
    for (run_id, category, level), arms in sorted(groups.items()):
        out.extend(_group_rows(run_id, category, level, arms))
    return out


def _group_rows(run_id: str, category: str, level: int, arms: dict[str, list[Sample]]) -> list[dict]:
    ok = {arm: {(s.prompt_id, s.sample_index) for s in rows if _usable(s)} for arm, rows in arms.items()}
    both = ok["baseline"] & ok["speculative"]
    used = {
        arm: [s for s in rows if _usable(s) and (s.prompt_id, s.sample_index) in both] for arm, rows in arms.items()
    }
    rescored = {(s.prompt_id, s.sample_index) for s in used["baseline"] if s.rescored_logprob_sum is not None}
    rescored &= {(s.prompt_id, s.sample_index) for s in used["speculative"] if s.rescored_logprob_sum is not None}
    distinct = distinctness({arm: [(s.prompt_id, s.token_ids) for s in rows] for arm, rows in used.items()})
    base = {
        "run_id": run_id,
        "category": category,
        "level": level,
        "method": METHOD,
        "alpha": ALPHA,
        "failed_baseline": sum(not s.success for s in arms["baseline"]),
        "failed_speculative": sum(not s.success for s in arms["speculative"]),
        **{f"{k}_{arm}": v for arm, figures in distinct.per_arm.items() for k, v in figures.items()},
        **{f"{k}_{arm}": v for arm, rows in arms.items() for k, v in _instrument_figures(rows).items()},
    }
    out = []
    for statistic in STATISTICS:
        pairs = rescored if statistic == "rescored_logprob" else both
        group = {arm: [s for s in rows if (s.prompt_id, s.sample_index) in pairs] for arm, rows in used.items()}
        row = {
            **base,
            "statistic": statistic,
            "instrument": _instrument(statistic, group),
            "n_baseline": len(group["baseline"]),
            "n_speculative": len(group["speculative"]),
        }
        out.append(row)
        reason = _missing(statistic, arms, used, group)
        if reason is not None:
            row["excluded_reason"] = reason
            continue
        values = {arm: [_value(statistic, s) for s in rows] for arm, rows in group.items()}
        if statistic == "natural_length":
            row["censored_baseline"] = sum(s.natural_end_position is None for s in group["baseline"])
            row["censored_speculative"] = sum(s.natural_end_position is None for s in group["speculative"])
        row["mean_baseline"] = float(np.mean(values["baseline"]))
        row["mean_speculative"] = float(np.mean(values["speculative"]))
        row.update(compare(_by_prompt(group, statistic)))
        if statistic == "sequence_logprob" and rescored:
            row["verdict"], row["excluded_reason"] = None, DIAGNOSTIC
        elif row["verdict"] is not None and distinct.not_distinct:
            row["verdict"] = NOT_DISTINCT
    return out


def _usable(s: Sample) -> bool:
    """Succeeded, with its sequence logprob (a successful check always has one)."""
    return bool(s.success) and s.sequence_logprob is not None


def _missing(statistic: str, arms: dict[str, list], used: dict[str, list], group: dict[str, list]) -> str | None:
    """Why the statistic is not tested in this group, or None."""
    for arm in ("baseline", "speculative"):
        if not arms[arm]:
            return f"no {arm} samples at this level"
    if not used["baseline"]:
        return "no prompt and sample index succeeded in both arms"
    if statistic == "natural_length" and not all(s.eos_known for a in group.values() for s in a):
        return "end-of-sequence ids unknown: the natural end was not recorded"
    if statistic == "rescored_logprob":
        if not group["baseline"]:
            reasons = sorted(
                {
                    s.not_rescored_reason or "recorded before re-scoring existed"
                    for a in used.values()
                    for s in a
                    if s.rescored_logprob_sum is None
                }
            )
            return "not re-scored: " + "; ".join(reasons[:3])
        by = sorted({s.rescored_by or "?" for a in group.values() for s in a})
        if len(by) > 1:
            return f"re-scored by more than one server (arms {', '.join(by)}): not one instrument"
    return None


def _instrument(statistic: str, group: dict[str, list[Sample]]) -> str:
    if statistic != "rescored_logprob":
        return INSTRUMENTS[statistic]
    by = sorted({s.rescored_by for a in group.values() for s in a if s.rescored_by})
    return f"arm {', '.join(by)}: teacher-forced prompt logprobs" if by else "none (not re-scored)"


def _instrument_figures(rows: list[Sample]) -> dict:
    """One arm's successful samples without a re-score, and the mean of its reported minus
    re-scored sum (None when no sample has both)."""
    gaps = [
        s.sequence_logprob - s.rescored_logprob_sum
        for s in rows
        if _usable(s) and s.sequence_logprob is not None and s.rescored_logprob_sum is not None
    ]
    return {
        "not_rescored": sum(_usable(s) and s.rescored_logprob_sum is None for s in rows),
        "reported_minus_rescored": float(np.mean(gaps)) if gaps else None,
    }


def _value(statistic: str, s: Sample) -> float:
    if statistic == "rescored_logprob":
        assert s.rescored_logprob_sum is not None  # its group keeps the re-scored pairs only
        return float(s.rescored_logprob_sum)
    if statistic == "sequence_logprob":
        assert s.sequence_logprob is not None  # its group keeps _usable samples only
        return float(s.sequence_logprob)
    return float(s.max_tokens if s.natural_end_position is None else s.natural_end_position)  # censored


def _by_prompt(group: dict[str, list[Sample]], statistic: str) -> list[tuple[list, list]]:
    """(baseline values, speculative values) per prompt, in prompt order."""
    strata: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for i, arm in enumerate(("baseline", "speculative")):
        for s in group[arm]:
            strata[s.prompt_id][i].append(_value(statistic, s))
    return [strata[p] for p in sorted(strata)]


def _test_rows(con) -> list[dict]:
    """The ``sampling_tests`` rows from the ``stg_sample_checks`` view, as dicts."""
    return _rows([Sample(*r) for r in con.execute(_SAMPLES_SQL).fetchall()])


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
