"""Texts held as UTF-8 pieces (``importers.utf8``) make the same Arrow
column as the same texts given as ``str``; the writer's thread hands its
failures back and leaves no file."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from specdec.traffic.importers import writer
from specdec.traffic.importers.utf8 import Utf8Parts, plain, string_array


def test_parts_are_their_joined_text():
    t = Utf8Parts(("Héllo ".encode(), "世界".encode(), b"!"))
    assert str(t) == "Héllo 世界!" and len(t) == 7 + 6 + 1  # bytes, not characters
    assert t == "Héllo 世界!" and t == Utf8Parts(("Héllo 世界!".encode(),)) and t != "Hello"
    assert plain(t) == "Héllo 世界!" and plain("x") == "x" and plain(None) is None


def test_a_column_of_parts_equals_the_column_of_strings():
    texts = ["abc", None, "中文 and English", "", None, "z" * 1000]
    mixed = [
        None if s is None else Utf8Parts(tuple(c.encode() for c in s)) if i % 2 else s for i, s in enumerate(texts)
    ]
    got = string_array(mixed)
    assert isinstance(got, pa.Array) and got.null_count == 2
    assert got.equals(pa.array(texts, pa.string())) and got.to_pylist() == texts


def test_a_column_without_parts_is_left_to_arrow():
    values = ["a", None]
    assert string_array(values) is values


def _rows(n):
    for i in range(n):
        yield {
            "prompt_id": f"r{i}",
            "category": "chat",
            "prompt": Utf8Parts((b"hi ", str(i).encode())),
            "max_tokens": 4,
            "temperature": 0.0,
        }


def test_rows_given_as_parts_are_written_and_read_back(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    monkeypatch.setattr(writer, "BATCH", 2)
    out = tmp_path / "t.parquet"
    assert writer.write_batches(_rows(5), out) == 5
    table = pq.read_table(out)
    assert table.column("prompt").to_pylist() == [f"hi {i}" for i in range(5)]
    assert pq.ParquetFile(out).metadata.num_row_groups == 3


def test_a_failure_in_the_writing_thread_is_raised_and_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(writer, "BATCH", 2)
    calls = []
    real = writer._flush

    def failing(w, tmp, schema, cols, *rest):
        calls.append(len(cols["prompt"]))
        if len(calls) == 2:
            raise OSError("disk full")
        return real(w, tmp, schema, cols, *rest)

    monkeypatch.setattr(writer, "_flush", failing)
    out = tmp_path / "t.parquet"
    with pytest.raises(OSError, match="disk full"):
        writer.write_batches(_rows(9), out)
    assert not out.exists() and list(tmp_path.iterdir()) == []
    assert not [t for t in threading.enumerate() if t.name == "traffic-writer"]


def test_a_failure_while_composing_stops_the_thread_and_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(writer, "BATCH", 2)

    def rows():
        yield from _rows(5)
        raise ValueError("row 6 is malformed")

    out = tmp_path / "t.parquet"
    with pytest.raises(ValueError, match="row 6"):
        writer.write_batches(rows(), out)
    assert not out.exists() and list(tmp_path.iterdir()) == []
    assert not [t for t in threading.enumerate() if t.name == "traffic-writer"]
