"""The sequential design on the replay side (``replay/load/sequential_loop.py``): levels
closed by a look stop running, the run ends after the look that closes the last level,
after repeat max_repeats, or when the next repeat would pass the budget; every look is
in the manifest as soon as it is taken; and the fixed design's order is unchanged."""

from __future__ import annotations

import asyncio
import json
import sys
import types
from collections.abc import Iterator

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from specdec.errors import SpecdecError
from specdec.replay.config import ReplayConfig
from specdec.replay.experiment import run_replay
from specdec.replay.load.schedule import Block, _passes, interleaved, repeat_blocks
from specdec.replay.load.sequential_loop import Design, SequentialLoop, look_line, next_repeat_s, over_budget
from specdec.traffic.io import BUNDLED
from tests.support.fake_server import FakeVllm, stub_config, threaded

ARMS = ["baseline", "speculative"]


def _cfg(tmp_path, fixtures, **kw) -> ReplayConfig:
    return stub_config(tmp_path, fixtures, **{"repeats": 2, **kw})


class ScriptedLook:
    """A look that leaves open what ``script[repeat]`` says (default: every level it is
    given), and notes what it was called with and what the manifest on disk held then."""

    def __init__(self, script: dict[int, list[int]]):
        self.script = script
        self.calls: list[tuple[int, list[int], bool]] = []
        self.on_disk: list[int] = []  # looks in manifest.json at each call
        self.live: list[int] = []  # entries of the runner's looks list at each call

    def factory(self, run_dir, looks):
        def look(repeat: int, open_levels: list[int], final: bool) -> dict:
            self.calls.append((repeat, open_levels, final))
            self.on_disk.append(len(json.loads((run_dir / "manifest.json").read_text())["looks"]))
            self.live.append(len(looks))
            return {"open_levels": self.script.get(repeat, open_levels), "note": f"look {repeat}"}

        return look


def _blocks_sent(run_dir) -> list[tuple[int, int, str]]:
    """(repeat, level, arm) of every timed block, in the order they were sent."""
    first: dict[tuple[int, int, str], int] = {}
    for r in pq.read_table(run_dir / "requests.parquet").to_pylist():
        key = (r["repeat"], r["level"], r["arm"])
        first[key] = min(first.get(key, r["wall_send_ns"]), r["wall_send_ns"])
    return [k for k, _ in sorted(first.items(), key=lambda kv: kv[1])]


def test_levels_closed_by_a_look_stop_and_the_run_ends_when_none_is_open(tmp_path, fixtures, capsys):
    look = ScriptedLook({2: [2], 3: []})
    with threaded(FakeVllm(), FakeVllm()) as (b, s):
        run_dir = run_replay(
            _cfg(tmp_path, fixtures, baseline_url=b, speculative_url=s, max_repeats=6), look_factory=look.factory
        )
    # repeat-major for external servers, arms counterbalanced by repeat and level index; level 1
    # stops after repeat 2 (index 1), level 2 after repeat 3 (index 2), nothing after that
    a, b_ = ARMS
    assert _blocks_sent(run_dir) == [
        (0, 1, a), (0, 1, b_), (0, 2, b_), (0, 2, a),
        (1, 1, b_), (1, 1, a), (1, 2, a), (1, 2, b_),
        (2, 2, b_), (2, 2, a),
    ]  # fmt: skip
    assert look.calls == [(2, [1, 2], False), (3, [2], False)]
    assert look.on_disk == [0, 1] and look.live == [0, 1]  # the manifest held every earlier look
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["design"] == "sequential" and manifest["max_repeats"] == 6 and manifest["budget_minutes"] is None
    assert manifest["finished"] is True
    looks = manifest["looks"]
    assert [(x["repeat"], x["open_levels_before"], x["open_levels"], x["final"]) for x in looks] == [
        (2, [1, 2], [2], False),
        (3, [2], [], False),
    ]
    assert [x["note"] for x in looks] == ["look 2", "look 3"]
    assert looks[0]["at"].endswith("+00:00") and 0 < looks[0]["elapsed_s"] <= looks[1]["elapsed_s"]
    err = capsys.readouterr().err
    assert "look after repeat 2: level 2 open (level 1 decided);" in err
    assert "look after repeat 3: no level open (level 2 decided);" in err


