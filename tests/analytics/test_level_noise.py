"""The per-level noise model of the intervals (issue 41, item 2): ``variance.level_noise``
(the arm order as a fixed effect, a variance of its own for a level set apart),
``variance.slow_blocks`` and the equivalence rule of ``labels.judge``. Small hand-checkable
series; the rates are in test_calibration.py."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from specdec.analytics import intervals
from specdec.analytics.calibration import MEASURED, Design, simulate
from specdec.analytics.labels import judge
from specdec.analytics.variance import block_noise, level_noise, slow_blocks

LEVELS = (1, 4, 8)


def _series(seed: int, levels=LEVELS, repeats: int = 5, sd: float = 0.05, shared: float = 0.03) -> dict:
    rng = np.random.default_rng(seed)
    a = rng.normal(0.0, shared, repeats)
    return {(lv, r): 0.1 * i + a[r] + rng.normal(0.0, sd) for i, lv in enumerate(levels) for r in range(repeats)}


def _order(levels=LEVELS, repeats: int = 5) -> dict:
    """The replay's repeat-major order: +1/2 where the speculative arm ran second."""
    return {(lv, r): 0.5 if (r + i) % 2 == 0 else -0.5 for i, lv in enumerate(levels) for r in range(repeats)}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_without_order_and_pooled_it_is_block_noise(seed):
    figures = _series(seed)
    old = block_noise(figures)
    for lv, found in level_noise(figures).items():
        assert found.se == pytest.approx(math.sqrt(old.variance / 5), rel=1e-9)
        assert found.df == pytest.approx(old.df, rel=1e-9)
        assert found.centre == pytest.approx(np.mean([figures[lv, r] for r in range(5)]))
        assert found.order is None and not found.own


def test_the_order_effect_is_fitted_and_taken_out_of_the_centre():
    figures = _series(4, sd=0.002, shared=0.0)
    order = _order()
    planted = {k: y - 0.04 * order[k] for k, y in figures.items()}  # speculative second: ratio 4% lower
    plain = level_noise(planted)
    fitted = level_noise(planted, order)
    for lv in LEVELS:
        truth = np.mean([figures[lv, r] for r in range(5)])
        assert fitted[lv].order == pytest.approx(-0.04, abs=0.005)
        assert abs(fitted[lv].centre - truth) < 0.002  # a level's 3:2 split no longer moves its centre
        assert abs(plain[lv].centre - truth) == pytest.approx(0.004, abs=0.002)  # 0.04 x (3 - 2) / 5 / 2
        assert fitted[lv].se < plain[lv].se / 3  # the order is no longer counted as noise


def test_a_level_of_its_own_gets_its_own_spread():
    figures = _series(5, shared=0.0)
    noisy = {k: (3 * (y - 0.1) + 0.1 if k[0] == 4 else y) for k, y in figures.items()}
    pooled = level_noise(noisy)
    own = level_noise(noisy, own_levels=frozenset({4}))
    assert own[4].own and not own[1].own
    spread = np.std([noisy[4, r] for r in range(5)], ddof=1) / math.sqrt(5)
    assert own[4].se == pytest.approx(spread, rel=1e-6)  # its own residuals alone
    assert own[4].se > pooled[4].se and own[1].se < pooled[1].se
    assert 3.5 < own[4].df <= 4.0 + 1e-9  # about R - 1
    assert own[1].df > own[4].df


def test_too_few_figures():
    assert level_noise({(1, 0): 0.1}) == {}
    assert set(level_noise({(1, 0): 0.1, (1, 1): 0.2, (4, 0): 0.3})) == {1}


def test_slow_blocks_finds_a_planted_slow_block_and_nothing_in_a_clean_series():
    clean = _series(6)
    assert slow_blocks(clean) == set()
    slow = dict(clean)
    slow[4, 2] += math.log(2.5)  # the baseline's block ran 2.5x slow
    assert slow_blocks(slow) == {(4, 2)}
    two = dict(slow)
    two[4, 0] += math.log(2.0)
    assert slow_blocks(two) == {(4, 2), (4, 0)}  # one does not hide the other
    three = dict(two)
    three[4, 4] += math.log(3.0)
    assert len(slow_blocks(three) & {(4, 0), (4, 2), (4, 4)}) <= 2  # a level keeps 3 figures


def test_a_noisier_level_is_not_taken_for_slow_blocks():
    figures = _series(7, shared=0.0)
    noisy = {k: (3 * (y - 0.1) + 0.1 if k[0] == 4 else y) for k, y in figures.items()}
    assert slow_blocks(noisy) == set()


def test_equivalent_reads_the_90_interval_and_faster_the_family_one():
    # se 0.01 at df 20: the 90% interval is +-1.72%, inside a 5% margin; Holm's 99.6% one is +-3.2%
    j = judge(0.01, 0.01, 20, 0.996, 0.05, 5)
    assert j.label == "equivalent"
    assert j.ci_high > 1.0 and j.ci_low < 1.0  # the family-wise interval holds 1
    assert j.tost_low == pytest.approx(math.exp(0.01 - 1.7247 * 0.01), rel=1e-4)
    assert j.tost_high <= 1.05
    # the same centre, 2.5x the se: the 90% interval reaches past 1.05 (0.01 + 1.7247 x 0.025 > ln 1.05)
    assert judge(0.01, 0.025, 20, 0.996, 0.05, 5).label == "inconclusive"
    # inside the margin but the family-wise interval clears 1: faster, never equivalent
    faster = judge(0.03, 0.004, 20, 0.996, 0.05, 5)
    assert faster.label == "faster" and faster.clears_margin is False


def _rows(pairs, blocks, order, **kw):
    out = {}
    for row in intervals.compute(pairs, blocks, order=order, **kw):
        out[row[4], row[1], row[2]] = row
    return out


def _width(row) -> float:
    return math.log(row[6] / row[5])


def test_a_slow_block_stays_at_its_level_and_the_check_reads_the_figures_without_it():
    """A 2.5x slow speculative block at c4, repeat 2 (every category and the system figure): c4
    gets a variance of its own and keeps the block (its interval widens, it does not narrow); c1
    and c8 stay far narrower than one pooled variance would make them; the calibration check reads
    the figures without the slow block, so c4 'fits'."""
    design = Design()
    pairs, blocks, *_ = simulate(design, replace(MEASURED, prompt={}), 1.0, np.random.default_rng(8))
    slow = math.log(2.5)
    pairs = [(*p[:5], p[5] - slow) if p[0] == "ab" and p[2] == 4 and p[4] == 2 else p for p in pairs]
    blocks = [(*b[:3], b[3] - slow) if b[0] == "ab" and b[1] == 4 and b[2] == 2 else b for b in blocks]
    order = design.order()
    ours = _rows(pairs, blocks, order)
    pooled = _rows(pairs, blocks, order, noise_model=lambda cells, _order, _own: level_noise(cells))
    for cat in ("chat", "code", "structured", "(system)"):
        assert "of its own" in ours["measurement", cat, 4][16]
        assert _width(ours["measurement", cat, 4]) > 0.5  # wide: the block is kept
        for lv in (1, 8):
            assert _width(ours["measurement", cat, lv]) < 0.7 * _width(pooled["measurement", cat, lv])
    assert ours["fit", "code", 4][11] == "fits"
