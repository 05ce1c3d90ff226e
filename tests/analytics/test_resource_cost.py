"""Mart resource_cost on hand-checkable samples, and the sampler's pieces."""

from __future__ import annotations

import asyncio
import os

from pytest import approx

from specdec.replay.resources import process_tree_rss, watch_block
from specdec.schemas.arrow import table_from_records, write_parquet_atomic
from specdec.schemas.records import ResourceReading
from tests.support.synthetic_run import RUN, write_run

MIB = 1 << 20


def sample(arm, level, repeat, t, rss_mib, kv, running=2.0):
    return ResourceReading(
        run_id=RUN,
        arm=arm,
        level=level,
        repeat=repeat,
        t_ms=t,
        wall_time_ns=t,
        rss_bytes=None if rss_mib is None else int(rss_mib * MIB),
        kv_cache_usage=kv,
        requests_running=running,
    )


def test_peak_mean_and_the_ratio_to_baseline(tmp_path, query):
    write_run(tmp_path)
    rows = [
        sample("baseline", 1, 0, 0, 1000, 0.1),
        sample("baseline", 1, 1, 0, 1200, 0.3),
        sample("speculative", 1, 0, 0, 1500, 0.2),
        sample("speculative", 1, 0, 1000, 1800, 0.4, 4.0),
        sample("speculative", 2, 0, 0, None, None, None),
    ]  # an external server: nothing to read
    write_parquet_atomic(table_from_records(ResourceReading, rows), tmp_path / "resources.parquet")
    got = {(r["arm"], r["level"]): r for r in query("select * from resource_cost")}
    base, spec = got["baseline", 1], got["speculative", 1]
    assert (base["samples"], base["repeats"], base["rss_peak_mib"], base["rss_mean_mib"]) == (2, 2, 1200, 1100)
    assert (spec["rss_peak_mib"], spec["kv_cache_usage_peak"], spec["kv_cache_usage_mean"]) == (
        1800,
        approx(0.4),
        approx(0.3),
    )
    assert spec["requests_running_mean"] == approx(3.0)
    assert spec["rss_peak_vs_baseline"] == approx(1.5) and base["rss_peak_vs_baseline"] is None
    ext = got["speculative", 2]
    assert (ext["samples"], ext["rss_peak_mib"], ext["kv_cache_usage_peak"], ext["rss_peak_vs_baseline"]) == (
        1,
        None,
        None,
        None,
    )


def test_process_tree_rss_reads_this_process_and_not_a_missing_one():
    rss = process_tree_rss(os.getpid())
    assert rss is not None and rss > 1 * MIB
    assert process_tree_rss(None) is None
    assert process_tree_rss(2**22 + 12345) is None  # above Linux's pid_max default: no such process


def test_sample_block_samples_until_stopped_and_once_more():
    """No /metrics to read (an unreachable port): the gauges are None, the
    samples still come, memory is read, and stopping takes one last sample."""
    import aiohttp

    async def go():
        out, stop = [], asyncio.Event()
        async with aiohttp.ClientSession() as session:
            task = asyncio.create_task(
                watch_block(session, "http://127.0.0.1:9", None, os.getpid(), out, stop, interval_s=0.05)
            )
            while len(out) < 3:
                await asyncio.sleep(0.01)
            stop.set()
            await task
        return out

    out = asyncio.run(go())
    assert len(out) >= 4
    assert [s["t_ms"] for s in out] == sorted(s["t_ms"] for s in out)
    assert all(s["rss_bytes"] and s["kv_cache_usage"] is None and s["requests_running"] is None for s in out)


def test_a_block_shorter_than_one_sample_still_gets_its_start_and_end():
    """Stop already set when sampling starts (a block that ended at once): two samples."""
    import aiohttp

    async def go():
        out, stop = [], asyncio.Event()
        stop.set()
        async with aiohttp.ClientSession() as session:
            await watch_block(session, "http://127.0.0.1:9", None, None, out, stop, interval_s=10)
        return out

    out = asyncio.run(go())
    assert len(out) == 2 and out[0]["t_ms"] <= out[1]["t_ms"] and out[0]["rss_bytes"] is None