def test_the_look_after_max_repeats_is_final(tmp_path, fixtures):
    look = ScriptedLook({})  # never closes a level
    with threaded(FakeVllm(), FakeVllm()) as (b, s):
        run_dir = run_replay(
            _cfg(tmp_path, fixtures, baseline_url=b, speculative_url=s, max_repeats=3), look_factory=look.factory
        )
    assert look.calls == [(2, [1, 2], False), (3, [1, 2], True)]
    assert {rep for rep, _, _ in _blocks_sent(run_dir)} == {0, 1, 2}
    looks = json.loads((run_dir / "manifest.json").read_text())["looks"]
    assert [(x["repeat"], x["final"]) for x in looks] == [(2, False), (3, True)]


def test_a_budget_too_small_makes_the_first_look_final(tmp_path, fixtures, capsys):
    look = ScriptedLook({})
    with threaded(FakeVllm(), FakeVllm()) as (b, s):
        run_dir = run_replay(
            _cfg(tmp_path, fixtures, baseline_url=b, speculative_url=s, max_repeats=5, budget_minutes=1e-6),
            look_factory=look.factory,
        )
    assert look.calls == [(2, [1, 2], True)]
    assert {rep for rep, _, _ in _blocks_sent(run_dir)} == {0, 1}
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["budget_minutes"] == 1e-6 and [x["final"] for x in manifest["looks"]] == [True]
    assert "of 1e-06 min spent; final look" in capsys.readouterr().err


def test_without_a_look_it_runs_max_repeats_and_records_none(tmp_path, fixtures):
    with threaded(FakeVllm(), FakeVllm()) as (b, s):
        run_dir = run_replay(_cfg(tmp_path, fixtures, baseline_url=b, speculative_url=s, levels=[1], max_repeats=3))
    assert [rep for rep, _, _ in _blocks_sent(run_dir)] == [0, 0, 1, 1, 2, 2]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["design"] == "sequential" and manifest["looks"] == []


def test_a_fixed_run_records_the_fixed_design(tmp_path, fixtures):
    with threaded(FakeVllm(), FakeVllm()) as (b, s):
        run_dir = run_replay(_cfg(tmp_path, fixtures, baseline_url=b, speculative_url=s, levels=[1]))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert (manifest["design"], manifest["max_repeats"], manifest["looks"]) == ("fixed", None, None)
    assert "sequential" not in manifest["schedule"]["order"]


# --- the loop alone, on a fake clock ---------------------------------------------------


def _drive(loop: SequentialLoop, clock: list[float], block_s: float, restart: bool = False) -> list[Block]:
    """Run the loop's blocks as a runner would, each timed block taking ``block_s`` on the fake clock."""

    async def go() -> list[Block]:
        out = []
        async for block in loop.blocks(lossless=True, sample=False, restart=restart):
            out.append(block)
            if block.kind == "timed":
                clock[0] += block_s
        return out

    return asyncio.run(go())


def test_the_budget_ends_the_run_when_the_next_repeat_would_not_fit():
    """Levels 1, 2, 4, two arms, 10 s a block, 5 minutes: a repeat of 3 levels takes 60 s, of
    2 levels 40 s. Looks after repeats 2..: elapsed 120 (+60 = 180), 180 (+60 = 240; level 1
    closed), 220 (+40), 260 (+40 = 300, not over), 300 (+40 = 340 > 300: final)."""
    clock = [0.0]
    lines: list[str] = []
    calls: list[tuple[int, list[int], bool]] = []

    def scripted(repeat, open_levels, final):
        calls.append((repeat, open_levels, final))
        return {"open_levels": [2, 4] if repeat == 3 else open_levels}

    design = Design([1, 2, 4], repeats=2, max_repeats=10, budget_minutes=5)
    loop = SequentialLoop(design, ARMS, lines.append, look=scripted, clock=lambda: clock[0])
    blocks = _drive(loop, clock, 10.0)
    assert calls == [(2, [1, 2, 4], False), (3, [1, 2, 4], False), (4, [2, 4], False), (5, [2, 4], False),
                     (6, [2, 4], True)]  # fmt: skip
    assert [x["elapsed_s"] for x in loop.looks] == [120, 180, 220, 260, 300]
    timed = [b for b in blocks if b.kind == "timed"]
    assert len(timed) == 3 * 6 + 3 * 4 and {b.level for b in timed if b.repeat >= 3} == {2, 4}
    # after the last repeat: every level's lossless pass, closed ones included
    assert [(b.kind, b.level) for b in blocks[len(timed) :]] == [
        ("lossless_pass", lv) for lv in (1, 2, 4) for _ in ARMS
    ]
    assert lines[-1] == "look after repeat 6: levels 2, 4 open; 5.0 of 5 min spent; final look"
    assert lines[1] == "look after repeat 3: levels 2, 4 open (level 1 decided); 3.0 of 5 min spent"


