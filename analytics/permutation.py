"""The permutation test stratified by prompt, for the sampling check
(``sampling_check.py``): do two arms' samples of a statistic come from the
same distribution, prompt by prompt?

- **strata**: one per prompt; in each, the baseline's values x_p (n_p of them)
  and the speculative arm's y_p (m_p). A stratum with no value in one arm is
  left out (it says nothing about the difference).
- **statistic**: T = (1/P) sum_p (mean(y_p) - mean(x_p)), the mean over the P
  prompts of the within-prompt difference of means, in the statistic's own
  units (speculative minus baseline). Prompts never mix: a prompt whose
  samples are all less likely than another's shifts neither arm.
- **null hypothesis**: within each prompt the arm labels are exchangeable (the
  two arms sample from one distribution per prompt). Its reference
  distribution: T recomputed under every relabelling that keeps each prompt's
  n_p and m_p (labels permuted within prompts, never across).
- **p-value**, two-sided, the share of relabellings with |T*| >= |T|
  (ties within 1e-9 (1 + |T|) count as reaching it): *exact* when the
  relabellings number at most ``PERMUTATIONS`` (prod_p C(n_p + m_p, n_p); all
  enumerated, the observed one among them); otherwise ``PERMUTATIONS`` random
  relabellings (numpy ``default_rng(SEED)``, so a rerun gives the same p) and
  p = (1 + #{|T*| >= |T|}) / (1 + PERMUTATIONS), which never reads 0.
- **what it sees**: a shift of the per-prompt mean. A change that keeps every
  prompt's mean (a wider spread alone) is not what T measures.
- **smallest detectable shift**: (z_(1-alpha/2) + z_0.80) sqrt(sum_p s_p^2
  (1/n_p + 1/m_p)) / P, s_p^2 the prompt's pooled variance (normal
  approximation): the shift of T the test detects with 80% power.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations
from statistics import NormalDist

import numpy as np

__all__ = [
    "PERMUTATIONS",
    "SEED",
    "PermutationResult",
    "relabellings",
    "stratified_min_detectable_shift",
    "stratified_permutation_test",
]

#: Random relabellings when there are more than this many; also the most enumerated exactly.
PERMUTATIONS = 9999
#: Seed of the random relabellings.
SEED = 0
_TIE = 1e-9


@dataclass(frozen=True)
class PermutationResult:
    statistic: float  # T, speculative minus baseline
    p_value: float
    permutations: int  # relabellings the p-value counts (all of them when exact)
    exact: bool
    min_p_value: float  # the smallest p-value these strata can give
    prompts: int  # strata used


def _strata(strata) -> list[tuple[np.ndarray, np.ndarray]]:
    out = [(np.asarray(x, dtype=float), np.asarray(y, dtype=float)) for x, y in strata]
    return [(x, y) for x, y in out if len(x) and len(y)]


def relabellings(strata) -> int:
    """prod_p C(n_p + m_p, n_p): the relabellings that keep every prompt's counts."""
    return math.prod(math.comb(len(x) + len(y), len(x)) for x, y in _strata(strata))


def _observed(strata: list[tuple[np.ndarray, np.ndarray]]) -> float:
    return float(np.mean([y.mean() - x.mean() for x, y in strata]))


def _exact(strata: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """T under every relabelling (the Cartesian product of each prompt's)."""
    total = np.zeros(1)
    for x, y in strata:
        v, n = np.concatenate([x, y]), len(x)
        s = v.sum()
        picks = np.array(list(combinations(range(len(v)), n)))
        first = v[picks].sum(axis=1)
        diffs = (s - first) / len(y) - first / n
        total = (total[:, None] + diffs[None, :]).ravel()
    return total / len(strata)


def _sampled(strata: list[tuple[np.ndarray, np.ndarray]], permutations: int, seed: int) -> np.ndarray:
    """T under ``permutations`` random relabellings, drawn prompt by prompt."""
    rng = np.random.default_rng(seed)
    total = np.zeros(permutations)
    for x, y in strata:
        v, n = np.concatenate([x, y]), len(x)
        order = rng.permuted(np.tile(np.arange(len(v)), (permutations, 1)), axis=1)
        values = v[order]
        total += values[:, n:].mean(axis=1) - values[:, :n].mean(axis=1)
    return total / len(strata)


def stratified_permutation_test(strata, permutations: int = PERMUTATIONS, seed: int = SEED) -> PermutationResult:
    """The test of the module docstring on ``strata``: (x_p, y_p) pairs of
    baseline and speculative values, one per prompt."""
    used = _strata(strata)
    if not used:
        raise ValueError("no prompt has values in both arms")
    t = _observed(used)
    reach = abs(t) - _TIE * (1 + abs(t))
    count = relabellings(used)
    if count <= permutations:
        null = np.abs(_exact(used))
        top = null.max()
        return PermutationResult(
            t, float(np.mean(null >= reach)), count, True, float(np.mean(null >= top - _TIE * (1 + top))), len(used)
        )
    null = np.abs(_sampled(used, permutations, seed))
    return PermutationResult(
        t,
        float((1 + np.sum(null >= reach)) / (1 + permutations)),
        permutations,
        False,
        1 / (1 + permutations),
        len(used),
    )


def stratified_min_detectable_shift(strata, alpha: float, power: float = 0.80) -> float | None:
    """The module docstring's smallest detectable shift of T; None when a
    prompt has fewer than 3 values (no pooled variance)."""
    used = _strata(strata)
    if not used or any(len(x) + len(y) < 3 for x, y in used):
        return None
    var = 0.0
    for x, y in used:
        ss = ((x - x.mean()) ** 2).sum() + ((y - y.mean()) ** 2).sum()
        var += ss / (len(x) + len(y) - 2) * (1 / len(x) + 1 / len(y))
    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    return z * math.sqrt(var) / len(used)
