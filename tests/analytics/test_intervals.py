"""The intervals, the noise model and the label rule (analytics/intervals.py,
variance.py, labels.py) on cases whose answer is known by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pytest import approx

from specdec.analytics.intervals import compute, geometric_mean
from specdec.analytics.labels import holm_levels, judge, label_of
from specdec.analytics.variance import block_noise, chi2_quantile, satterthwaite, t_quantile, t_sf

L2, L8 = math.log(2), math.log(8)


def test_geometric_mean_of_ratios():
    # ratios 2 and 8: geometric mean 4 (the arithmetic mean would be 5)
    assert geometric_mean([L2, L8]) == approx(4.0)


def test_t_quantile_against_known_values():
    # t(0.975, df) from tables (and scipy): the factor that widens an interval built from few values
    for df, value in ((1, 12.7062), (2, 4.3027), (3, 3.1824), (4, 2.7764), (10, 2.2281), (30, 2.0423)):
        assert t_quantile(0.975, df) == approx(value, abs=1e-4)
    assert t_quantile(0.025, 4) == approx(-2.7764, abs=1e-4)
    assert t_quantile(0.975, float("inf")) == approx(1.95996, abs=1e-5)
    assert t_sf(2.0, 1) == approx(0.5 - math.atan(2.0) / math.pi)
    with pytest.raises(ValueError):
        t_quantile(1.0, 3)


def test_t_and_chi2_match_scipy_where_installed():
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 5, 7.5, 12, 40, 200):
        for p in (0.6, 0.9, 0.975, 0.995, 0.9995):
            assert t_quantile(p, df) == approx(float(stats.t.ppf(p, df)), rel=1e-7)
        for p in (0.05, 0.25, 0.5, 0.9):
            assert chi2_quantile(p, df) == approx(float(stats.chi2.ppf(p, df)), rel=1e-7)


def _balanced(repeat_shift, block):
    """Three levels x three repeats: figure = repeat_shift[r] + block[l][r]."""
    return {(lv, r): repeat_shift[r] + block[i][r] for i, lv in enumerate((1, 4, 8)) for r in range(3)}


def test_block_noise_by_hand():
    # only block noise, each level its own +-a: V = sum of squares / k1, no repeat share, df = k1 = 6
    a = 0.02
    noise = block_noise(_balanced([0, 0, 0], [[a, -a, 0], [0, a, -a], [-a, 0, a]]), repeat_bound=None)
    assert (noise.variance, noise.repeat, noise.k1) == (approx(6 * a * a / 6), 0.0, 6)
    assert noise.df == approx(6.0)
    # only a shift shared by every level of a repeat: the levels say the same thing three times,
    # V is the shift's variance and df = repeats - 1 = 2, however many levels there are
    shared = block_noise(_balanced([a, -a, 0], [[0] * 3] * 3), repeat_bound=None)
    assert (shared.variance, shared.repeat, shared.block) == (approx(2 * a * a / 2), approx(a * a), approx(0.0))
    assert shared.df == approx(2.0)
    # one level: nothing separates the two components, and with one level it does not matter
    one = block_noise({(1, 0): 0.1, (1, 1): 0.3, (1, 2): 0.2}, repeat_bound=None)
    assert (one.variance, one.df) == (approx(0.01), approx(2.0))
    # no level with two repeats: no noise estimate at all
    assert block_noise({(1, 0): 0.1, (4, 0): 0.3}) is None


def test_the_df_uses_a_pessimistic_repeat_share():
    """With a few repeats the repeat stratum's mean square is often small by
    chance; the df then uses its one-sided 75% upper bound, never more df than
    the plain estimate, and exactly the Satterthwaite df of that split."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        cells = _balanced(rng.normal(0, 0.03, 3), rng.normal(0, 0.02, (3, 3)))
        plain, bounded = block_noise(cells, repeat_bound=None), block_noise(cells)
        assert bounded.variance == plain.variance and 2.0 - 1e-9 <= bounded.df <= plain.df + 1e-9
        y = np.array([[cells[lv, r] for r in range(3)] for lv in (1, 4, 8)])
        z = y - y.mean(axis=1, keepdims=True)
        ms_r = 3 * (z.mean(axis=0) ** 2).sum() / 2
        upper = ms_r * 2 / chi2_quantile(0.25, 2)
        e_r = max(upper, plain.block + 3 * plain.repeat)  # E[MS_R] = block + L * repeat
        a1, a2 = e_r / 3, 2 * plain.block / 3
        assert bounded.df == approx((a1 + a2) ** 2 / (a1**2 / 2 + a2**2 / 4), rel=1e-6)


