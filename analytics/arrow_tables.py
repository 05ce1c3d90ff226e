"""Record schemas (Arrow) as DuckDB columns and empty tables, the one way the build and
its computed tables make them.

Read from a stream of no batches: an empty pyarrow ``Table`` (``schema.empty_table()``),
or DuckDB's ``register`` of one, imports pandas, 0.2 s of every build's start for nothing
(measured 2026-12-02 with pyarrow 26 and DuckDB 2.0.1).
"""

from __future__ import annotations

import pyarrow as pa


def duckdb_columns(con, schema: pa.Schema) -> list[tuple[str, str]]:
    """(name, DuckDB type) of the schema's columns, as DuckDB maps the Arrow types."""
    relation = con.from_arrow(pa.RecordBatchReader.from_batches(schema, []))
    return [(name, str(dtype)) for name, dtype in zip(relation.columns, relation.types)]


def create_empty_table(con, table: str, schema: pa.Schema) -> None:
    """``create table <table>`` with the schema's columns and no rows."""
    columns = ", ".join(f'"{name}" {dtype}' for name, dtype in duckdb_columns(con, schema))
    con.execute(f"create table {table} ({columns})")
