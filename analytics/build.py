"""``specdec analytics build RUN_DIR``: load a run's Parquet files into
``RUN_DIR/specdec.duckdb`` and create the SQL models over them.

Every record file of the run-folder contract (``runfolder.RECORD_FILES``)
becomes a raw table ``raw_<name>`` (empty, with the record's schema, when the
run has no such file); ``raw_manifest`` holds the validated manifest as JSON.
A few tables are computed in Python rather than SQL (``COMPUTED``): the
speedup intervals ``int_speedup_intervals`` (``intervals.py``) and the
sampling-mode tests ``sampling_tests`` (``sampling_test.py``). Each module's
``create_table`` makes its table empty before the views, so the marts over it
can be created; its ``fill`` computes the rows once every view exists.
The raw tables are copies, so the database is self-contained: an analyst can
open it from a notebook after the run folder has moved. Every model is a view,
so its definition is visible with ``duckdb_views()``.

Inputs are checked before anything is written, and each problem is a named
``InputFileError`` (file, row group or row, column), never a traceback: a
missing required file, a file that is not readable Parquet (footer or any row
group), a wrong schema version, a missing or mistyped column, a null in a
column the record declares required, a malformed manifest.

The database is written under a unique temporary name beside its final name
and renamed (``runfolder.atomic_write_with``), so two builds of the same folder
at once never share a file, and a reader never sees half a database. The
temporary file and DuckDB's ``.wal`` beside it are removed on success and on
failure.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from specdec.analytics import intervals, sampling_test
from specdec.analytics import settings as analysis_settings
from specdec.analytics.models import discover
from specdec.errors import InputFileError, SpecdecError
from specdec.runfolder import DB_NAME, RECORD_FILES, RecordFile, atomic_write_with, files_of, read_manifest
from specdec.schemas.arrow import arrow_schema
from specdec.schemas.records import SCHEMA_VERSION

__all__ = ["COMPUTED", "DB_NAME", "build", "load_record_file", "read_parquet_checked"]

#: Modules that compute a table from the views, each with create_table(con) and fill(con).
COMPUTED = (intervals, sampling_test)


def _why(exc: Exception) -> str:
    """pyarrow's message on one line."""
    return " ".join(str(exc).split()) or type(exc).__name__


def read_parquet_checked(path: Path, schema: pa.Schema) -> pa.Table:
    """Read one Parquet file as ``schema``; every problem names the file and,
    where known, the row group, row and column."""
    try:
        pf = pq.ParquetFile(path, page_checksum_verification=True)
    except Exception as exc:  # pyarrow raises several types for a bad footer
        raise InputFileError(path, f"not a readable Parquet file, truncated or corrupted ({_why(exc)})") from None
    with pf:
        version = (pf.schema_arrow.metadata or {}).get(b"schema_version", b"").decode() or None
        if version != SCHEMA_VERSION:
            raise InputFileError(path, f"schema_version is {version!r}, this specdec reads {SCHEMA_VERSION!r}")
        present = set(pf.schema_arrow.names)
        missing = [n for n in schema.names if n not in present]
        if missing:
            raise InputFileError(path, "missing column(s)", field=", ".join(missing))
        groups = []
        for i in range(pf.num_row_groups):
            try:
                groups.append(pf.read_row_group(i, columns=schema.names))
            except Exception as exc:  # decompression, page header, checksum ...
                raise InputFileError(path, f"row group {i} of {pf.num_row_groups} cannot be read, "
                                           f"the file is corrupted or truncated ({_why(exc)})") from None
    table = pa.concat_tables(groups) if groups else pf.schema_arrow.empty_table().select(schema.names)
    for field, column in zip(schema, table.columns):
        if not field.nullable and column.null_count:
            first = pc.index(pc.is_null(column), True).as_py()
            raise InputFileError(path, f"{column.null_count} null value(s) in a required column "
                                       "(row counted from 0 in the file)", row=first, field=field.name)
    try:
        return table.cast(schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, ValueError) as exc:
        raise InputFileError(path, f"a column has the wrong type ({_why(exc)})") from None


def run_kind(manifest) -> str:
    """The manifest's run kind ('replay' unless it says otherwise)."""
    return getattr(manifest, "kind", None) or "replay"


def load_record_file(run_dir: Path, rec: RecordFile, kind: str = "replay",
                     files: list[Path] | None = None) -> pa.Table:
    """All rows of one record type: the consolidated file or its part files
    (``files``, when the caller has listed them: ``files_of``). An absent
    record gives an empty table with the right schema, unless a run of this
    kind must have it (``RecordFile.required_for``): then it is an error
    naming the file."""
    schema = arrow_schema(rec.record())
    files = files_of(run_dir, rec) if files is None else files
    if not files:
        if kind in rec.required_for:
            raise InputFileError(Path(run_dir) / rec.consolidated,
                                 f"missing, and no part files {rec.part_glob} either: "
                                 f"the run recorded no {rec.name} (did it start?)")
        return schema.empty_table()
    tables = [read_parquet_checked(f, schema) for f in files]
    return pa.concat_tables(tables)


def build(run_dir: Path, db_path: Path | None = None, slo: "analysis_settings.Slo | None" = None) -> Path:
    """Check every input, then write the database atomically; return its path.
    ``slo``: the latency SLO of the capacity_under_slo mart (``analytics/settings.py``;
    its defaults when None)."""
    import duckdb

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise SpecdecError(f"{run_dir}: no such run folder")
    manifest = read_manifest(run_dir)
    kind = run_kind(manifest)
    raw = {rec.raw_table: load_record_file(run_dir, rec, kind) for rec in RECORD_FILES}
    models = discover()
    db_path = Path(db_path or run_dir / DB_NAME)

    def write(tmp: Path) -> None:
        try:
            con = duckdb.connect(str(tmp))
            try:
                for table_name, arrow in raw.items():
                    con.register("_arrow", arrow)
                    con.execute(f"create table {table_name} as select * from _arrow")
                    con.unregister("_arrow")
                con.execute("create table raw_manifest (manifest json)")
                con.execute("insert into raw_manifest values (?)", [manifest.model_dump_json()])
                analysis_settings.create_table(con, slo)
                for computed in COMPUTED:
                    computed.create_table(con)
                for m in models:
                    try:
                        con.execute(f"create view {m.name} as\n{m.sql}")
                    except duckdb.Error as exc:
                        raise SpecdecError(f"{m.path}: {exc}") from None
                for computed in COMPUTED:
                    computed.fill(con)
            finally:
                con.close()
        except BaseException:
            _remove_sidecars(tmp)
            raise
        _remove_sidecars(tmp)

    atomic_write_with(db_path, write)
    return db_path


def _remove_sidecars(db_file: Path) -> None:
    """DuckDB's write-ahead log and spill folder beside a database file."""
    Path(f"{db_file}.wal").unlink(missing_ok=True)
    spill = Path(f"{db_file}.tmp")
    if spill.is_dir():
        shutil.rmtree(spill, ignore_errors=True)
