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


def test_compute_is_reproducible_and_makes_every_interval_kind():
    # (comparison, category, concurrency, prompt, repeat, log ratio)
    pairs = [("ab", "code", 1, p, r, v) for p, vs in (("a", [0.1, 0.3]), ("b", [0.5, 0.2]))
             for r, v in enumerate(vs)]
    other = [("ab", "chat", 1, "c", 0, 0.9), ("ab", "chat", 1, "c", 1, -0.4), ("aa", "code", 1, "a", 1, 0.05),
             ("aa", "code", 1, "b", 1, -0.02)]
    blocks = [("ab", 1, 0, 0.7), ("ab", 1, 1, 0.8), ("aa", 1, 1, 0.01)]
    full = compute(pairs + other, blocks)
    assert full == compute(pairs + other, blocks)  # a fixed seed: the same intervals every time
    kinds = {(r[0], r[1], r[3]) for r in full}
    assert kinds == {("ab", "code", "measurement"), ("ab", "code", "prompts"), ("ab", "chat", "measurement"),
                     ("aa", "code", "measurement"), ("ab", "(system)", "measurement")}
    # chat has one prompt (no prompts interval); (system) A/A has one ratio (no interval)
    assert all(r[6:8] == (2000, 0) for r in full)


def test_noise_shared_by_a_block_widens_the_measurement_interval():
    """An A/A-like group: within each repeat every prompt moves together (+4%
    in repeat 0, -4% in repeat 1 ... and the next group the other way round).
    Requests alone look precise; the blocks say the truth: 1 is inside."""
    import math

    up, down = math.log(1.04), math.log(0.96)
    pairs = []
    for category, (r0, r1) in (("code", (up, up * 0.5)), ("chat", (down, up)), ("structured", (up, down))):
        for p in range(8):
            jitter = 0.002 * (p % 3 - 1)
            pairs += [("ab", category, 1, f"{category}{p}", 0, r0 + jitter),
                      ("ab", category, 1, f"{category}{p}", 1, r1 + jitter)]
    rows = {(r[1], r[3]): (r[4], r[5]) for r in compute(pairs, [])}
    low, high = rows["code", "measurement"]
    assert low < 1.0 < high  # code moved up in both repeats, but by no more than blocks do
    request_level = measurement_interval([[v for c, _, _, p, _, v in pairs if p == f"code{i}"] for i in range(8)])
    assert request_level[0] > 1.0  # the request-level bootstrap would have called it faster