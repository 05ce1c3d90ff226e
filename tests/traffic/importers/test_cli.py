"""``specdec traffic import`` through click's CliRunner: writes a traffic file
that load_traffic reads, prints the summary, and reports errors cleanly."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from specdec.cli.traffic import traffic
from specdec.traffic import importers
from specdec.traffic.io import load_traffic
from tests.support.fake_counter import FakeCounter


@pytest.fixture(autouse=True)
def fake_tokenizer(monkeypatch):
    monkeypatch.setattr(importers, "default_counter", FakeCounter)


def test_import_writes_a_traffic_file_that_loads(traces, tmp_path):
    out = tmp_path / "traffic.parquet"
    r = CliRunner().invoke(
        traffic,
        [
            "import",
            "mooncake",
            str(traces / "mooncake_small.jsonl"),
            "-o",
            str(out),
            "--mix",
            "code=0.5,chat=0.5",
            "--end-s",
            "60",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "mooncake: read 5 rows" in r.output and "kept 4; skipped: 0 malformed, 1 outside the window" in r.output
    assert "max_tokens clamped to 1 (recorded output 0): 1 rows" in r.output
    assert "time span: 3.052 s" in r.output and f"wrote {out} (4 rows)" in r.output
    rows = load_traffic(out).rows
    assert [r.arrival_ms for r in rows] == [0.0, 0.0, 1500.0, 3052.0]
    assert {r.source for r in rows} == {"mooncake"} and all(r.content_note for r in rows)
    assert [r.max_tokens for r in rows] == [52, 20, 1, 31]


def test_whole_prompts_writes_version_2_with_the_same_rows(traces, tmp_path):
    import pyarrow.parquet as pq

    outs = [tmp_path / "v3.parquet", tmp_path / "v2.parquet"]
    for out, extra in zip(outs, ([], ["--whole-prompts"])):
        args = ["import", "mooncake", str(traces / "mooncake_small.jsonl"), "-o", str(out), "--category", "code"]
        r = CliRunner().invoke(traffic, args + extra)
        assert r.exit_code == 0, r.output
    assert "prompt_blocks" in pq.read_schema(outs[0]).names and "prompt_blocks" not in pq.read_schema(outs[1]).names
    assert load_traffic(outs[0]).rows == load_traffic(outs[1]).rows


def test_azure_excerpt_through_the_cli(traces, tmp_path):
    out = tmp_path / "t.parquet"
    r = CliRunner().invoke(
        traffic,
        [
            "import",
            "azure",
            str(traces / "azure_conv_excerpt.csv"),
            "-o",
            str(out),
            "--keep-fraction",
            "0.5",
            "--seed",
            "7",
        ],
    )
    assert r.exit_code == 0, r.output
    rows = load_traffic(out).rows
    assert 1 <= len(rows) <= 12 and {r.category for r in rows} == {"chat"}
    assert "thinned out (--keep-fraction 0.5, seeded hash, seed 7)" in r.output


def test_malformed_row_is_a_clean_error(tmp_path):
    bad = tmp_path / "b.csv"
    bad.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,x,490,Conversation log\n"
    )
    r = CliRunner().invoke(
        traffic, ["import", "burstgpt", str(bad), "-o", str(tmp_path / "o.parquet"), "--category", "chat"]
    )
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert f"{bad}, row 2, field 'Response tokens'" in r.output
    assert not (tmp_path / "o.parquet").exists()


def test_option_errors(traces, tmp_path):
    path = str(traces / "mooncake_small.jsonl")
    out = str(tmp_path / "o.parquet")
    r = CliRunner().invoke(traffic, ["import", "mooncake", path, "-o", out, "--mix", "code=0.3,chat"])
    assert r.exit_code == 2 and "--mix" in r.output and "'chat' is not category=share" in r.output
    r = CliRunner().invoke(traffic, ["import", "mooncake", path, "-o", out, "--category", "code", "--mix", "chat=1"])
    assert r.exit_code == 1 and "not both" in r.output
    r = CliRunner().invoke(traffic, ["import", "mooncake", path, "-o", out, "--keep-fraction", "0"])
    assert r.exit_code == 2 and "--keep-fraction" in r.output
    old = CliRunner().invoke(traffic, ["import", "mooncake", path, "-o", out, "--sample", "0"])  # the former name
    assert old.exit_code == 2 and "--keep-fraction" in old.output
    r = CliRunner().invoke(traffic, ["import", "csv", path, "-o", out])
    assert r.exit_code == 2


def test_the_group_also_holds_the_other_traffic_commands():
    assert {"import", "inspect", "draw", "mix"} <= set(traffic.commands)
