"""Taking a run's rounds from an external capture folder (replay/capture_import.py): the
polls count this run's rows from the id column, reading a file again only when it changed,
and the copy is one file written a row group at a time."""

import os

import pyarrow.parquet as pq

from specdec.replay import capture_import
from specdec.replay.capture_import import _Counts, import_capture
from specdec.runfolder import capture_dir
from specdec.schemas.arrow import table_from_records
from specdec.schemas.records import RoundTrace
from tests.support.synthetic_run import round_row


def _part(path, ids: list[str], row_group_size: int | None = None) -> None:
    rows = [round_row(rid, 7, step, step, 4, 2) for step, rid in enumerate(ids)]
    pq.write_table(table_from_records(RoundTrace, rows), path, row_group_size=row_group_size)


def test_a_poll_reads_a_file_again_only_when_it_changed(tmp_path, monkeypatch):
    _part(tmp_path / "rounds-7-abcd-000000.parquet", ["chatcmpl-sd.run1.a-0", "chatcmpl-other-1"])
    _part(tmp_path / "rounds-7-abcd-000001.parquet", ["chatcmpl-sd.run1.b-0"])
    counts = _Counts(tmp_path, "sd.run1.")
    assert counts.poll() == (2, [])
    reads = []
    real = capture_import.pq.ParquetFile
    monkeypatch.setattr(capture_import.pq, "ParquetFile", lambda *a, **k: reads.append(a[0]) or real(*a, **k))
    assert counts.poll() == (2, []) and reads == []  # nothing changed: nothing read
    later = tmp_path / "rounds-7-abcd-000002.parquet"
    _part(later, ["chatcmpl-sd.run1.c-0", "chatcmpl-sd.run1.c-0"])
    assert counts.poll() == (4, []) and reads == [later]  # only the new file
    os.remove(later)
    assert counts.poll() == (2, [])  # a file gone no longer counts


def test_the_copy_holds_this_runs_rows_of_every_row_group_and_names_what_it_skipped(tmp_path):
    cap = tmp_path / "cap"
    cap.mkdir()
    ids = [f"chatcmpl-sd.run1.r{i}-0" if i % 3 else f"chatcmpl-elsewhere-{i}" for i in range(30)]
    _part(cap / "rounds-7-abcd-000000.parquet", ids, row_group_size=4)  # 8 row groups
    (cap / "rounds-8-ffff-000000.parquet").write_bytes(b"PAR1 truncated")
    entry = import_capture(cap, tmp_path / "run", "run1", "sd.run1.", wait_s=0.0)
    assert entry["rows"] == 20 and entry["skipped_files"][0].startswith("rounds-8-ffff-000000.parquet (")
    (copied,) = capture_dir(tmp_path / "run").iterdir()
    table = pq.read_table(copied)
    assert table.column("engine_request_id").to_pylist() == [i for i in ids if "sd.run1." in i]
    assert set(table.column("run_id").to_pylist()) == {"run1"}
    assert table.schema.metadata[b"record"] == b"RoundTrace"


def test_no_rows_of_the_run_write_no_file_and_say_where_was_looked(tmp_path):
    cap = tmp_path / "cap"
    cap.mkdir()
    _part(cap / "rounds-7-abcd-000000.parquet", ["chatcmpl-elsewhere-0"])
    entry = import_capture(cap, tmp_path / "run", "run1", "sd.run1.", wait_s=0.0)
    assert entry["rows"] == 0 and "SPECDEC_CAPTURE_DIR" in entry["note"]
    assert not capture_dir(tmp_path / "run").exists()


def test_a_part_of_an_older_version_the_analytics_read_counts_and_an_unknown_one_is_named(tmp_path):
    """A capture plugin of the previous schema version (its rounds' columns unchanged) still
    feeds the run; a part of a version no reader here knows is skipped with its version said."""
    for name, version in (("rounds-7-abcd-000000.parquet", b"2"), ("rounds-7-abcd-000001.parquet", b"9")):
        table = table_from_records(RoundTrace, [round_row("chatcmpl-sd.run1.a-0", 7, 0, 0, 4, 2)])
        pq.write_table(
            table.replace_schema_metadata({**table.schema.metadata, b"schema_version": version}), tmp_path / name
        )
    assert _Counts(tmp_path, "sd.run1.").poll() == (1, ["rounds-7-abcd-000001.parquet (schema_version 9)"])
