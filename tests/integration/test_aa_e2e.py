"""A/A on the embedded engine: both arms without speculation (--spec-config
null), served by the same server, three repeats, each on a freshly started
server (the default --restart-servers repeat), the prefix cache emptied before
every block.

Two arms that do not differ must never be labelled faster or slower (the
labels' family-wise error rate is 5%: one run in 20 may show one such label by
chance, so the test allows none at two levels together only with intervals
that say so), and a block must not be faster because the same prompts ran
before it. History: with A/B block residuals alone as the noise, a clean-clone
CI run labelled code at level 1 "slower", 0.967 [0.946-0.985]. The intervals
now come from a variance-components model per category with Satterthwaite's
degrees of freedom and Holm's levels (analytics/intervals.py, variance.py,
labels.py), whose coverage is checked on synthetic runs in
tests/analytics/test_calibration.py."""

import duckdb
import pytest

from specdec.analytics.build import build
from specdec.replay.config import ReplayConfig
from specdec.replay.experiment import run_replay
from specdec.replay.traffic.io import BUNDLED

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def con(tmp_path_factory, model_dir):
    # its own servers: what is tested is the A/A schedule, a fresh server before every repeat
    cfg = ReplayConfig(
        traffic=BUNDLED,
        runs_dir=tmp_path_factory.mktemp("runs"),
        run_id="aa",
        speculative_config=None,
        levels=[1, 2],
        requests_per_level=12,
        max_tokens=32,
        repeats=3,
        lossless_pass=False,
        warmup_requests=1,
        model=model_dir,
        progress=False,
    )
    run_dir = run_replay(cfg)
    return duckdb.connect(str(build(run_dir)), read_only=True)


def test_identical_arms_are_never_labelled_faster_or_slower(con):
    rows = con.execute(
        "select category, concurrency, speedup, pointwise_ci_low, pointwise_ci_high, label, pairs "
        "from speedup order by all"
    ).fetchall()
    assert {(r[0], r[1]) for r in rows} >= {("(system)", 1), ("(system)", 2), ("code", 1), ("code", 2)}
    misses = []
    for category, level, speedup, low, high, label, pairs in rows:
        assert pairs > 0 and speedup is not None, (category, level)
        assert 0.8 < speedup < 1.25, (category, level, speedup)  # nothing like a real gain
        assert label in ("equivalent", "inconclusive"), (category, level, speedup, low, high, label)
        assert low is not None, (category, level)
        if not low <= 1.0 <= high:
            misses.append((category, level, low, high))
    # A 95% interval misses a true 1 in about 1 run in 20 by definition, and the
    # groups of one level share their blocks, so they miss together. The test
    # asserts what a correct 95% interval can promise every run: at most one of
    # the two levels may have intervals that miss 1 (about 1 run in 400 would
    # have both miss if the levels were independent), while no label above may
    # claim an effect (faster or slower: family-wise 5%).
    assert len({level for _, level, _, _ in misses}) <= 1, misses


def test_every_block_starts_with_an_empty_prefix_cache(con):
    # the reset worked before every block ...
    assert (
        con.execute(
            "select bool_and(prefix_cache_reset) from stg_engine_counters where position = 'before'"
        ).fetchone()[0]
        is True
    )
    # ... so at one request at a time, the second repeat of the same prompts finds
    # no more in the cache than the first (only the shared chat template, within a block)
    hits = dict(
        con.execute("""
        select a.arm || ' r' || a.repeat, a.prefix_cache_hits - b.prefix_cache_hits
        from stg_engine_counters a join stg_engine_counters b
          on a.arm = b.arm and a.concurrency = b.concurrency and a.repeat = b.repeat
        where a.position = 'after' and b.position = 'before' and a.concurrency = 1""").fetchall()
    )
    assert hits["baseline r1"] == hits["baseline r0"] and hits["speculative r1"] == hits["speculative r0"]


def test_ttft_of_a_level_does_not_depend_on_the_prompts_having_run_before(con):
    # per arm at level 1: the median TTFT of repeat 1 (same prompts already sent
    # in repeat 0, cache emptied in between) is within +-40% of repeat 0's
    got = con.execute("""
        select arm, median(ttft_ms) filter (where repeat = 1) / median(ttft_ms) filter (where repeat = 0)
        from stg_requests where success and concurrency = 1 group by arm""").fetchall()
    assert len(got) == 2
    for arm, ratio in got:
        assert 0.6 < ratio < 1.4, (arm, ratio)
