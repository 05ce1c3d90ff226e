"""``specdec analytics build RUN_DIR``: load a run's Parquet files into
``RUN_DIR/specdec.duckdb`` and create the SQL models over them.

Raw tables (``raw_rounds``, ``raw_requests``, ``raw_engine_counters``,
``raw_manifest``) are copies of the files, so the database is self-contained:
an analyst can open it from a notebook after the run folder has moved. Every
model is a view, so its definition is visible with ``duckdb_views()``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from specdec.analytics.models import discover
from specdec.errors import InputFileError, SpecdecError
from specdec.schemas.arrow import arrow_schema
from specdec.schemas.records import SCHEMA_VERSION, MetricSnapshot, RequestResult, RoundTrace

DB_NAME = "specdec.duckdb"
# raw table -> (consolidated file, part-file glob of an interrupted run, record)
SOURCES = {
    "raw_rounds": ("rounds.parquet", "capture/rounds-*.parquet", RoundTrace),
    "raw_requests": ("requests.parquet", "requests/*.parquet", RequestResult),
    "raw_engine_counters": ("engine_counters.parquet", "engine_counters-*.parquet", MetricSnapshot),
}


def load_source(run_dir: Path, consolidated: str, pattern: str, model) -> pa.Table:
    """Read a record type's files, checking version and columns; an absent
    file gives an empty table with the right schema."""
    schema = arrow_schema(model)
    files = [run_dir / consolidated] if (run_dir / consolidated).exists() else sorted(run_dir.glob(pattern))
    tables = []
    for f in files:
        try:
            meta = pq.read_schema(f)
        except Exception as exc:
            raise InputFileError(f, f"not a readable Parquet file ({exc})") from None
        version = (meta.metadata or {}).get(b"schema_version", b"").decode() or None
        if version != SCHEMA_VERSION:
            raise InputFileError(f, f"schema_version is {version!r}, this specdec reads {SCHEMA_VERSION!r}")
        missing = [n for n in schema.names if n not in meta.names]
        if missing:
            raise InputFileError(f, "missing column(s)", field=", ".join(missing))
        try:
            tables.append(pq.read_table(f, columns=schema.names).cast(schema))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise InputFileError(f, f"a column has the wrong type ({exc})") from None
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables)


def build(run_dir: Path, db_path: Path | None = None) -> Path:
    import duckdb

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise SpecdecError(f"{run_dir}: no such run folder")
    manifest_path = run_dir / "manifest.json"
    if not manifest_path.is_file():
        raise InputFileError(manifest_path, "missing: is this a specdec run folder?")
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError as exc:
        raise InputFileError(manifest_path, f"invalid JSON ({exc.msg}, line {exc.lineno})") from None

    db_path = db_path or run_dir / DB_NAME
    tmp = db_path.with_name(f".{db_path.name}.tmp")
    if tmp.exists():
        tmp.unlink()
    con = duckdb.connect(str(tmp))
    try:
        for table, (consolidated, pattern, model) in SOURCES.items():
            arrow = load_source(run_dir, consolidated, pattern, model)  # noqa: F841 (read by DuckDB)
            con.execute(f"create table {table} as select * from arrow")
        con.execute("create table raw_manifest (manifest json)")
        con.execute("insert into raw_manifest values (?)", [json.dumps(manifest)])
        for m in discover():
            try:
                con.execute(f"create view {m.name} as\n{m.sql}")
            except duckdb.Error as exc:
                raise SpecdecError(f"{m.path}: {exc}") from None
    finally:
        con.close()
    os.replace(tmp, db_path)
    return db_path
