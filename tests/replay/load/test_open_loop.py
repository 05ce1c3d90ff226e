"""Open-loop load modes: arrival plans (recorded clock, seeded Poisson,
sessions in turn order), the executor on a fake clock, and the runner's
load columns against the fake vLLM server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from specdec.errors import InputFileError, SpecdecError
from specdec.replay.config import ReplayConfig
from specdec.replay.http.client import as_endpoint
from specdec.replay.load.arrivals import (
    Arrival,
    poisson_plan,
    poisson_times,
    recorded_plan,
    session_predecessors,
)
from specdec.replay.load.modes import load_levels, plans
from specdec.replay.load.open_loop import MonotonicClock, SendTime, open_loop, run_open_level
from specdec.replay.progress import Progress
from specdec.replay.runner import Replayer, level_rows, request_id, results_table, run_level
from specdec.runfolder import requests_part
from specdec.schemas.records import TrafficRow
from specdec.traffic.io import BUNDLED, Traffic, load_traffic
from tests.support.fake_server import GOOD_SSE, FakeVllm, serving


def row(
    pid: str,
    arrival_ms: float | None = None,
    session: str | None = None,
    turn: int | None = None,
    messages: list | None = None,
) -> TrafficRow:
    content = {"messages": json.dumps(messages)} if messages else {"prompt": f"prompt {pid}"}
    return TrafficRow(
        prompt_id=pid,
        category="chat",
        max_tokens=2,
        arrival_ms=arrival_ms,
        session_id=session,
        turn_index=turn,
        **content,
    )


class FakeClock:
    """A clock that jumps to each target, ``overshoot`` ms late, after yielding
    once to the event loop (so tasks started earlier run first)."""

    def __init__(self, overshoot: float = 0.0):
        self.now, self.overshoot = 0.0, overshoot

    def start(self) -> None:
        self.now = 0.0

    def elapsed_ms(self) -> float:
        return self.now

    async def sleep_until(self, ms: float) -> None:
        await asyncio.sleep(0)
        if ms > self.now:
            self.now = ms + self.overshoot


# --- plans -------------------------------------------------------------------


def test_recorded_plan_starts_at_the_earliest_arrival_and_scales():
    rows = [row("a", 1000), row("b", 1500), row("c", 4000), row("d", 1000)]
    plan = recorded_plan(rows, 0.1)
    assert [(a.index, a.intended_ms) for a in plan] == [(0, 0.0), (1, 50.0), (2, 300.0), (3, 0.0)]
    assert [a.intended_ms for a in recorded_plan(rows, 1.0)] == [0.0, 500.0, 3000.0, 0.0]


def test_recorded_plan_names_the_file_and_row_without_an_arrival_time():
    with pytest.raises(InputFileError) as e:
        recorded_plan([row("a", 0), row("b"), row("c")], 1.0, Path("mine.jsonl"))
    msg = str(e.value)
    assert msg.startswith("mine.jsonl, row 2, field 'arrival_ms'") and "'b'" in msg and "--load poisson" in msg


def test_session_turns_are_chained_by_turn_index_not_file_order():
    rows = [row("a", 0, "s1", 1), row("b", 0), row("c", 0, "s1", 0), row("d", 0, "s2", 0), row("e", 0, "s1", 2)]
    assert session_predecessors(rows) == [2, None, None, None, 0]
    assert [a.after for a in recorded_plan(rows, 1.0)] == [2, None, None, None, 0]


def test_poisson_times_are_seeded_start_at_zero_and_have_the_asked_mean_gap():
    times = poisson_times(4001, 2.0, seed=7)
    assert times == poisson_times(4001, 2.0, seed=7)  # same arguments, same times
    assert times != poisson_times(4001, 2.0, seed=8)
    assert poisson_times(5, 2.0, 7) != poisson_times(5, 4.0, 7)
    assert times[0] == 0.0 and all(b > a for a, b in zip(times, times[1:]))
    mean_gap = times[-1] / 4000
    assert 475 < mean_gap < 525  # 1000 ms / 2 per s = 500 ms, 4000 gaps (fixed draw)


def test_poisson_plan_gives_a_session_its_slots_in_turn_order():
    rows = [row("t1", session="s", turn=1), row("x"), row("t0", session="s", turn=0)]
    times = poisson_times(3, 1.0, 0)
    plan = {a.index: a for a in poisson_plan(rows, 1.0, 0)}
    assert plan[2].intended_ms == times[0] and plan[1].intended_ms == times[1] and plan[0].intended_ms == times[2]
    assert plan[0].after == 2 and plan[2].after is None


def test_levels_are_keyed_by_offered_load():
    rec = ReplayConfig(traffic=BUNDLED, load="recorded", time_scales=[0.25, 1, 0.5])
    assert rec.levels == [1, 2, 3]
    assert [(lv.key, lv.value) for lv in load_levels(rec)] == [(1, 1.0), (2, 0.5), (3, 0.25)]
    poi = ReplayConfig(traffic=BUNDLED, load="poisson", rates=[2, 0.5])
    assert [(lv.key, lv.value) for lv in load_levels(poi)] == [(1, 0.5), (2, 2.0)]
    assert [(lv.key, lv.mode) for lv in load_levels(ReplayConfig(traffic=BUNDLED, levels=[4, 1]))] == [
        (1, "closed"),
        (4, "closed"),
    ]


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(load="poisson"), "needs rates"),
        (dict(rates=[1.0]), "is for --load poisson"),
        (dict(time_scales=[0.1]), "is for --load recorded"),
        (dict(load="recorded", levels=[1, 2]), "closed-loop concurrencies"),
        (dict(load="poisson", rates=[0.0]), "positive finite"),
        (dict(load="recorded", time_scales=[0.5, 0.5]), "given twice"),
    ],
)
def test_config_refuses_options_of_another_mode(kw, match):
    with pytest.raises(ValidationError, match=match):
        ReplayConfig(traffic=BUNDLED, **kw)


def test_recorded_mode_refuses_more_requests_than_recorded_rows():
    traffic = Traffic(Path("rec.jsonl"), "x", [row("a", 0), row("b", 5)])
    cfg = ReplayConfig(traffic=traffic.path, load="recorded", requests_per_level=3)
    with pytest.raises(SpecdecError, match="more than the 2 rows of rec.jsonl"):
        plans(cfg, traffic, level_rows(traffic, cfg))


# --- the executor --------------------------------------------------------------


def test_open_loop_sends_in_time_order_and_records_each_lag():
    clock = FakeClock(overshoot=2.0)
    seen: list[tuple[int, SendTime]] = []

    async def send(i, when):
        seen.append((i, when))
        return i

    plan = [Arrival(0, 0.0), Arrival(1, 12.0), Arrival(2, 5.0)]
    out = asyncio.run(open_loop(plan, send, clock))
    assert out == [0, 2, 1]
    assert [(i, w.intended_ms, w.actual_ms, w.lag_ms, w.session_wait_ms) for i, w in seen] == [
        (0, 0.0, 0.0, 0.0, None),
        (2, 5.0, 7.0, 2.0, None),
        (1, 12.0, 14.0, 2.0, None),
    ]


def test_open_loop_does_not_wait_for_replies_before_the_next_send():
    started: list[int] = []

    async def go():
        release = asyncio.Event()

        async def send(i, when):
            started.append(i)
            if len(started) == 3:
                release.set()
            await release.wait()  # no reply until every request was sent
            return i

        return await open_loop([Arrival(i, float(i)) for i in range(3)], send, FakeClock())

    assert sorted(asyncio.run(go())) == [0, 1, 2] and started == [0, 1, 2]


def test_a_later_turn_waits_for_the_previous_one_and_counts_the_wait_apart():
    clock = FakeClock()
    seen: dict[int, SendTime] = {}

    async def go():
        async def send(i, when):
            seen[i] = when
            if i == 0:  # the first turn takes 30 ms
                for _ in range(5):
                    await asyncio.sleep(0)
                clock.now = 30.0
            return i

        return await open_loop([Arrival(0, 0.0), Arrival(1, 10.0, after=0)], send, clock)

    assert asyncio.run(go()) == [0, 1]
    assert (seen[1].intended_ms, seen[1].session_wait_ms, seen[1].lag_ms) == (30.0, 20.0, 0.0)


def test_the_monotonic_clock_never_wakes_early():
    async def go():
        clock = MonotonicClock()
        clock.start()
        out = []
        for target in (0.5, 3.0, 7.0):
            await clock.sleep_until(target)
            out.append((target, clock.elapsed_ms()))
        return out

    assert all(got >= target for target, got in asyncio.run(go()))


# --- against the fake server -----------------------------------------------------


def test_sessions_replay_turn_by_turn_with_the_recorded_messages():
    turn0 = [{"role": "user", "content": "hi"}]
    turn1 = turn0 + [{"role": "assistant", "content": "hello"}, {"role": "user", "content": "more"}]
    rows = [row("s-0", 0, "s", 0, turn0), row("x", 5), row("s-1", 10, "s", 1, turn1)]
    fake = FakeVllm(GOOD_SSE, delay_s=0.1)  # about 0.4 s per request
    sends: dict[str, SendTime] = {}

    async def go():
        async with serving(fake.server()) as (s, base):
            return await run_open_level(s, base, "m", rows, recorded_plan(rows, 1.0), lambda i: f"id{i}", sends=sends)

    results = {res.request_id: res for _, res in asyncio.run(go())}
    assert all(r.success for r in results.values())
    t0, x, t1 = sends["id0"], sends["id1"], sends["id2"]
    # turn 1 went out only after turn 0 had finished, and the wait is counted apart from the lag
    assert t1.actual_ms >= t0.actual_ms + results["id0"].e2e_ms
    assert t1.session_wait_ms > 0 and t1.intended_ms >= 10.0 and t1.lag_ms >= 0
    # the standalone row did not wait for anyone (open loop): sent while turn 0 was streaming
    assert x.actual_ms < t0.actual_ms + results["id0"].e2e_ms and x.session_wait_ms is None
    # each turn sent exactly its recorded messages (earlier turns included); turn 1 last
    assert fake.bodies[-1]["messages"] == turn1
    assert sorted(json.dumps(b["messages"]) for b in fake.bodies[:2]) == sorted(
        json.dumps(m) for m in (turn0, [{"role": "user", "content": "prompt x"}])
    )


def _block_tables(tmp_path, cfg, arms, repeats):
    traffic = load_traffic(cfg.traffic)
    fake = FakeVllm(GOOD_SSE)

    async def go():
        runner = Replayer(cfg, "r", tmp_path, traffic, Progress(False))
        (tmp_path / "requests").mkdir(exist_ok=True)
        async with serving(fake.server()) as (s, base):
            for repeat in range(repeats):
                for arm in arms:
                    for level in cfg.levels:
                        await runner._block(s, arm, as_endpoint(base), level_rows(traffic, cfg), level, repeat)

    asyncio.run(go())
    return {
        (arm, level, r): pq.read_table(requests_part(tmp_path, arm, level, r)).to_pylist()
        for arm in arms
        for level in cfg.levels
        for r in range(repeats)
    }


def test_poisson_arrivals_are_the_same_in_both_arms_and_every_repeat(tmp_path):
    cfg = ReplayConfig(
        traffic=BUNDLED,
        load="poisson",
        rates=[40.0],
        arrival_seed=3,
        requests_per_level=6,
        progress=False,
        prefix_cache="keep",
    )
    tables = _block_tables(tmp_path, cfg, ["baseline", "speculative"], 2)
    plan = {a.index: a.intended_ms for a in poisson_plan(level_rows(load_traffic(BUNDLED), cfg), 40.0, 3)}
    for rows in tables.values():
        by_seq = {int(r["request_id"].rsplit(".", 1)[1]): r for r in rows}
        assert {i: r["intended_send_ms"] for i, r in by_seq.items()} == plan
        for r in rows:
            assert (r["load_mode"], r["level_value"], r["level"]) == ("poisson", 40.0, 1)
            assert r["schedule_lag_ms"] == pytest.approx(r["actual_send_ms"] - r["intended_send_ms"])
            assert r["schedule_lag_ms"] >= 0


def test_closed_loop_records_actual_send_times_and_no_plan():
    rows = level_rows(load_traffic(BUNDLED), ReplayConfig(traffic=BUNDLED, requests_per_level=4))
    fake = FakeVllm(GOOD_SSE, delay_s=0.02)
    sends: dict[str, SendTime] = {}

    async def go():
        async with serving(fake.server()) as (s, base):
            return await run_level(s, base, "m", rows, 2, lambda i: request_id("r", "baseline", 2, i), sends=sends)

    results = asyncio.run(go())
    table = results_table("r", "baseline", 2, results, sends=sends).to_pylist()
    assert {r["load_mode"] for r in table} == {"closed"} and {r["level_value"] for r in table} == {2.0}
    assert all(
        r["intended_send_ms"] is None and r["schedule_lag_ms"] is None and r["session_wait_ms"] is None for r in table
    )
    actual = sorted(r["actual_send_ms"] for r in table)
    assert actual[0] >= 0 and actual[2] > actual[1]  # the third went out when a slot freed
    assert fake.max_in_flight == 2


def test_closed_loop_sends_a_later_turn_only_after_the_previous_one_and_fills_slots_meanwhile():
    rows = [row("s-0", session="s", turn=0), row("s-1", session="s", turn=1), row("x"), row("y")]
    fake = FakeVllm(GOOD_SSE, delay_s=0.05)
    sends: dict[str, SendTime] = {}

    async def go():
        async with serving(fake.server()) as (s, base):
            return await run_level(s, base, "m", rows, 3, lambda i: f"id{i}", sends=sends)

    results = {res.request_id: res for _, res in asyncio.run(go())}
    assert all(r.success for r in results.values())
    assert sends["id1"].actual_ms >= sends["id0"].actual_ms + results["id0"].e2e_ms
    assert fake.max_in_flight == 3  # s-0, x and y together; s-1 after s-0


def test_recorded_load_without_arrival_times_stops_before_any_request(tmp_path):
    cfg = ReplayConfig(
        traffic=BUNDLED, load="recorded", time_scales=[0.1], progress=False, lossless_pass=False, samples=0
    )
    fake = FakeVllm(GOOD_SSE)

    async def go():
        runner = Replayer(cfg, "r", tmp_path, load_traffic(BUNDLED), Progress(False))
        async with serving(fake.server()) as (_, base):
            await runner.run({"baseline": base, "speculative": base})

    with pytest.raises(InputFileError, match="row 1, field 'arrival_ms'"):
        asyncio.run(go())
    assert fake.request_ids == []


def test_cli_passes_the_load_options_and_refuses_a_mode_without_its_levels(monkeypatch, tmp_path):
    from click.testing import CliRunner

    import specdec.cli.replay as cli
    import specdec.replay.experiment as experiment

    got = []
    monkeypatch.setattr(experiment, "run_replay", lambda cfg: got.append(cfg) or tmp_path)
    monkeypatch.setattr(cli, "finish_run", lambda run_dir, **kw: None)
    ok = CliRunner().invoke(cli.main, [str(BUNDLED), "--load", "recorded", "--time-scale", "1,0.1"])
    assert ok.exit_code == 0, ok.output
    assert (got[0].load, got[0].time_scales, got[0].levels) == ("recorded", [1.0, 0.1], [1, 2])
    ok = CliRunner().invoke(cli.main, [str(BUNDLED), "--load", "poisson", "--rates", "2,0.5", "--arrival-seed", "9"])
    assert ok.exit_code == 0, ok.output
    assert (got[1].rates, got[1].arrival_seed, got[1].levels) == ([2.0, 0.5], 9, [1, 2])
    bad = CliRunner().invoke(cli.main, [str(BUNDLED), "--load", "poisson"])
    assert bad.exit_code == 1 and "needs rates" in bad.output
    bad = CliRunner().invoke(cli.main, [str(BUNDLED), "--load", "recorded", "--levels", "1,2"])
    assert bad.exit_code == 1 and "closed-loop concurrencies" in bad.output
    bad = CliRunner().invoke(cli.main, [str(BUNDLED), "--load", "poisson", "--rates", "1,,2"])
    assert bad.exit_code == 2 and "empty item" in bad.output
