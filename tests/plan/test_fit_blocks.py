"""The verify fit's blocks that disagree with the others (``fit.outlying_blocks``): a block of
steps measured slower than the rest (one arm at one level, as a disturbed host makes it) is
reported with its residual and the fit's RMSE without it; blocks that agree, or too few blocks,
report nothing; the planner names the block in its notes and keeps its fit as it was."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.analytics.plan.fit import fit_grouped, outlying_blocks
from specdec.analytics.plan.page import render
from specdec.analytics.plan.run import PlanConfig, make_plan
from tests.support import plan_run
from tests.support.synthetic_run import write_run

NAMES = ("v0", "v1", "v2")


def _groups(slow: dict[str, float], noise: float = 0.0):
    """Six blocks (arm x level), groups of 10 steps at B = level, D in 0..3 per block, time
    10 + 2 B + 0.5 D (times ``slow[block]``), each group's steps spread by +-noise ms."""
    x, n, total, sumsq, blocks = [], [], [], [], []
    for arm in ("baseline", "speculative"):
        for level in (1, 2, 4):
            for d in range(4):
                t = (10 + 2 * level + 0.5 * d) * slow.get(f"{arm}{level}", 1.0)
                x.append([1.0, level, d])
                n.append(10)
                total.append(10 * t)
                sumsq.append(10 * (t * t + noise * noise))
                blocks.append((arm, level))
    return np.array(x), np.array(n, float), np.array(total), np.array(sumsq), blocks


def test_a_slow_block_is_reported_with_the_fit_without_it():
    x, n, total, sumsq, blocks = _groups({"speculative4": 1.3})
    (out,) = outlying_blocks(x, NAMES, n, total, sumsq, blocks)
    assert out.block == ("speculative", 4)
    assert out.relative_residual > 0.10
    without = fit_grouped(x[:-4], NAMES, n[:-4], total[:-4], sumsq[:-4])
    assert out.rmse_ms_without == pytest.approx(without.rmse_ms) and without.rmse_ms == pytest.approx(0, abs=1e-9)
    plain = fit_grouped(x, NAMES, n, total, sumsq).rmse_ms
    assert out.rmse_ms == pytest.approx(plain) and plain > 0.5


def test_blocks_that_agree_or_are_few_report_nothing():
    x, n, total, sumsq, blocks = _groups({}, noise=3.0)
    assert outlying_blocks(x, NAMES, n, total, sumsq, blocks) == []  # exact means, spread within
    # every block a little off (+-4%), none apart from the rest
    x, n, total, sumsq, blocks = _groups({"baseline1": 1.04, "speculative2": 0.96, "baseline4": 1.03})
    assert outlying_blocks(x, NAMES, n, total, sumsq, blocks) == []
    # a slow block among four: too few blocks to tell which is off
    x, n, total, sumsq, blocks = _groups({"speculative4": 1.3})
    four = [i for i, b in enumerate(blocks) if b[1] != 1]
    assert outlying_blocks(x[four], NAMES, n[four], total[four], sumsq[four], [blocks[i] for i in four]) == []


def test_the_plan_names_the_slow_block_and_keeps_its_fit(tmp_path):
    arms = plan_run.SWEEP
    rounds = plan_run.make_rounds(arms)
    slow_token = {r.process_token for r in rounds if r.pid == list(arms).index("k4") + 1}
    # the k4 arm's steps at level 2 run 40% slower (its server shared the cores with something)
    slowed = [
        r.model_copy(update={"verify_ms": r.verify_ms * 1.4})
        if r.process_token in slow_token and r.batch_size == 2 and r.phase == "decode"
        else r
        for r in rounds
    ]
    plain, slow = (_sweep_run(tmp_path / name, arms, r) for name, r in (("plain", rounds), ("slow", slowed)))
    config = PlanConfig(replicates=20)
    assert not [n for n in make_plan(plain, config)["notes"] if "verify fit of every step" in n]
    plan = make_plan(slow, config)
    (note,) = [n for n in plan["notes"] if "verify fit of every step" in n]
    assert "speculative arm's steps at c2 (k = 4)" in note and plan["warnings"] == [note]
    page = render(plan)
    assert page.index("c2 (k = 4) took") < page.index("Why: per category and load band")  # shown first
    assert plan["model"]["verify_fit"]["rmse_ms"] > 1  # the fit itself still reads every step


def _sweep_run(path, arms, rounds):
    """plan_run's synthetic run with the rounds given (write_plan_run makes its own)."""
    path.mkdir()
    return write_run(
        path,
        plan_run.make_counters(arms),
        requests=plan_run.make_requests(arms, lambda *a: 1000.0),
        rounds=rounds,
        manifest=plan_run._manifest(arms),
    )