def test_the_repeat_time_counts_the_restart_and_no_look_means_no_record():
    """Level 1, 10 s a block, a restart of 30 s before the second repeat: the second repeat
    takes 30 + 20 = 50 s; after it 20 + 50 = 70 s have passed, + 50 = 120 s > 1.5 min: the
    budget ends the run there."""
    clock = [0.0]
    lines: list[str] = []

    async def go() -> list[Block]:
        out = []
        loop = SequentialLoop(Design([1], 2, 5, budget_minutes=1.5), ARMS, lines.append, clock=lambda: clock[0])
        async for block in loop.blocks(lossless=False, sample=False, restart=True):
            out.append(block)
            clock[0] += 10.0 if block.kind == "timed" else 30.0
        assert loop.looks == []
        return out

    blocks = asyncio.run(go())
    assert [(b.kind, b.repeat) for b in blocks] == [("timed", 0), ("timed", 0), ("restart", 1), ("timed", 1),
                                                     ("timed", 1)]  # fmt: skip
    assert lines == ["after repeat 2: 1.2 of 1.5 min spent; the next repeat would not fit"]


def test_arms_a_look_lets_leave_stop_running_and_the_passes_still_run_every_arm():
    """A sweep k0, k2, k4, k8: the look after repeat 2 lets k2 leave (decided below k8), the
    one after repeat 3 k4; the repeats after each run only the arms left, the passes all four."""
    clock = [0.0]
    lines: list[str] = []
    arms = ["k0", "k2", "k4", "k8"]
    answers = {2: ["k0", "k4", "k8"], 3: ["k0", "k8"], 4: ["k0", "k8"]}

    def scripted(repeat, open_levels, final):
        return {"open_levels": open_levels, "open_arms": answers[repeat]}

    loop = SequentialLoop(Design([1, 4], 2, 4), arms, lines.append, look=scripted, clock=lambda: clock[0])
    blocks = _drive(loop, clock, 1.0)
    timed = [b for b in blocks if b.kind == "timed"]
    assert {b.arm for b in timed if b.repeat < 2} == set(arms)
    assert {b.arm for b in timed if b.repeat == 2} == {"k0", "k4", "k8"}
    assert {b.arm for b in timed if b.repeat == 3} == {"k0", "k8"}
    assert [b.arm for b in blocks if b.kind == "lossless_pass" and b.level == 1] == arms
    assert [x["open_arms"] for x in loop.looks] == [["k0", "k4", "k8"], ["k0", "k8"], ["k0", "k8"]]
    assert loop.looks[1]["open_arms_before"] == ["k0", "k4", "k8"]
    assert "arm k2 left (none of its cells open)" in lines[0] and "arm k4 left" in lines[1]


@pytest.mark.parametrize(
    "answer, match",
    [
        ({"open_levels": [1], "open_arms": ["baseline", "other"]}, r"arm\(s\) \['other'\] open that were not open"),
        ({"open_levels": [1], "open_arms": []}, "left levels open but no arm to run them"),
        ({"open_levels": [1], "open_arms": "baseline"}, "open_arms that are not arm names"),
        ({"open_levels": [1, 8]}, r"level\(s\) \[8\] open that were not open"),
        ({"levels": [1]}, "without a list of integer open_levels"),
        ({"open_levels": [1], "p": float("nan")}, "the manifest cannot hold"),
        ({"open_levels": [1], "x": object()}, "the manifest cannot hold"),
    ],
)
def test_a_look_answer_the_run_cannot_use_stops_it_with_a_message(answer, match):
    loop = SequentialLoop(Design([1, 2], 2, 4), ARMS, lambda _: None, look=lambda r, o, f: answer)
    with pytest.raises(SpecdecError, match=match):
        _drive(loop, [0.0], 1.0)


def test_budget_helpers():
    assert next_repeat_s(60.0, 3, 2) == 40.0 and next_repeat_s(60.0, 3, 3) == 60.0
    assert not over_budget(260, 40, 5) and over_budget(260.1, 40, 5) and not over_budget(1e9, 1, None)
    assert look_line(3, [1, 4, 8], [4, 8], False, "6.2 of 20 min spent") == (
        "look after repeat 3: levels 4, 8 open (level 1 decided); 6.2 of 20 min spent"
    )
    record = {
        "decided": [{"label": "faster"}, {"label": "faster"}, {"label": "inconclusive"}, {"no": "label"}],
        "open_cells": [["ngram", "chat", 4]],
    }
    assert look_line(4, [4, 8], [4], True, "9.0 min spent", record) == (
        "look after repeat 4: level 4 open (level 8 decided); 9.0 min spent; this look: 2 faster, "
        "1 inconclusive; 1 cell open; final look"
    )
    assert look_line(3, [4], [4], False, "1 min spent", {"decided": [], "open_cells": []}).endswith(
        "this look: nothing decided; 0 cells open"
    )


