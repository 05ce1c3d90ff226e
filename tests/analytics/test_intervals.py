"""The bootstrap of analytics/intervals.py on cases whose answer is known by hand."""

from __future__ import annotations

import math

from pytest import approx

from specdec.analytics.intervals import (
    block_interval, cluster_interval, compute, geometric_mean, request_level_interval, noise_pool,
)

L2, L8 = math.log(2), math.log(8)


def test_geometric_mean_of_ratios():
    # ratios 2 and 8: geometric mean 4 (the arithmetic mean would be 5)
    assert geometric_mean([L2, L8]) == approx(4.0)


def test_identical_ratios_give_a_zero_width_interval_at_that_ratio():
    clusters = [[math.log(2.5)] * 3, [math.log(2.5)] * 2]
    for ci in (request_level_interval(clusters), cluster_interval(clusters)):
        assert ci == (approx(2.5), approx(2.5))


def test_prompts_interval_of_a_symmetric_case():
    """Two prompts with ratios 1/2 and 2: a resample draws both prompts from
    {1/2, 2}; (1/2, 1/2) and (2, 2) each come up a quarter of the time, far
    more than the 2.5% tails, so the interval is exactly [1/2, 2]."""
    assert cluster_interval([[-L2], [L2]]) == (approx(0.5), approx(2.0))


def test_request_level_interval_of_one_prompt_with_two_pairs():
    """Pairs with log ratios 0 and 2a (mean a): residuals +-a, scaled by
    sqrt(2/1); a resample of two is a + sqrt(2) a x {+1 (1/4), 0 (1/2), -1 (1/4)},
    so the 95% interval is exp(a -+ sqrt(2) a)."""
    a = math.log(1.5)
    lo, hi = request_level_interval([[0.0, 2 * a]])
    assert lo == approx(math.exp(a - math.sqrt(2) * a))
    assert hi == approx(math.exp(a + math.sqrt(2) * a))


def test_no_interval_without_something_to_resample():
    # one pair per prompt (one repeat): measurement noise cannot be estimated
    assert request_level_interval([[L2], [L8]]) is None
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
    kinds = {(r[0], r[1], r[4]) for r in full}
    assert all(r[3] is None for r in full)  # no segment rows without segments
    assert kinds == {("ab", "code", "measurement"), ("ab", "code", "prompts"), ("ab", "chat", "measurement"),
                     ("aa", "code", "measurement"), ("ab", "(system)", "measurement"), ("aa", "(system)", "measurement")}
    # chat has one prompt (no prompts interval); an A/A group has an interval from one block figure
    assert all(r[7:9] == (2000, 0) for r in full)


def test_noise_shared_by_a_block_widens_the_request_level_interval():
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
    rows = {(r[1], r[4]): (r[5], r[6]) for r in compute(pairs, [])}
    low, high = rows["code", "measurement"]
    assert low < 1.0 < high  # code moved up in both repeats, but by no more than blocks do
    request_level = request_level_interval([[v for c, _, _, p, _, v in pairs if p == f"code{i}"] for i in range(8)])
    assert request_level[0] > 1.0  # the request-level bootstrap would have called it faster

def test_block_interval_by_hand():
    """Pool {+a, -a}: the mean of two draws is +a (1/4), 0 (1/2) or -a (1/4), so
    an A/B group whose two repeats both gave m is [m - a, m + a]; an A/A group
    with one block figure d draws once: [d - a, d + a]."""
    a, m, d = math.log(1.1), math.log(2.0), math.log(0.97)
    lo, hi = block_interval([m, m], [a, -a])
    assert (lo, hi) == (approx(2.0 / 1.1), approx(2.0 * 1.1))
    lo, hi = block_interval([d], [a, -a], min_blocks=1)
    assert (lo, hi) == (approx(0.97 / 1.1), approx(0.97 * 1.1))
    assert block_interval([m], [a, -a]) is None  # an A/B group needs two repeats of its own


def test_noise_pool_is_the_larger_of_two_noise_estimates():
    # A/B: residuals (m_r - mean) * sqrt(R / (R - 1)), here +-0.1 * sqrt(2), mean square 0.02
    assert noise_pool([[0.1, 0.3]], [[0.04, 0.05], [-0.02]]) == [approx(-0.1 * 2 ** 0.5), approx(0.1 * 2 ** 0.5)]
    # A/A figures as they are (not centred), each with its mirror: mean square of
    # 0.2, 0.1, -0.2 is 0.03 > 0.02
    assert noise_pool([[0.1, 0.3]], [[0.2, 0.1], [-0.2]]) == [0.2, -0.2, 0.1, -0.1, -0.2, 0.2]
    assert noise_pool([[0.5]], []) == []  # one repeat: no residual, no A/A figure


def test_a_shift_shared_by_every_repeat_is_within_the_aa_noise():
    """The clean-clone CI failure, rebuilt: an A/A run on one server, three
    repeats; every A/B block figure of every group within 0.5% of -3.3%
    (repeats that move together), while the baseline's own consecutive blocks
    moved by 3-4%. From A/B residuals alone the interval was about
    [0.96, 0.975] ("slower"); with the A/A block figures in the pool it
    contains 1."""
    shift = math.log(0.967)
    pairs, blocks = [], []
    for level in (1, 2):
        for category in ("code", "chat", "structured"):
            for p in range(4):
                for r, wobble in enumerate((0.004, -0.003, 0.0)):
                    pairs.append(("ab", category, level, f"{category}{p}", r, shift + wobble + 0.001 * p))
            for r, d in ((1, math.log(1.035)), (2, math.log(0.965))):
                pairs += [("aa", category, level, f"{category}{p}", r, d) for p in range(4)]
        blocks += [("ab", level, r, shift + w) for r, w in enumerate((0.004, -0.003, 0.0))]
        blocks += [("aa", level, 1, math.log(1.04)), ("aa", level, 2, math.log(0.96))]
    rows = {(r[0], r[1], r[2], r[4]): (r[5], r[6]) for r in compute(pairs, blocks)}
    low, high = rows["ab", "code", 1, "measurement"]
    assert low < 1.0 < high
    ab_only = block_interval([shift + 0.004, shift - 0.003, shift],
                             noise_pool([[shift + w for w in (0.004, -0.003, 0.0)]] * 8, []))
    assert ab_only[1] < 1.0  # the old pool (A/B residuals only) said "slower"


def test_segments_get_a_request_level_interval_from_the_same_pool():
    """Two repeats of code at c1 with whole-request figures ln 2 -+ a: pool
    {+-s}, s = sqrt(2) a, and the mean of two draws is -s, 0 or +s (1/4, 1/2,
    1/4), so the interval is 2 exp(-+s). The 'before' segment has the same
    figure, ln 3, in both repeats (no spread of its own), yet its interval is
    3 exp(-+s): the noise comes from the run's pool."""
    a = 0.1
    pairs = [("ab", "code", 1, p, r, math.log(2) + (a if r else -a)) for p in ("x", "y") for r in (0, 1)]
    segments = [("code", 1, "before_natural_end", p, r, math.log(3)) for p in ("x", "y") for r in (0, 1)]
    rows = {(r[1], r[3], r[4]): (r[5], r[6]) for r in compute(pairs, [], segments)}
    s = math.sqrt(2) * a
    assert rows["code", None, "measurement"] == (approx(2 * math.exp(-s)), approx(2 * math.exp(s)))
    assert rows["code", "before_natural_end", "measurement"] == (approx(3 * math.exp(-s)), approx(3 * math.exp(s)))
