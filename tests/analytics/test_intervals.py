"""The bootstrap of analytics/intervals.py on cases whose answer is known by hand."""

from __future__ import annotations

import math

from pytest import approx

from specdec.analytics.intervals import cluster_interval, compute, geometric_mean, measurement_interval

L2, L8 = math.log(2), math.log(8)


def test_geometric_mean_of_ratios():
    # ratios 2 and 8: geometric mean 4 (the arithmetic mean would be 5)
    assert geometric_mean([L2, L8]) == approx(4.0)


def test_identical_ratios_give_a_zero_width_interval_at_that_ratio():
    clusters = [[math.log(2.5)] * 3, [math.log(2.5)] * 2]
    for ci in (measurement_interval(clusters), cluster_interval(clusters)):
        assert ci == (approx(2.5), approx(2.5))


def test_prompts_interval_of_a_symmetric_case():
    """Two prompts with ratios 1/2 and 2: a resample draws both prompts from
    {1/2, 2}; (1/2, 1/2) and (2, 2) each come up a quarter of the time, far
    more than the 2.5% tails, so the interval is exactly [1/2, 2]."""
    assert cluster_interval([[-L2], [L2]]) == (approx(0.5), approx(2.0))


def test_measurement_interval_of_one_prompt_with_two_pairs():
    """Pairs with log ratios 0 and 2a (mean a): residuals +-a, scaled by
    sqrt(2/1); a resample of two is a + sqrt(2) a x {+1 (1/4), 0 (1/2), -1 (1/4)},
    so the 95% interval is exp(a -+ sqrt(2) a)."""
    a = math.log(1.5)
    lo, hi = measurement_interval([[0.0, 2 * a]])
    assert lo == approx(math.exp(a - math.sqrt(2) * a))
    assert hi == approx(math.exp(a + math.sqrt(2) * a))


def test_no_interval_without_something_to_resample():
    # one pair per prompt (one repeat): measurement noise cannot be estimated
    assert measurement_interval([[L2], [L8]]) is None
    # one prompt (or one repeat for '(system)'): nothing to resample between
    assert cluster_interval([[L2, L8]]) is None


def test_compute_is_reproducible_and_each_group_stands_alone():
    pairs = [("ab", "code", 1, p, v) for p, vs in (("a", [0.1, 0.3]), ("b", [0.5, 0.2])) for v in vs]
    other = [("ab", "chat", 1, "c", 0.9), ("ab", "chat", 1, "c", -0.4), ("aa", "code", 1, "a", 0.05),
             ("aa", "code", 1, "b", -0.02)]
    blocks = [("ab", 1, 0.7), ("ab", 1, 0.8), ("aa", 1, 0.01)]
    alone = compute(pairs, [])
    assert alone == compute(pairs, [])  # a fixed seed: the same intervals every time
    full = compute(pairs + other, blocks)
    assert [r for r in full if r[1] == "code" and r[0] == "ab"] == alone  # other groups change nothing
    kinds = {(r[0], r[1], r[3]) for r in full}
    assert kinds == {("ab", "code", "measurement"), ("ab", "code", "prompts"), ("ab", "chat", "measurement"),
                     ("aa", "code", "measurement"), ("ab", "(system)", "measurement")}
    # chat has one prompt (no prompts interval); (system) A/A has one ratio (no interval)
    assert all(r[6:8] == (2000, 0) for r in full)
