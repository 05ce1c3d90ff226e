"""Issue 24: every number an importer reads is range-checked, by file, row
and field, and ``--skip-bad`` skips such rows; a timestamp must be finite and
within 30 days of the trace's zero; ``specdec validate`` refuses a traffic
file whose arrival_ms is beyond that bound. Each case used to end in a
traceback, an error naming no row, or an import of a 10^305-second trace."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from specdec.cli.traffic import traffic
from specdec.errors import InputFileError
from specdec.traffic import importers
from specdec.traffic.importers import ImportOptions, import_trace
from tests.support.fake_counter import FakeCounter

HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
GOOD = "2023-11-16 18:17:03.9799600,40,10\n"


@pytest.fixture(autouse=True)
def fake_tokenizer(monkeypatch):
    monkeypatch.setattr(importers, "default_counter", FakeCounter)


def _azure(tmp_path, bad_row: str):
    path = tmp_path / "azure_conv.csv"
    path.write_text(HEAD + GOOD + bad_row + GOOD)
    return path


CASES = [
    ("2023-11-16 18:17:04.0319600,99999999999999999999999,8\n", "ContextTokens", "above the bound of 100,000,000"),
    ("2023-11-16 18:17:04.0319600,40,99999999999\n", "GeneratedTokens", "above the bound of 1,000,000"),
    ("2024-01-16 18:17:04.0319600,40,8\n", "TIMESTAMP", "within 30 days"),  # 61 days after the first row
]


@pytest.mark.parametrize("bad, field, says", CASES)
def test_an_azure_number_out_of_range_is_refused_by_file_row_and_field(tmp_path, counter, bad, field, says):
    path = _azure(tmp_path, bad)
    with pytest.raises(InputFileError) as info:
        import_trace("azure", path, ImportOptions(), counter=counter)
    assert (info.value.row, info.value.field) == (3, field)
    assert str(info.value).startswith(f"{path}, row 3, field '{field}': ") and says in str(info.value)


@pytest.mark.parametrize("bad, field, says", CASES)
def test_skip_bad_skips_and_counts_the_out_of_range_row(tmp_path, counter, bad, field, says):
    report = import_trace("azure", _azure(tmp_path, bad), ImportOptions(skip_bad=True), counter=counter)
    assert len(report.rows) == 2 and sum(report.malformed.values()) == 1
    assert report.first_malformed[0].startswith(f"row 3, field '{field}'")


@pytest.mark.parametrize("bad, field, says", CASES)
def test_the_cli_names_the_row_without_a_traceback(tmp_path, bad, field, says):
    path, out = _azure(tmp_path, bad), tmp_path / "t.parquet"
    r = CliRunner().invoke(traffic, ["import", "azure", str(path), "-o", str(out)])
    assert r.exit_code == 1 and f"row 3, field '{field}'" in r.output and "Traceback" not in r.output, r.output
    assert not out.exists()
    r = CliRunner().invoke(traffic, ["import", "azure", str(path), "-o", str(out), "--skip-bad"])
    assert r.exit_code == 0, r.output
    assert "kept 2; skipped: 1 malformed" in r.output and f"wrote {out} (2 rows)" in r.output


MOONCAKE = [
    '{"timestamp": 0, "input_length": 40, "output_length": 5, "hash_ids": [1]}',
    '{"timestamp": 1e308, "input_length": 40, "output_length": 5, "hash_ids": [2]}',
    '{"timestamp": 1500, "input_length": 40, "output_length": 5, "hash_ids": [3]}',
]


def test_a_mooncake_timestamp_of_1e308_is_refused_and_skippable(tmp_path, counter):
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(MOONCAKE) + "\n")
    with pytest.raises(InputFileError) as info:
        import_trace("mooncake", path, ImportOptions(), counter=counter)
    assert (info.value.row, info.value.field) == (2, "timestamp") and "within 30 days" in str(info.value)
    report = import_trace("mooncake", path, ImportOptions(skip_bad=True, category="chat"), counter=counter)
    assert [r.arrival_ms for r in report.rows] == [0.0, 1500.0]


def test_a_burstgpt_timestamp_that_overflows_to_infinity_in_ms_is_refused(tmp_path, counter):
    path = tmp_path / "b.csv"
    path.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "0,ChatGPT,40,5,45,Conversation log\n1e307,ChatGPT,40,5,45,Conversation log\n"
    )
    with pytest.raises(InputFileError) as info:
        import_trace("burstgpt", path, ImportOptions(), counter=counter)
    assert (info.value.row, info.value.field) == (3, "Timestamp")


def test_validate_refuses_a_traffic_file_with_an_arrival_beyond_30_days(tmp_path):
    from specdec.cli.validate import validate_command

    path = tmp_path / "t.jsonl"
    rows = [
        {"prompt_id": "a", "category": "chat", "prompt": "hi", "max_tokens": 4, "arrival_ms": 0.0},
        {"prompt_id": "b", "category": "chat", "prompt": "hi", "max_tokens": 4, "arrival_ms": 1e308},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = CliRunner().invoke(validate_command, [str(path)])
    assert r.exit_code != 0 and "arrival_ms" in r.output, r.output
