"""Prefix-cache hits per arm in the multi-turn cells (specdec/experiments/compat/prefix.py), on fake servers: a
speculative arm that drops the last block's hits degrades the cells that reuse a prefix; both arms'
rates are in every multi-turn cell's detail and columns, and in compat.parquet."""

from __future__ import annotations

import asyncio

import pyarrow as pa
import pyarrow.parquet as pq

from specdec.experiments.compat.cells import ArmLog
from specdec.experiments.compat.prefix import judge
from specdec.experiments.compat.probing import Pair, probe_pair
from specdec.http.urls import ClientSettings, parse_endpoint
from tests.support.compat_server import CompatFake, fake_pair

SESSIONS = {"session_prefix_cache_on", "session_prefix_cache_off"}


def run_pair(baseline: CompatFake, speculative: CompatFake, repeats: int = 2) -> dict:
    async def go():
        async with fake_pair(baseline, speculative) as (b, s):
            pair = Pair("fake", "0", "ngram", parse_endpoint(b), parse_endpoint(s), settle_s=0.0)
            settings = ClientSettings(connect_timeout_s=5, request_timeout_s=10)
            return await probe_pair(pair, settings, "t1", echo=lambda _: None, only=SESSIONS, repeats=repeats)

    cells, _sent = asyncio.run(go())
    return {c.probe: c for c in cells}


def test_a_speculative_arm_that_drops_the_last_blocks_hits_degrades_the_reusing_turns(tmp_path):
    cells = run_pair(CompatFake(False), CompatFake(True, drop_hits=2))
    for t in (2, 3):
        c = cells[f"session_prefix_cache_on.turn{t}"]
        assert c.outcome == "degrades", c.detail
        assert (c.baseline_prefix_cache_hit_rate, c.speculative_prefix_cache_hit_rate) == (1.0, 0.8)
        assert c.prefix_cache_hit_rate == 0.8  # the old column: the speculative arm's
        assert "prefix cache hit rate falls: 80.0% against the baseline's 100.0%" in c.detail
    turn1 = cells["session_prefix_cache_on.turn1"]  # nothing to reuse yet: 0 in both
    assert turn1.outcome == "works" and turn1.baseline_prefix_cache_hit_rate == 0.0
    assert "prefix cache hit rate: baseline 0.0%, speculative 0.0%" in turn1.detail
    assert all(cells[f"session_prefix_cache_off.turn{t}"].outcome == "works" for t in (1, 2, 3))
    table = pa.Table.from_pylist([c.model_dump() for c in cells.values()])
    pq.write_table(table, tmp_path / "compat.parquet")
    back = pq.read_table(tmp_path / "compat.parquet").to_pylist()
    assert all(
        r["baseline_prefix_cache_hit_rate"] is not None and r["speculative_prefix_cache_hit_rate"] is not None
        for r in back
    )


def test_equal_hits_in_both_arms_work_and_show_both_rates():
    cells = run_pair(CompatFake(False, drop_hits=2), CompatFake(True, drop_hits=2))
    for name, c in cells.items():
        assert c.outcome == "works", (name, c.detail)
        assert "prefix cache hit rate: baseline" in c.detail
        assert c.baseline_prefix_cache_hit_rate == c.speculative_prefix_cache_hit_rate


def log(*per_repeat: tuple[int, int] | None) -> ArmLog:
    out = ArmLog()
    for i, x in enumerate(per_repeat):
        diff = None if x is None else {"prefix_cache_hits": x[0], "prefix_cache_queries": x[1]}
        out.add("f1", f"r{i}", diff)
    return out


def test_a_shortfall_one_repeat_does_not_show_or_within_the_margin_is_not_called():
    assert judge(log((100, 100), (100, 100)), log((90, 100), (90, 100)), ["f1"]).why is not None
    assert judge(log((100, 100), (90, 100)), log((80, 100), (95, 100)), ["f1"]).why is None  # noise
    assert judge(log((100, 100), (100, 100)), log((99, 100), (99, 100)), ["f1"]).why is None  # 1 point
    unread = judge(log((100, 100), None), log((80, 100), (80, 100)), ["f1"])
    assert unread.why is None and unread.baseline is None and "baseline not measured" in unread.said