def test_satterthwaite_of_two_terms():
    assert satterthwaite([(1.0, 4), (1.0, 4)]) == approx(8.0)
    assert satterthwaite([(1.0, 2), (0.0, 9)]) == approx(2.0)


def test_label_of_reads_the_interval_alone():
    assert label_of(1.02, 1.3, 0.05) == ("faster", False)
    assert label_of(1.06, 1.3, 0.05) == ("faster", True)
    assert label_of(0.78, 0.93, 0.05) == ("slower", True)  # the chat case of issue 19: never 'within noise'
    assert label_of(0.84, 0.99, 0.05) == ("slower", False)
    assert label_of(0.96, 1.04, 0.05) == ("equivalent", None)
    assert label_of(0.84, 1.01, 0.05) == ("inconclusive", None)
    assert label_of(0.9, 1.04, 0.2) == ("equivalent", None)  # a wider margin


def test_holm_levels_reproduce_the_step_down_procedure():
    # m = 4: p sorted 0.001 (<= 0.05/4), 0.014 (<= 0.05/3), 0.03 (> 0.05/2: stop), 0.04
    levels = holm_levels({"a": 0.03, "b": 0.001, "c": 0.04, "d": 0.014})
    assert levels == {
        "b": approx(1 - 0.05 / 4),
        "d": approx(1 - 0.05 / 3),
        "a": approx(1 - 0.05 / 2),
        "c": approx(1 - 0.05 / 2),
    }
    # an interval at its Holm level excludes the null exactly when Holm rejects it
    for key, p in {"a": 0.03, "b": 0.001, "c": 0.04, "d": 0.014}.items():
        assert (p < 1 - levels[key]) == (key in ("b", "d"))
    assert holm_levels({"x": 0.2}) == {"x": approx(0.95)}  # a family of one: plain 95%


def test_judge_says_what_would_resolve_an_inconclusive_row():
    # se 0.05 over 2 repeats (block sd 0.0707), df 4: at 95% the half-width is 2.776 x 0.05 = 0.139
    j = judge(0.0, 0.05, 4.0, 0.95, 0.05, 2)
    assert j.label == "inconclusive" and j.detectable_effect == approx(math.expm1(t_quantile(0.975, 4) * 0.05))
    # the fewest repeats n whose half-width t(0.975, 4 (n - 1)) x 0.0707 / sqrt(n) <= ln(1.05) / 2
    sd = 0.05 * math.sqrt(2)
    n = j.repeats_needed
    assert t_quantile(0.975, 4 * (n - 1)) * sd / math.sqrt(n) <= math.log(1.05) / 2
    assert t_quantile(0.975, 4 * (n - 2)) * sd / math.sqrt(n - 1) > math.log(1.05) / 2
    assert judge(0.0, 0.001, 4.0, 0.95, 0.05, 2).label == "equivalent"
    assert judge(0.0, 0.5, 4.0, 0.95, 0.05, 2).repeats_needed == 101  # more than 100


