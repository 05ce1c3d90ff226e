"""Derive Arrow schemas from the pydantic record models and write Parquet
with ``schema_version`` in the key-value metadata."""

from __future__ import annotations

import types
import typing
from collections.abc import Sequence
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


def write_parquet_atomic(table: pa.Table, path: Path) -> None:
    """Write to a unique temporary name, fsync, then rename (see
    ``specdec.atomic.atomic_write_with``): a reader (or a crash) never sees a
    half-written file under the final name."""
    atomic_write_with(Path(path), lambda tmp: pq.write_table(table, tmp, write_page_checksum=True))


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