# --- the fixed design is unchanged ------------------------------------------------------


def _repeat_major_before(levels, repeats, arms, lossless, sample) -> Iterator[Block]:
    """``schedule._repeat_major`` as it was before the sequential design (commit 3c00b08)."""
    for repeat in range(repeats):
        if repeat:
            yield Block("restart", "", 0, repeat)
        for i, level in enumerate(levels):
            for arm in arms if (repeat + i) % 2 == 0 else arms[::-1]:
                yield Block("timed", arm, level, repeat)
    for level in levels:
        yield from _passes(level, arms, lossless, sample)


def _level_major_before(levels, repeats, arms, lossless, sample) -> Iterator[Block]:
    """``schedule.interleaved`` without restarts as it was before (commit 3c00b08)."""
    for i, level in enumerate(levels):
        for repeat in range(repeats):
            for arm in arms if (repeat + i * (repeats % 2)) % 2 == 0 else arms[::-1]:
                yield Block("timed", arm, level, repeat)
        yield from _passes(level, arms, lossless, sample)


CONFIGS = [
    ([1, 2, 4, 8], 3, ARMS, True, False),
    ([1, 2, 4, 8], 2, ARMS, False, True),
    ([1], 5, ARMS, True, True),
    ([2, 16], 4, ["baseline"], False, False),
    ([1, 2, 4], 1, ARMS[::-1], True, False),
]


@pytest.mark.parametrize("levels, repeats, arms, lossless, sample", CONFIGS)
def test_the_fixed_schedules_are_unchanged(levels, repeats, arms, lossless, sample):
    args = (levels, repeats, arms, lossless, sample)
    assert list(interleaved(*args, restart=True)) == list(_repeat_major_before(*args))
    assert list(interleaved(*args)) == list(_level_major_before(*args))


@pytest.mark.parametrize("levels, repeats, arms, lossless, sample", CONFIGS[:4])
def test_a_sequential_run_that_closes_nothing_is_the_repeat_major_schedule(levels, repeats, arms, lossless, sample):
    loop = SequentialLoop(Design(levels, 2, repeats), arms, lambda _: None)

    async def go() -> list[Block]:
        return [b async for b in loop.blocks(lossless, sample, restart=True)]

    assert asyncio.run(go()) == list(interleaved(levels, repeats, arms, lossless, sample, restart=True))


def test_repeat_blocks_keep_each_levels_arm_order_when_others_close():
    all_levels = [1, 2, 4]
    both = list(repeat_blocks(all_levels, all_levels, 3, ARMS))
    only_4 = list(repeat_blocks([4], all_levels, 3, ARMS))
    assert only_4 == [b for b in both if b.level == 4] and [b.arm for b in only_4] == ARMS[::-1]


# --- the config and the command line ----------------------------------------------------


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"budget_minutes": 10}, "needs max_repeats"),
        ({"repeats": 4, "max_repeats": 3}, "below repeats"),
        ({"repeats": 1, "max_repeats": 5}, "at least 2"),
        ({"max_repeats": 101}, "less than or equal to 100"),
        ({"max_repeats": 4, "budget_minutes": 0}, "greater than 0"),
        ({"max_repeats": 4, "budget_minutes": float("inf")}, "finite"),
    ],
)
def test_config_refuses_a_sequential_design_it_cannot_run(kw, match):
    with pytest.raises(ValidationError, match=match):
        ReplayConfig(traffic=BUNDLED, **kw)


def test_config_defaults_are_the_fixed_design():
    cfg = ReplayConfig(traffic=BUNDLED)
    assert (cfg.max_repeats, cfg.budget_minutes, cfg.sequential) == (None, None, False)
    assert ReplayConfig(traffic=BUNDLED, repeats=2, max_repeats=2).sequential


@pytest.fixture
def replay_calls(monkeypatch):
    from specdec.replay import experiment

    got: list[tuple[ReplayConfig, dict]] = []

    def fake_run(cfg, **kw):
        got.append((cfg, kw))
        raise SpecdecError("stop here")

    monkeypatch.setattr(experiment, "run_replay", fake_run)
    return got


