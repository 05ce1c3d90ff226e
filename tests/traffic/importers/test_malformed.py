"""Malformed rows are refused by file, row and field, or skipped and counted
with --skip-bad. CSV rows count the header as row 1; JSON Lines rows are line
numbers."""

from __future__ import annotations

import re

import pytest

from specdec.errors import InputFileError
from specdec.traffic.importers import ImportOptions, import_trace

AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:17:03.9799600,4808,10
2023-11-16 18:17:04.0319600,3180,8
yesterday,110,27
2023-11-16 18:17:04.1206440,-5,14
2023-11-16 18:17:04.4249540,34
2023-11-16 18:17:04.5191470,374,14.0
2023-11-16 18:17:04.6785310,6985,9
"""


def refused(fmt, path, **opts) -> InputFileError:
    with pytest.raises(InputFileError) as info:
        import_trace(fmt, path, ImportOptions(**opts), counter=None)
    return info.value


def test_azure_refuses_the_first_malformed_row_by_number_and_field(tmp_path):
    path = tmp_path / "azure_code.csv"
    path.write_text(AZURE)
    err = refused("azure", path)
    assert (err.row, err.field) == (4, "TIMESTAMP")
    assert str(err).startswith(f"{path}, row 4, field 'TIMESTAMP': expected a datetime")
    assert "--skip-bad" in str(err)


def test_azure_skip_bad_skips_and_counts_each_reason(tmp_path, counter):
    path = tmp_path / "azure_code.csv"
    path.write_text(AZURE)
    report = import_trace("azure", path, ImportOptions(skip_bad=True), counter=counter)
    assert [r.prompt_id for r in report.rows] == ["azure-llm-2023-r2", "azure-llm-2023-r3", "azure-llm-2023-r8"]
    assert report.read == 7 and sum(report.malformed.values()) == 4
    text = "\n".join(report.lines())
    assert "kept 3; skipped: 4 malformed" in text
    assert "row 4, field 'TIMESTAMP'" in text and "row 5, field 'ContextTokens'" in text
    assert re.search(r"1 x expected 3 fields as in the header, got 2", text)
    assert re.search(r"1 x GeneratedTokens: expected a whole number of tokens >= 0, got '14.0'", text)


def test_a_missing_column_refuses_the_file_even_with_skip_bad(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("TIMESTAMP,ContextTokens,Tokens\n2023-11-16 18:17:03.9799600,4808,10\n")
    err = refused("azure", path, skip_bad=True)
    assert (err.row, err.field) == (1, "GeneratedTokens") and "missing column" in str(err)


MOONCAKE = """{"timestamp": 0, "input_length": 655, "output_length": 52, "hash_ids": [46, 47]}

{"timestamp": 10535, "input_length": 672, "output_length": 26, "hash_ids": [46, 47]
{"timestamp": -3, "input_length": 672, "output_length": 26, "hash_ids": [46]}
{"timestamp": 20000, "input_length": "672", "output_length": 26, "hash_ids": [46]}
{"timestamp": 21000, "input_length": 672, "output_length": true, "hash_ids": [46]}
{"timestamp": 22000, "input_length": 672, "output_length": 26, "hash_ids": [46, "x"]}
{"timestamp": 27482, "input_length": 655, "output_length": 52, "hash_ids": [46, 47]}
[1, 2]
"""


def test_mooncake_rows_are_line_numbers(tmp_path, counter):
    path = tmp_path / "m.jsonl"
    path.write_text(MOONCAKE)
    err = refused("mooncake", path, category="chat")
    assert err.row == 3 and "invalid JSON" in str(err)  # the blank line 2 counts
    report = import_trace("mooncake", path, ImportOptions(skip_bad=True, category="chat"), counter=counter)
    assert [r.prompt_id for r in report.rows] == ["mooncake-r1", "mooncake-r8"]
    assert sum(report.malformed.values()) == 6
    assert [m.split(":")[0] for m in report.first_malformed] == [  # the first three are shown
        "row 3, field None",
        "row 4, field 'timestamp'",
        "row 5, field 'input_length'",
    ]
    assert report.malformed["timestamp: expected a number of ms >= 0, got -3"] == 1
    assert report.malformed['input_length: expected a whole number of tokens >= 0, got "672"'] == 1
    assert report.malformed["output_length: expected a whole number of tokens >= 0, got true"] == 1
    assert report.malformed["hash_ids: expected a list of whole numbers (prefix block ids)"] == 1
    assert report.malformed["each line must be a JSON object"] == 1


def test_burstgpt_bad_number_is_named(tmp_path):
    path = tmp_path / "b.csv"
    path.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n"
        "nan,ChatGPT,472,18,490,Conversation log\n"
    )
    err = refused("burstgpt", path, category="chat")
    assert (err.row, err.field) == (3, "Timestamp")


def test_a_file_of_only_a_header_keeps_nothing_and_writing_refuses(tmp_path, counter):
    from specdec.traffic.importers import write_traffic

    path = tmp_path / "b.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n")
    report = import_trace("burstgpt", path, ImportOptions(category="chat"), counter=counter)
    assert report.rows == [] and report.read == 0
    with pytest.raises(InputFileError, match="no row was kept"):
        write_traffic(report, tmp_path / "out.parquet")


@pytest.mark.parametrize("ids", ["[46, true]", "[46, 2.0]", '"46"', "[46, null]", "[[46]]"])
def test_mooncake_hash_ids_must_be_whole_numbers(tmp_path, ids):
    path = tmp_path / "m.jsonl"
    path.write_text(
        '{"timestamp": 0, "input_length": 655, "output_length": 52, "hash_ids": [46, 47]}\n'
        f'{{"timestamp": 5, "input_length": 655, "output_length": 52, "hash_ids": {ids}}}\n'
    )
    err = refused("mooncake", path, category="chat")
    assert (err.row, err.field) == (2, "hash_ids")