def test_compute_makes_every_interval_kind_and_is_reproducible():
    # (comparison, category, level, prompt, repeat, log ratio)
    pairs = [("ab", "code", 1, p, r, v) for p, vs in (("a", [0.1, 0.3]), ("b", [0.5, 0.2])) for r, v in enumerate(vs)]
    other = [
        ("ab", "chat", 1, "c", 0, 0.9),
        ("ab", "chat", 1, "c", 1, -0.4),
        ("ab", "chat", 2, "c", 0, 0.1),
        ("ab", "chat", 2, "c", 1, 0.2),
        ("aa", "code", 1, "a", 1, 0.05),
        ("aa", "code", 1, "b", 1, -0.02),
    ]
    blocks = [("ab", 1, 0, 0.7), ("ab", 1, 1, 0.8), ("aa", 1, 1, 0.01)]
    full = compute(pairs + other, blocks)
    assert full == compute(pairs + other, blocks)
    kinds = {(r[0], r[1], r[4]) for r in full}
    assert all(r[3] is None for r in full)  # no segment rows without segments
    assert kinds == {
        ("ab", "code", "measurement"),
        ("ab", "code", "family"),
        ("ab", "code", "prompts"),
        ("ab", "chat", "measurement"),
        ("ab", "chat", "family"),
        ("ab", "chat", "fit"),  # the calibration check: chat has two levels (analytics/fit.py)
        ("ab", "(system)", "measurement"),
        ("ab", "(system)", "family"),
    }  # 'aa' pairs and blocks make no row: the A/A figures measure drift, which the pairs cancel
    fit = {r[2]: r for r in full if r[4] == "fit"}
    assert set(fit) == {1, 2} and all(
        r[5] is None and r[10] == 2 and r[11] in ("fits", "noisier") for r in fit.values()
    )
    assert fit[1][17] == approx(abs(0.9 + 0.4) / abs(0.2 - 0.1))  # chat's SD ratio, level 1 against level 2
    family = [r for r in full if r[4] == "family"]
    assert {r[10] for r in family} == {4} and all(
        r[11] in ("faster", "slower", "equivalent", "inconclusive") for r in family
    )
    # code: block figures 0.3 and 0.25 at one level: V = 2 x 0.025^2 / 1, df 1 (one level, two repeats)
    code = next(r for r in full if r[:2] == ("ab", "code") and r[4] == "measurement")
    half = t_quantile(0.975, 1) * math.sqrt(2 * 0.025**2 / 2)
    assert (code[5], code[6], code[8]) == (approx(math.exp(0.275 - half)), approx(math.exp(0.275 + half)), approx(1))


def test_a_shift_shared_by_every_level_is_not_counted_as_independent():
    """Every level of a repeat moves together (one server process per
    repeat): the df is repeats - 1, not levels x (repeats - 1), so three levels
    that agree do not make a narrow interval."""
    shift = [0.04, -0.04, 0.0]
    pairs = [
        ("ab", "code", lv, f"p{p}", r, math.log(1.1) + shift[r] + 0.001 * p)
        for lv in (1, 4, 8)
        for r in range(3)
        for p in range(4)
    ]
    rows = {(r[2], r[4]): r for r in compute(pairs, []) if r[1] == "code"}
    assert rows[1, "measurement"][8] == approx(2.0, abs=0.01)
    low, high = rows[1, "measurement"][5:7]
    assert low < 1.0 < high  # 1.1x with a +-4% process shift over 3 repeats: not enough to tell


def test_failed_level_figures_and_segments_share_the_model():
    """Segments get their own series (same model), with their own family."""
    a = 0.01
    pairs = [("ab", "code", 1, p, r, math.log(2) + (a if r else -a)) for p in ("x", "y") for r in (0, 1)]
    segments = [("code", 1, "before_natural_end", p, r, math.log(3)) for p in ("x", "y") for r in (0, 1)]
    rows = {(r[1], r[3], r[4]): r for r in compute(pairs, [], segments)}
    h = t_quantile(0.975, 1) * a
    assert rows["code", None, "measurement"][5:7] == (approx(2 * math.exp(-h)), approx(2 * math.exp(h)))
    # the 'before' segment is ln 3 in both repeats: no noise of its own, a zero-width interval
    assert rows["code", "before_natural_end", "family"][5:7] == (approx(3.0), approx(3.0))
    assert rows["code", "before_natural_end", "family"][11] == "faster"


def test_a_bound_is_printed_on_its_side_of_one():
    """A 'slower' interval whose upper bound is 0.998 must not read '0.95-1.00'."""
    from specdec.analytics.labels import bound_text, bounds_text

    assert bounds_text(0.9512, 0.998) == "0.95-0.998"
    assert bound_text(1.0004) == "1.0004" and bound_text(0.99999) == "1.0000"
    assert bound_text(1.0) == "1.00" and bound_text(2.4049) == "2.40" and bound_text(1.006) == "1.01"