def _invoke(*extra: str):
    from specdec.cli.replay import main

    return CliRunner().invoke(main, [str(BUNDLED), "--baseline-url", "http://127.0.0.1:9",
                                     "--speculative-url", "http://127.0.0.1:9", "--no-progress", *extra])  # fmt: skip


def test_the_command_passes_the_analytics_look_when_there_is_one(replay_calls, monkeypatch, tmp_path):
    seen = []
    fake = types.ModuleType("specdec.analytics.sequential_look")
    fake.look_fn = lambda run_dir, max_repeats, margin, looks: seen.append((run_dir, max_repeats, margin, looks))
    monkeypatch.setitem(sys.modules, "specdec.analytics.sequential_look", fake)
    _invoke("--repeats", "2", "--max-repeats", "7", "--budget", "12.5", "--margin", "0.1")
    cfg, kw = replay_calls[0]
    assert (cfg.repeats, cfg.max_repeats, cfg.budget_minutes) == (2, 7, 12.5)
    looks: list[dict] = []
    kw["look_factory"](tmp_path, looks)
    assert seen == [(tmp_path, 7, 0.1, looks)] and seen[0][3] is looks


def test_the_fixed_design_asks_for_no_look(replay_calls):
    _invoke("--design", "fixed", "--repeats", "4")
    cfg, kw = replay_calls[0]
    assert kw == {} and (cfg.repeats, cfg.max_repeats) == (4, None)


def test_the_default_design_is_sequential_up_to_twice_the_first_looks_repeats(replay_calls):
    _invoke()
    cfg, kw = replay_calls[0]
    assert (cfg.repeats, cfg.max_repeats, cfg.budget_minutes) == (3, 6, None) and "look_factory" in kw
    _invoke("--repeats", "5", "--budget", "20")
    cfg, kw = replay_calls[1]
    assert (cfg.repeats, cfg.max_repeats, cfg.budget_minutes) == (5, 10, 20.0) and "look_factory" in kw


@pytest.mark.parametrize(
    "extra",
    [("--repeats", "1"), ("--load", "poisson", "--rates", "1")],
    ids=["one repeat", "open loop"],
)
def test_a_run_that_cannot_look_is_fixed_by_default_and_refused_when_asked(replay_calls, extra):
    _invoke(*extra)
    cfg, kw = replay_calls[0]
    assert kw == {} and cfg.max_repeats is None
    for ask in (("--design", "sequential"), ("--max-repeats", "4"), ("--budget", "5")):
        r = _invoke(*extra, *ask)
        assert r.exit_code == 2 and "the sequential design cannot run here" in r.output and "--design fixed" in r.output
    assert len(replay_calls) == 1


def test_the_fixed_design_refuses_the_sequential_options_by_name(replay_calls):
    for ask in (("--max-repeats", "4"), ("--budget", "5")):
        r = _invoke("--design", "fixed", *ask)
        assert r.exit_code == 2 and "--max-repeats and --budget belong to the sequential design" in r.output
    assert replay_calls == []


def test_the_demo_looks_after_two_repeats_up_to_five_and_its_fixed_design_is_five(monkeypatch):
    from specdec.cli import main as main_cli
    from specdec.replay import experiment

    got = []

    def fake_run(cfg, look_factory=None):
        got.append((cfg, look_factory))
        raise SpecdecError("stop here")

    monkeypatch.setattr(experiment, "run_replay", fake_run)
    monkeypatch.setattr("specdec.model.prepare_model", lambda: type("P", (), {"path": "/m"})())  # bundled_model's
    said = []
    for extra in ((), ("--design", "fixed"), ("--repeats", "3", "--max-repeats", "4")):
        said.append(CliRunner().invoke(main_cli.main, ["demo", "--no-progress", *extra]).output)
    assert [(c.repeats, c.max_repeats, f is not None) for c, f in got] == [(2, 5, True), (5, None, False), (3, 4, True)]
    assert "design: sequential, first look after repeat 2, at most 5 repeats (--design fixed: exactly 5)" in said[0]
    assert "design: fixed, 5 repeats" in said[1]
    assert "at most 4 repeats (--design fixed: exactly 3)" in said[2]


def test_help_lists_the_design_options_for_replay_and_demo():
    from specdec.cli.main import main as specdec_main

    text = _invoke("--help").output
    assert "--design [sequential|fixed]" in text and "--max-repeats" in text and "--budget MINUTES" in text
    assert "2 x --repeats" in text
    demo = CliRunner().invoke(specdec_main, ["demo", "--help"]).output
    assert "--design [sequential|fixed]" in demo and "max(5, --repeats)" in demo
