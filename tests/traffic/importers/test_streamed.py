"""The streamed import (``import_to_file``: two passes, batches of column
buffers) writes exactly the rows the in-memory import returns, in batches
smaller than the file too; rows of one length bucket share content that is
within each row's own tolerance, and the note says so."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from specdec.schemas.arrow import table_from_records
from specdec.schemas.records import TrafficRow
from specdec.traffic.importers import ImportOptions, import_to_file, import_trace, writer
from specdec.traffic.io import load_traffic


@pytest.mark.parametrize(
    "fmt, name, opts",
    [
        ("azure", "azure_conv_excerpt.csv", {}),
        ("burstgpt", "burstgpt_sessions.csv", {"mix": {"chat": 0.5, "code": 0.5}}),
        ("mooncake", "mooncake_small.jsonl", {"category": "code"}),
    ],
)
def test_streamed_file_equals_the_in_memory_rows(traces, counter, tmp_path, monkeypatch, fmt, name, opts):
    """Read back, the file gives the in-memory rows; written with every prompt
    whole (``blocks=False``: format version 2) it is that table exactly."""
    monkeypatch.setattr(writer, "BATCH", 3)
    memory = import_trace(fmt, traces / name, ImportOptions(**opts), counter=counter)
    out, whole = tmp_path / "t.parquet", tmp_path / "whole.parquet"
    streamed = import_to_file(fmt, traces / name, ImportOptions(**opts), out, counter=counter)
    assert load_traffic(out).rows == memory.rows
    assert streamed.lines() == memory.lines()
    import_to_file(fmt, traces / name, ImportOptions(**opts), whole, counter=counter, blocks=False)
    assert pq.read_table(whole).equals(table_from_records(TrafficRow, memory.rows))


def test_rows_of_one_bucket_share_content_within_their_own_tolerance(tmp_path, counter):
    path = tmp_path / "azure_conv.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:17:03.0000000,201,5\n2023-11-16 18:17:04.0000000,206,5\n"
    )
    a, b = import_trace("azure", path, ImportOptions(), counter=counter).rows
    assert a.prompt == b.prompt
    na, nb = json.loads(a.content_note), json.loads(b.content_note)
    assert (na["target_tokens"], nb["target_tokens"], na["composed_for"]) == (201, 206, 204)
    assert na["reached_tokens"] == counter.chat(a.chat())
    assert all(abs(n["reached_tokens"] - n["target_tokens"]) <= n["tolerance"] for n in (na, nb))


def test_long_rows_end_a_batch_by_characters_and_the_file_is_zstd(traces, counter, tmp_path, monkeypatch):
    monkeypatch.setattr(writer, "BATCH_CHARS", 5000)  # each Mooncake row of the fixture holds 1,400-5,000 characters
    opts = ImportOptions(category="code")
    memory = import_trace("mooncake", traces / "mooncake_small.jsonl", opts, counter=counter)
    out = tmp_path / "t.parquet"
    import_to_file("mooncake", traces / "mooncake_small.jsonl", opts, out, counter=counter, blocks=False)
    meta = pq.ParquetFile(out).metadata
    assert pq.read_table(out).equals(table_from_records(TrafficRow, memory.rows))
    assert 2 <= meta.num_row_groups < 5 and meta.row_group(0).column(0).compression == "ZSTD"
