import asyncio

import pytest

from specdec.replay.config import ReplayConfig
from specdec.replay.http.client import as_endpoint
from specdec.replay.runner import level_rows, request_id, results_table, run_level
from specdec.runfolder import requests_part
from specdec.schemas.records import RequestResult
from specdec.traffic.io import BUNDLED, load_traffic
from tests.support.fake_server import GOOD_SSE, FakeVllm, serving

SSE = GOOD_SSE


@pytest.mark.parametrize("level", [1, 3])
def test_closed_loop_keeps_exactly_level_requests_in_flight(level):
    rows = level_rows(load_traffic(BUNDLED), ReplayConfig(traffic=BUNDLED, requests_per_level=7))
    fake = FakeVllm(SSE, delay_s=0.02)

    async def go():
        async with serving(fake.server()) as (s, base):
            return await run_level(s, base, "m", rows, level, lambda i: request_id("r", "baseline", level, i))

    results = asyncio.run(go())
    assert len(results) == 7 and all(res.success for _, res in results)
    assert fake.max_in_flight == level
    assert sorted(fake.request_ids) == [request_id("r", "baseline", level, i) for i in range(7)]
    table = results_table("r", "baseline", level, results)
    assert table.schema.names == list(RequestResult.model_fields)
    assert table.column("level").to_pylist() == [level] * 7


def test_level_rows_cycles_the_mix_and_overrides_length():
    t = load_traffic(BUNDLED)
    rows = level_rows(t, ReplayConfig(traffic=BUNDLED, requests_per_level=len(t.rows) + 2, max_tokens=16))
    assert [r.prompt_id for r in rows[-2:]] == [t.rows[0].prompt_id, t.rows[1].prompt_id]
    assert {r.max_tokens for r in rows} == {16}


def test_config_rejects_bad_levels_and_arms():
    with pytest.raises(ValueError):
        ReplayConfig(traffic=BUNDLED, levels=[0])
    with pytest.raises(ValueError):
        ReplayConfig(traffic=BUNDLED, arms=["fast"])
    assert ReplayConfig(traffic=BUNDLED, levels=[4, 1, 4]).levels == [1, 4]


def test_interrupted_level_keeps_finished_requests(tmp_path):
    """Ctrl-C (task cancellation) mid-level: requests that finished are on disk,
    and the one in flight (level 1) as a failed row typed 'interrupted'."""
    import pyarrow.parquet as pq

    from specdec.replay.progress import Progress
    from specdec.replay.runner import Replayer

    traffic = load_traffic(BUNDLED)
    cfg = ReplayConfig(traffic=BUNDLED, requests_per_level=40, progress=False)
    fake = FakeVllm(SSE, delay_s=0.05)  # ~0.2 s per request, one at a time

    async def go():
        runner = Replayer(cfg, "r", tmp_path, traffic, Progress(False))
        (tmp_path / "requests").mkdir()
        async with serving(fake.server()) as (s, base):
            task = asyncio.create_task(runner._block(s, "baseline", as_endpoint(base), level_rows(traffic, cfg), 1))
            for _ in range(200):  # mid-level: a few requests answered (not a fixed sleep: a loaded host is slower)
                if len(fake.request_ids) >= 3:
                    break
                await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(go())
    table = pq.read_table(requests_part(tmp_path, "baseline", 1, 0))
    assert 1 <= table.num_rows < 40
    ok = table.column("success").to_pylist()
    assert all(ok[:-1]) and not ok[-1]
    assert table.column("error_type").to_pylist()[-1] == "interrupted"
    assert len(fake.request_ids) == table.num_rows  # every request sent is a row


def test_interleaved_schedule_counterbalances_the_arms_within_each_level_then_verifies():
    from specdec.replay.load.schedule import interleaved

    blocks = [(b.kind, b.arm, b.level, b.repeat) for b in interleaved([1, 4], 2, ["baseline", "speculative"], True)]
    assert blocks == [
        ("timed", "baseline", 1, 0),
        ("timed", "speculative", 1, 0),
        ("timed", "speculative", 1, 1),
        ("timed", "baseline", 1, 1),
        ("lossless_pass", "baseline", 1, 0),
        ("lossless_pass", "speculative", 1, 0),
        ("timed", "baseline", 4, 0),
        ("timed", "speculative", 4, 0),
        ("timed", "speculative", 4, 1),
        ("timed", "baseline", 4, 1),
        ("lossless_pass", "baseline", 4, 0),
        ("lossless_pass", "speculative", 4, 0),
    ]
    assert all(b.kind == "timed" for b in interleaved([1], 3, ["baseline"], False))


def test_fresh_servers_per_repeat_make_the_schedule_repeat_major():
    from specdec.replay.load.schedule import interleaved

    blocks = [
        (b.kind, b.arm, b.level, b.repeat)
        for b in interleaved([1, 4], 2, ["baseline", "speculative"], True, restart=True)
    ]
    assert blocks == [
        ("timed", "baseline", 1, 0),
        ("timed", "speculative", 1, 0),
        ("timed", "speculative", 4, 0),
        ("timed", "baseline", 4, 0),
        ("restart", "", 0, 1),
        # each level has each arm first once over the two repeats
        ("timed", "speculative", 1, 1),
        ("timed", "baseline", 1, 1),
        ("timed", "baseline", 4, 1),
        ("timed", "speculative", 4, 1),
        ("lossless_pass", "baseline", 1, 0),
        ("lossless_pass", "speculative", 1, 0),
        ("lossless_pass", "baseline", 4, 0),
        ("lossless_pass", "speculative", 4, 0),
    ]
    # one repeat: nothing to restart
    assert [b.kind for b in interleaved([1], 1, ["baseline"], False, restart=True)] == ["timed"]


def test_a_restart_moves_the_following_blocks_to_the_fresh_servers(tmp_path):
    """Replayer.run with restart: repeat 0 goes to the first servers, the fresh
    ones are warmed up, and repeat 1 goes to them only."""
    import pyarrow.parquet as pq

    from specdec.replay.progress import Progress
    from specdec.replay.runner import Replayer

    traffic = load_traffic(BUNDLED)
    cfg = ReplayConfig(
        traffic=BUNDLED,
        requests_per_level=2,
        levels=[1, 2],
        repeats=2,
        lossless_pass=False,
        samples=0,
        prefix_cache="keep",
        warmup_requests=1,
        progress=False,
    )
    old, new = FakeVllm(SSE), FakeVllm(SSE)
    restarts = []

    async def go():
        async with serving(old.server()) as (_, old_base), serving(new.server()) as (_, new_base):

            def restart(repeat):
                restarts.append(repeat)
                return {"baseline": new_base, "speculative": new_base}

            runner = Replayer(cfg, "r", tmp_path, traffic, Progress(False))
            await runner.run({"baseline": old_base, "speculative": old_base}, restart=restart)

    asyncio.run(go())
    assert restarts == [1]
    timed = lambda ids: sorted(i for i in ids if not i.endswith(".warmup"))  # noqa: E731
    assert timed(old.request_ids) == sorted(
        request_id("r", arm, level, i, 0) for arm in ("baseline", "speculative") for level in (1, 2) for i in range(2)
    )
    assert timed(new.request_ids) == sorted(
        request_id("r", arm, level, i, 1) for arm in ("baseline", "speculative") for level in (1, 2) for i in range(2)
    )
    assert sum(i.endswith(".warmup") for i in new.request_ids) == 2  # each fresh arm warmed up
    assert pq.read_table(requests_part(tmp_path, "baseline", 2, 1)).num_rows == 2
