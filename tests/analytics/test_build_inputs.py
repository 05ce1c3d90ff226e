"""Bad run folders give named errors (file, row group or row, column), never a
traceback or an empty report; builds are atomic and leave no temporary files."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specdec.analytics import build as build_mod
from specdec.analytics.build import build
from specdec.analytics.sql_models import SqlModel
from specdec.errors import InputFileError, SpecdecError
from specdec.runfolder import DB_NAME, RECORD_FILES
from specdec.schemas.arrow import table_from_records, write_parquet_atomic
from specdec.schemas.records import RequestResult
from tests.support.synthetic_run import make_requests


def leftovers(run_dir: Path) -> list[str]:
    """Anything a build may leave behind: temp names, DuckDB's .wal and spill dir."""
    return sorted(p.name for p in run_dir.iterdir() if p.name.startswith(".") or p.name.endswith((".tmp", ".wal")))


def test_every_record_file_loads_into_its_raw_table(run_dir):
    db = build(run_dir)
    con = duckdb.connect(str(db), read_only=True)
    try:
        for rec in RECORD_FILES:
            cols = [r[0] for r in con.execute(f"describe {rec.raw_table}").fetchall()]
            assert cols == list(rec.record().model_fields), rec.name
        # the fixture has no stability file: an empty table with the right schema
        assert con.execute("select count(*) from raw_stability").fetchone() == (0,)
        manifest = json.loads(con.execute("select manifest from raw_manifest").fetchone()[0])
        assert manifest["run_id"] == "t" and manifest["max_error_rate"] == 0.05
    finally:
        con.close()


def test_missing_requests_file_is_named(run_dir):
    (run_dir / "requests.parquet").unlink()
    with pytest.raises(InputFileError) as exc:
        build(run_dir)
    msg = str(exc.value)
    assert str(run_dir / "requests.parquet") in msg and "requests/*.parquet" in msg
    assert not (run_dir / DB_NAME).exists()


def test_request_part_files_stand_in_for_the_consolidated_file(run_dir):
    (run_dir / "requests.parquet").unlink()
    (run_dir / "requests").mkdir()
    reqs = make_requests()
    for arm in ("baseline", "speculative"):
        part = [r for r in reqs if r.arm == arm]
        write_parquet_atomic(table_from_records(RequestResult, part), run_dir / "requests" / f"{arm}-c001.parquet")
    con = duckdb.connect(str(build(run_dir)), read_only=True)
    assert con.execute("select count(*) from stg_requests").fetchone() == (8,)
    con.close()


def test_truncated_parquet_file_is_named(run_dir):
    path = run_dir / "rounds.parquet"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputFileError, match="not a readable Parquet file") as exc:
        build(run_dir)
    assert str(path) in str(exc.value)


def test_corrupted_row_group_is_named_although_the_footer_reads(run_dir):
    path = run_dir / "requests.parquet"
    data = bytearray(path.read_bytes())
    first = pq.ParquetFile(path).metadata.row_group(0).column(0).data_page_offset
    data[4 : first + 400] = b"\xff" * (first + 396)  # page headers of the first columns
    path.write_bytes(bytes(data))
    assert pq.read_schema(path).names[0] == "run_id"  # the footer is intact
    with pytest.raises(InputFileError, match="row group 0 of 1 cannot be read") as exc:
        build(run_dir)
    assert str(path) in str(exc.value) and "\n" not in str(exc.value)


def test_null_in_a_required_column_names_file_column_and_row(run_dir):
    path = run_dir / "requests.parquet"
    table = pq.read_table(path)
    i = table.schema.get_field_index("category")
    values = table.column(i).to_pylist()
    values[2] = values[5] = None
    table = table.set_column(i, pa.field("category", pa.string(), nullable=True), pa.array(values, pa.string()))
    pq.write_table(table, path)
    with pytest.raises(InputFileError) as exc:
        build(run_dir)
    msg = str(exc.value)
    assert msg.startswith(f"{path}, row 2, field 'category': 2 null value(s) in a required column")


def test_malformed_manifest_is_named(run_dir):
    path = run_dir / "manifest.json"
    data = json.loads(path.read_text())
    del data["dtype"]
    path.write_text(json.dumps(data))
    with pytest.raises(InputFileError, match="field 'dtype'") as exc:
        build(run_dir)
    assert str(path) in str(exc.value)
    path.write_text("{not json")
    with pytest.raises(InputFileError, match="invalid JSON"):
        build(run_dir)


def test_a_failed_build_leaves_no_temporary_files_and_keeps_the_old_database(run_dir, monkeypatch):
    db = build(run_dir)
    before = db.read_bytes()
    broken = SqlModel("broken", "marts", Path("marts/broken.sql"), "select * from no_such_table", frozenset())
    monkeypatch.setattr(build_mod, "discover", lambda: [broken])
    with pytest.raises(SpecdecError, match="broken.sql"):
        build(run_dir)
    assert leftovers(run_dir) == []
    assert db.read_bytes() == before


def test_two_builds_of_the_same_folder_at_once_both_succeed(run_dir):
    errors: list[BaseException] = []
    start = threading.Barrier(3)

    def one_build():
        try:
            start.wait()
            build(run_dir)
        except BaseException as exc:  # noqa: BLE001 (collected for the assertion)
            errors.append(exc)

    for _ in range(2):  # two rounds: the second replaces an existing database
        threads = [threading.Thread(target=one_build) for _ in range(3)]
        start.reset()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    assert leftovers(run_dir) == []
    con = duckdb.connect(str(run_dir / DB_NAME), read_only=True)
    try:
        views = {r[0] for r in con.execute("select view_name from duckdb_views() where not internal").fetchall()}
        assert {"speedup", "level_health", "output_equality", "reconciliation"} <= views
        assert con.execute("select count(*) from speedup").fetchone() == (6,)
    finally:
        con.close()


def test_a_single_flipped_byte_inside_a_data_page_is_a_named_error(run_dir):
    """A one-bit flip in a column's last page (page headers intact) is named.
    With Snappy pages the decompressor usually notices first; page checksums
    (written since this change) also catch flips that would still decode."""
    path = run_dir / "requests.parquet"
    meta = pq.ParquetFile(path).metadata
    col = next(
        meta.row_group(0).column(i)
        for i in range(meta.num_columns)
        if meta.row_group(0).column(i).path_in_schema == "output_text"
    )
    data = bytearray(path.read_bytes())
    end = (col.dictionary_page_offset or col.data_page_offset) + col.total_compressed_size
    data[end - 3] ^= 0x01  # inside the last page's values, not its header
    path.write_bytes(bytes(data))
    with pytest.raises(InputFileError) as exc:
        build(run_dir)
    assert str(path) in str(exc.value)
