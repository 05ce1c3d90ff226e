"""specdec traffic inspect|draw|mix: the profile of a traffic file, seeded
subsets that keep sessions whole, re-weighting to a mix (copies with new ids,
the arrival clock kept), mix validation naming the option, and --mix on
specdec-replay."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from specdec.cli.traffic_tools import draw_cmd, inspect_cmd, mix_cmd
from specdec.errors import SpecdecError
from specdec.replay.config import ReplayConfig
from specdec.traffic.io import load_traffic
from specdec.traffic.mix import MixError, draw_rows, mix_rows, parse_mix, units_of, write_rows
from specdec.traffic.profile import arrival_curve, length_histogram, manifest_traffic, profile, render


def row(pid, category, **kw):
    return {"prompt_id": pid, "category": category, "prompt": f"prompt {pid}", "max_tokens": 8, **kw}


def write(tmp_path, rows, name="t.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def small(tmp_path):
    """4 rows: code x1, chat x3; one session of 2 turns; arrivals 0, 0.5, 1.5, 2.5 s."""
    return load_traffic(
        write(
            tmp_path,
            [
                row("a", "code", input_tokens=3, max_tokens=8, arrival_ms=0.0, tier="high", source="proxy"),
                row("b", "chat", input_tokens=5, max_tokens=8, arrival_ms=500.0, session_id="s", turn_index=0),
                row("c", "chat", max_tokens=16, arrival_ms=1500.0, session_id="s", turn_index=1),
                row("d", "chat", input_tokens=100, max_tokens=1, arrival_ms=2500.0),
            ],
        )
    )


# ------------------------------------------------------------------ mixes
def test_parse_mix():
    assert parse_mix("code=0.3, chat=0.7") == {"code": 0.3, "chat": 0.7}
    assert parse_mix("a=0.333,b=0.333,c=0.334") == {"a": 0.333, "b": 0.333, "c": 0.334}
    assert sum(parse_mix("a=0.3333,b=0.3333,c=0.3333").values()) == pytest.approx(0.9999)  # within 0.001


@pytest.mark.parametrize(
    "text, says",
    [
        ("code=0.3,chat=0.6", "the shares must sum to 1 (within 0.001); 0.3 + 0.6 = 0.9"),
        ("code=0.3,,chat=0.7", "empty item"),
        ("code,chat=1", "'code' is not category=share"),
        ("=1", "'=1' is not category=share"),
        ("code=abc", "the share of 'code' must be a number from 0 to 1, got 'abc'"),
        ("code=1.5", "the share of 'code' must be a number from 0 to 1, got 1.5"),
        ("code=nan", "got 'nan'"),
        ("code=0.5,code=0.5", "category 'code' is given twice"),
    ],
)
def test_a_bad_mix_says_what_is_wrong(text, says):
    with pytest.raises(MixError) as e:
        parse_mix(text)
    assert says in str(e.value)


def test_replay_config_checks_the_mix(tmp_path):
    assert ReplayConfig(traffic=tmp_path / "t.jsonl", mix={"code": 0.25, "chat": 0.75}).mix == {
        "code": 0.25,
        "chat": 0.75,
    }
    with pytest.raises(ValidationError, match="the shares must sum to 1"):
        ReplayConfig(traffic=tmp_path / "t.jsonl", mix={"code": 0.5})


def test_replay_refuses_a_bad_mix_while_parsing_options(tmp_path):
    from specdec.cli.replay import main

    path = write(tmp_path, [row("a", "code")])
    res = CliRunner().invoke(main, [str(path), "--mix", "code=0.3,chat=0.6", "--runs-dir", str(tmp_path / "runs")])
    assert res.exit_code == 2
    assert "Invalid value for '--mix'" in res.output and "sum to 1" in res.output
    assert not (tmp_path / "runs").exists()


def test_replay_refuses_a_mix_category_the_traffic_lacks_before_creating_anything(tmp_path):
    from specdec.replay.experiment import run_replay

    path = write(tmp_path, [row("a", "code"), row("b", "chat")])
    cfg = ReplayConfig(traffic=path, runs_dir=tmp_path / "runs", mix={"code": 0.5, "prose": 0.5}, progress=False)
    with pytest.raises(SpecdecError, match=r"--mix: category 'prose' not in the traffic \(it has: chat, code\)"):
        run_replay(cfg)
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------ inspect
def test_length_histogram_has_power_of_two_bins_and_nearest_rank_quantiles():
    h = length_histogram([0, 1, 3, 4, 7, None])
    assert [(b["low"], b["high"], b["rows"]) for b in h["bins"]] == [(0, 1, 1), (1, 2, 1), (2, 4, 1), (4, 8, 2)]
    assert (h["known"], h["of"], h["min"], h["p50"], h["p90"], h["max"]) == (5, 6, 0, 3, 7, 7)
    assert length_histogram([None, None]) is None


def test_arrival_curve_bins_requests_per_second():
    # 0 and 0.5 s in the first 1 s bin, 1.5 s in the second, 2.5 s in the third, 59 s in the 60th
    c = arrival_curve([0, 500, 1500, 2500, 59_000, None])
    assert (c["bin_s"], c["start_s"], len(c["requests_per_s"])) == (1, 0, 60)
    assert c["requests_per_s"][:4] == [2.0, 1.0, 1.0, 0.0] and c["requests_per_s"][59] == 1.0
    assert (c["known"], c["of"], c["peak_rate_per_s"]) == (5, 6, 2.0)
    assert c["mean_rate_per_s"] == pytest.approx(4 / 59)
    # 61 s needs 2 s bins (at most 60)
    assert arrival_curve([0, 61_000])["bin_s"] == 2
    assert arrival_curve([None]) is None


def test_profile_of_a_small_file(small):
    p = profile(small)
    assert (p["rows"], p["categories"]) == (4, {"chat": 3, "code": 1})
    assert p["category_shares"] == {"chat": 0.75, "code": 0.25}
    assert p["tiers"] == {"(none)": 3, "high": 1} and p["sources"] == {"(none)": 3, "proxy": 1}
    assert p["sessions"] == {
        "sessions": 1,
        "rows_in_sessions": 2,
        "standalone_rows": 2,
        "turns_min": 2,
        "turns_p50": 2,
        "turns_max": 2,
    }
    assert (p["input_tokens"]["known"], p["input_tokens"]["max"]) == (3, 100)
    assert [b["rows"] for b in p["max_tokens"]["bins"]] == [1, 0, 0, 2, 1]  # 1 | 2-3 | 4-7 | 8, 8 | 16
    a = p["arrival"]
    assert (a["bin_s"], len(a["requests_per_s"]), a["peak_rate_per_s"]) == (0.1, 26, 10.0)
    text = render(p)
    assert "  chat                           3   75.0%" in text
    assert "sessions: 1 (2 rows, 2 to 2 turns, median 2), 2 standalone rows" in text
    assert "input_tokens (known for 3 of 4 rows): min 3, p50 5, p90 100, p99 100, max 100" in text
    assert "arrival (known for 4 of 4 rows): 0.000 s to 2.500 s, mean 1.2 requests/s, peak 10 requests/s" in text


def test_manifest_traffic_has_the_shares_and_the_arrival_curve_only_when_timed(tmp_path, small):
    m = manifest_traffic(small)
    assert m["category_shares"] == {"chat": 0.75, "code": 0.25} and m["sessions"] == 1
    assert m["arrival_rate"]["bin_s"] == 0.1 and len(m["arrival_rate"]["requests_per_s"]) == 26
    untimed = load_traffic(write(tmp_path, [row("a", "code")], "u.jsonl"))
    assert "arrival_rate" not in manifest_traffic(untimed)
    assert "arrival: not recorded" in render(profile(untimed))


# ------------------------------------------------------------------ draw
def standalone(codes=4, chats=6):
    return [row(f"code-{i}", "code") for i in range(codes)] + [row(f"chat-{i}", "chat") for i in range(chats)]


def sessions(n, turns, category="chat"):
    return [row(f"s{s}-t{t}", category, session_id=f"s{s}", turn_index=t) for s in range(n) for t in range(turns)]


def test_draw_is_seeded_and_in_file_order(tmp_path):
    t = load_traffic(write(tmp_path, standalone()))
    a, b = draw_rows(t, 5, seed=1), draw_rows(t, 5, seed=1)
    assert [r.prompt_id for r in a.rows] == [r.prompt_id for r in b.rows] and len(a.rows) == 5
    order = [r.prompt_id for r in t.rows]
    assert [order.index(r.prompt_id) for r in a.rows] == sorted(order.index(r.prompt_id) for r in a.rows)
    seeds = {tuple(r.prompt_id for r in draw_rows(t, 5, seed=s).rows) for s in range(5)}
    assert len(seeds) > 1


def test_draw_by_category_keeps_the_shares(tmp_path):
    t = load_traffic(write(tmp_path, standalone(codes=4, chats=6)))
    got = draw_rows(t, 5, seed=3, by_category=True)
    assert got.counts() == {"chat": 3, "code": 2}


def test_draw_keeps_sessions_whole(tmp_path):
    t = load_traffic(write(tmp_path, sessions(2, 3) + standalone(codes=2, chats=0)))
    for seed in range(10):
        got = draw_rows(t, 4, seed=seed)
        ids = {r.prompt_id for r in got.rows}
        for s in ("s0", "s1"):
            turns = {f"{s}-t{i}" for i in range(3)}
            assert turns <= ids or not turns & ids
        assert len(got.rows) <= 4
        assert (len(got.rows) == 4) != bool(got.notes)  # short only with a note saying why


def test_draw_of_more_rows_than_the_file_is_refused(tmp_path):
    t = load_traffic(write(tmp_path, standalone()))
    with pytest.raises(SpecdecError, match="-n 11 is more than the 10 rows"):
        draw_rows(t, 11)


# ------------------------------------------------------------------ mix
def test_mix_reweights_with_copies_under_new_ids(tmp_path):
    t = load_traffic(write(tmp_path, standalone(codes=2, chats=8)))
    got = mix_rows(t, {"code": 0.5, "chat": 0.5}, 10, seed=0)
    assert got.counts() == {"chat": 5, "code": 5}
    assert got.copies == 3  # 2 code rows, 5 wanted
    ids = [r.prompt_id for r in got.rows]
    assert len(set(ids)) == 10
    copies = [r for r in got.rows if "~" in r.prompt_id]
    assert len(copies) == 3 and all(r.category == "code" for r in copies)
    c = copies[0]
    original = c.prompt_id.split("~")[0]
    assert c.prompt == f"prompt {original}"
    assert c.content_note.startswith(f"copy {c.prompt_id.split('~')[1]} of row {original!r}")
    assert any("3 rows are copies" in n for n in got.notes)
    # written and read back: a valid traffic file with unique prompt_ids
    out = tmp_path / "mixed.parquet"
    write_rows(got.rows, out, t)
    assert load_traffic(out).summary()["categories"] == {"chat": 5, "code": 5}


def test_mix_leaves_out_unnamed_categories_and_refuses_unknown_ones(tmp_path):
    t = load_traffic(write(tmp_path, standalone()))
    assert mix_rows(t, {"code": 1.0}, 3).counts() == {"code": 3}
    with pytest.raises(MixError, match=r"category 'prose' not in the traffic \(it has: chat, code\)"):
        mix_rows(t, {"code": 0.5, "prose": 0.5}, 4)


def test_mix_keeps_the_arrival_clock(tmp_path):
    rows = [
        row(f"code-{i}" if i % 2 else f"chat-{i}", "code" if i % 2 else "chat", arrival_ms=1000.0 * i)
        for i in range(10)
    ]
    t = load_traffic(write(tmp_path, rows))
    got = mix_rows(t, {"code": 0.8, "chat": 0.2}, 19, seed=2)
    # 19 units on the quantiles of the 10 start times 0..9 s: every 0.5 s
    assert [r.arrival_ms for r in got.rows] == pytest.approx([500.0 * i for i in range(19)])
    assert got.counts() == {"code": 15, "chat": 4}  # 19 x 0.8 = 15.2, 19 x 0.2 = 3.8: largest remainder
    assert any("keeps its shape" in n for n in got.notes)


def test_mix_copies_sessions_whole_with_a_new_session_id(tmp_path):
    t = load_traffic(write(tmp_path, sessions(1, 2, "code") + standalone(codes=0, chats=2)))
    got = mix_rows(t, {"code": 0.5, "chat": 0.5}, 8, seed=0)  # 4 code rows: the session and one copy of it
    by_session: dict = {}
    for r in got.rows:
        if r.session_id is not None:
            by_session.setdefault(r.session_id, []).append((r.turn_index, r.prompt_id))
    assert sorted(by_session) == ["s0", "s0~1"]
    assert sorted(by_session["s0~1"]) == [(0, "s0-t0~1"), (1, "s0-t1~1")]
    assert len(units_of(got.rows)) == 6  # 2 sessions + 4 standalone chat rows (2 of them copies)


# ------------------------------------------------------------------ CLI
def test_inspect_cli_text_and_json(tmp_path):
    path = write(tmp_path, standalone())
    res = CliRunner().invoke(inspect_cmd, [str(path)])
    assert res.exit_code == 0, res.output
    assert "chat                           6   60.0%" in res.output
    res = CliRunner().invoke(inspect_cmd, [str(path), "--json"])
    assert json.loads(res.output)["category_shares"] == {"chat": 0.6, "code": 0.4}


def test_inspect_cli_names_a_bad_file(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt_id": "a"}\n')
    res = CliRunner().invoke(inspect_cmd, [str(bad)])
    assert res.exit_code == 1 and "bad.jsonl, row 1" in res.output


def test_draw_cli_writes_a_seeded_subset(tmp_path):
    path = write(tmp_path, standalone())
    out = tmp_path / "s.jsonl"
    res = CliRunner().invoke(draw_cmd, [str(path), "-n", "5", "-o", str(out), "--by-category", "--seed", "2"])
    assert res.exit_code == 0, res.output
    assert "5 rows written to" in res.output and "chat 3 (60.0%), code 2 (40.0%)" in res.output
    assert len(load_traffic(out).rows) == 5


def test_traffic_sample_is_the_hidden_old_name_of_draw(tmp_path):
    from specdec.cli.traffic import traffic

    path = write(tmp_path, standalone())
    listed = CliRunner().invoke(traffic, ["--help"])
    assert " draw " in listed.output and " sample " not in listed.output
    out = tmp_path / "old.jsonl"
    res = CliRunner().invoke(traffic, ["sample", str(path), "-n", "5", "-o", str(out), "--seed", "2"])
    assert res.exit_code == 0, res.output
    assert "deprecated" in res.output.lower() and "specdec traffic draw" in res.output
    again = tmp_path / "new.jsonl"
    assert CliRunner().invoke(traffic, ["draw", str(path), "-n", "5", "-o", str(again), "--seed", "2"]).exit_code == 0
    assert [r.prompt_id for r in load_traffic(out).rows] == [r.prompt_id for r in load_traffic(again).rows]


def test_mix_cli_writes_and_says_what_it_copied(tmp_path):
    path = write(tmp_path, standalone(codes=2, chats=8))
    out = tmp_path / "m.parquet"
    res = CliRunner().invoke(mix_cmd, [str(path), "--mix", "code=0.5,chat=0.5", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "10 rows written to" in res.output and "note: 3 rows are copies" in res.output
    assert load_traffic(out).summary()["categories"] == {"chat": 5, "code": 5}


@pytest.mark.parametrize(
    "mix, says",
    [
        ("code=0.3,chat=0.6", "the shares must sum to 1"),
        ("code=0.5,prose=0.5", "category 'prose' not in the traffic"),
    ],
)
def test_mix_cli_names_the_option(tmp_path, mix, says):
    path = write(tmp_path, standalone())
    res = CliRunner().invoke(mix_cmd, [str(path), "--mix", mix, "-o", str(tmp_path / "m.jsonl")])
    assert res.exit_code == 2
    assert "Invalid value for '--mix'" in res.output and says in res.output
    assert not (tmp_path / "m.jsonl").exists()


def test_output_must_not_overwrite_the_input(tmp_path):
    path = write(tmp_path, standalone())
    res = CliRunner().invoke(draw_cmd, [str(path), "-n", "2", "-o", str(path)])
    assert res.exit_code == 1 and "is the input file" in res.output
