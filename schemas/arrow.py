"""Derive Arrow schemas from the pydantic record models and write Parquet
with ``schema_version`` in the key-value metadata."""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

from specdec.atomic import atomic_write_with
from specdec.schemas.records import SCHEMA_VERSION

_SCALARS: dict[Any, pa.DataType] = {
    int: pa.int64(),
    float: pa.float64(),
    str: pa.string(),
    bool: pa.bool_(),
}


def _arrow_type(annotation: Any) -> tuple[pa.DataType, bool]:
    """Return (arrow type, nullable) for one field annotation."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:  # strict / constrained types: the base type decides
        return _arrow_type(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"unsupported union {annotation!r}")
        return _arrow_type(args[0])[0], True
    if origin is Literal:
        return pa.string(), False
    if origin is list:
        (inner,) = typing.get_args(annotation)
        return pa.list_(_arrow_type(inner)[0]), False
    if annotation in _SCALARS:
        return _SCALARS[annotation], False
    raise TypeError(f"no Arrow type for {annotation!r}")


#: Field metadata key of a column a file may lack: the record's field is nullable
#: with the default None, so a row without it is a valid record (pydantic takes
#: it), and a file written before the field existed reads it as NULL.
ABSENT_AS_NULL = b"specdec.absent_as_null"


def arrow_schema(model: type[BaseModel]) -> pa.Schema:
    """The Arrow schema of a record model, in field order, with its version.
    A nullable field whose default is None is marked ``ABSENT_AS_NULL``."""
    fields = []
    for name, info in model.model_fields.items():
        dtype, nullable = _arrow_type(info.annotation)
        optional = nullable and not info.is_required() and info.default is None
        fields.append(pa.field(name, dtype, nullable=nullable, metadata={ABSENT_AS_NULL: b"1"} if optional else None))
    return pa.schema(fields, metadata={"schema_version": SCHEMA_VERSION, "record": model.__name__})


def absent_as_null(field: pa.Field) -> bool:
    """Whether a file may lack this column (read as NULL): ``ABSENT_AS_NULL``."""
    return bool(field.metadata) and ABSENT_AS_NULL in field.metadata


#: The most Arrow (uncompressed) bytes one row group of a written Parquet file holds. A reader
#: (DuckDB, the analytics build) hands row groups to its threads, and a reader of one row group
#: holds its column chunks: pyarrow's default of up to 1,048,576 rows per group put a whole
#: run's requests (chunk-offset lists, output texts: 3-8 KB a row) in one group of gigabytes,
#: read by one thread (a 798k-request run: one group of 2.8 GiB; its build 15.4 s against 14.4 s
#: with groups of this size; BENCHMARKS.md, "Issue 21, seventh session").
ROW_GROUP_BYTES = 64 * 2**20
#: The most rows of one row group (pyarrow's default), for narrow records (a few numbers a row; a
#: round of the capture, about 190 Arrow bytes, gets groups of about 350k rows from the bound above).
ROW_GROUP_ROWS = 1 << 20


def row_group_rows(table: pa.Table) -> int:
    """Rows per row group for ``table``: as many as fit ``ROW_GROUP_BYTES`` at its mean row
    width, at least 1, at most ``ROW_GROUP_ROWS``."""
    if not table.num_rows:
        return ROW_GROUP_ROWS
    return max(1, min(ROW_GROUP_ROWS, ROW_GROUP_BYTES * int(table.num_rows) // max(int(table.nbytes), 1)))


def write_parquet_atomic(table: pa.Table, path: Path) -> None:
    """Write to a unique temporary name, fsync, then rename (see
    ``specdec.atomic.atomic_write_with``): a reader (or a crash) never sees a
    half-written file under the final name. Row groups hold at most
    ``ROW_GROUP_BYTES`` (``row_group_rows``)."""
    atomic_write_with(
        Path(path),
        lambda tmp: pq.write_table(table, tmp, row_group_size=row_group_rows(table), write_page_checksum=True),
    )


def write_batches_atomic(batches: Iterable[pa.RecordBatch | pa.Table], schema: pa.Schema, path: Path) -> int:
    """Write ``batches`` (each of ``schema``), in order, into one file at ``path``, atomically as
    ``write_parquet_atomic`` does; return the rows written. Memory holds one pending row group:
    batches are gathered into row groups of up to ``ROW_GROUP_BYTES``. If the iteration raises,
    nothing is renamed: ``path`` is then as it was."""
    written = 0

    def write(tmp: Path) -> None:
        nonlocal written
        pending: list[pa.Table] = []
        pending_bytes = 0
        with pq.ParquetWriter(tmp, schema, write_page_checksum=True) as out:

            def flush() -> None:
                nonlocal pending, pending_bytes
                if pending:
                    table = pa.concat_tables(pending)
                    out.write_table(table, row_group_size=row_group_rows(table))
                pending, pending_bytes = [], 0

            for batch in batches:
                table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
                written += table.num_rows
                pending.append(table.replace_schema_metadata(schema.metadata))
                pending_bytes += table.nbytes
                if pending_bytes >= ROW_GROUP_BYTES:
                    flush()
            flush()

    atomic_write_with(Path(path), write)
    return written


def merge_parquet_atomic(sources: Sequence[Path], schema: pa.Schema, path: Path) -> int:
    """Write the rows of ``sources`` (Parquet files read as ``schema``, as ``pq.read_table(source,
    schema=schema)`` reads them), in order, into one file at ``path`` (``write_batches_atomic``);
    return the rows written.

    Streamed: memory holds a few batches of ``ROW_GROUP_BYTES`` and one pending row group, not
    the whole merge (a run of 798k requests and 51.9M rounds: 14.7 GiB peak RSS when read whole,
    2.2 GiB streamed; BENCHMARKS.md, "Issue 21, seventh session"). Small
    sources are gathered into row groups of up to ``ROW_GROUP_BYTES``. Any source that cannot be
    read raises before anything is renamed: ``path`` is then as it was."""
    import pyarrow.dataset as ds  # heavy: only a merge needs it

    def batches() -> Iterator[pa.RecordBatch]:
        for source in sources:
            scan = ds.dataset(source, schema=schema, format="parquet")
            rows = _batch_rows(pq.ParquetFile(source).metadata)
            yield from scan.to_batches(batch_size=rows, batch_readahead=1, fragment_readahead=1)

    return write_batches_atomic(batches(), schema, path)


def _batch_rows(meta: pq.FileMetaData) -> int:
    """Rows per read batch of a file: about ``ROW_GROUP_BYTES / 4`` at its mean uncompressed row
    width (from its footer), at least 1, at most ``ROW_GROUP_ROWS``."""
    width = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)) / max(meta.num_rows, 1)
    return max(1, min(ROW_GROUP_ROWS, int(ROW_GROUP_BYTES / 4 / max(width, 1.0))))


def table_from_columns(model: type[BaseModel], columns: dict[str, list[Any]]) -> pa.Table:
    """Build a table from column buffers (the hot-path representation).

    Arrow does not enforce non-nullable fields by itself; a null where the
    model forbids one raises ValueError naming the column."""
    schema = arrow_schema(model)
    table = pa.Table.from_pydict(columns, schema=schema)
    for field, column in zip(schema, table.columns):
        if not field.nullable and column.null_count:
            raise ValueError(f"{model.__name__}.{field.name}: {column.null_count} null value(s) in a required column")
    return table


def table_from_records(model: type[BaseModel], records: Sequence[BaseModel]) -> pa.Table:
    columns: dict[str, list[Any]] = {name: [] for name in model.model_fields}
    for rec in records:
        for name in columns:
            columns[name].append(getattr(rec, name))
    return table_from_columns(model, columns)
