"""Checks on the Parquet files ``specdec analytics build`` reads, each problem
an ``InputFileError`` naming the file and, where known, the row group, row
and column (never a traceback from DuckDB later, at query time).

Two depths (``check_file``):

* **footer** (always, every file; metadata only, so cheap at any size):
  the footer reads; ``schema_version`` is one this specdec reads (an older
  version's columns are read under today's names, ``FORMER_NAMES``); every
  column of the record is there (but a column the record marks
  ``absent_as_null``, a nullable field with the default None, e.g. one added
  after the file was written: it reads as NULL), with a type that casts to the record's
  (integers to any integer or float, floats to floats, strings to strings,
  lists of such); no null in a column the record declares required: a
  column the file declares REQUIRED cannot hold one, a nullable flat column
  is judged by the row groups' null counts (read only where a row group has
  no statistics, or to name the first null row), a nullable list column is
  read; and, where the caller knows the file's run (``run_id``), every row
  holds that run: judged by the row groups' min/max of ``run_id``, read only
  where they are missing or differ.
* **full** (``full=True``): the footer checks, then every row group read
  with page checksums verified, one row group at a time (memory: one row
  group), so a corrupted page is named at build time, and every value is
  cast to the record's type. ``build`` asks for it when the inputs are small
  (``FULL_CHECK_BYTES``) or when told to (``--validate full``).

``read_parquet_checked`` reads one whole file into a table, with the same
problems named the same way (the data contracts, ``contracts.py``, read their
rows through it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from specdec.errors import InputFileError
from specdec.schemas.arrow import absent_as_null
from specdec.schemas.records import FORMER_NAMES, READ_SCHEMA_VERSIONS

__all__ = ["FULL_CHECK_BYTES", "FileCheck", "check_file", "former_names", "read_parquet_checked"]

#: Inputs up to this many bytes in all are read in full by default (``--validate auto``).
FULL_CHECK_BYTES = 256 * 2**20


def _why(exc: Exception) -> str:
    """pyarrow's message on one line."""
    return " ".join(str(exc).split()) or type(exc).__name__


def _open(path: Path) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(path, page_checksum_verification=True)
    except Exception as exc:  # pyarrow raises several types for a bad footer
        raise InputFileError(path, f"not a readable Parquet file, truncated or corrupted ({_why(exc)})") from None


def former_names(have_schema: pa.Schema) -> dict[str, str]:
    """The columns a file of an older version holds under a former name: name now ->
    the file's name (``FORMER_NAMES``, by the file's ``schema_version``)."""
    version = (have_schema.metadata or {}).get(b"schema_version", b"").decode()
    present = set(have_schema.names)
    return {now: then for now, then in FORMER_NAMES.get(version, {}).items() if then in present}


def _today(have_schema: pa.Schema, renamed: dict[str, str]) -> pa.Schema:
    """The file's schema under today's column names (``renamed``: ``former_names``)."""
    if not renamed:
        return have_schema
    back = {then: now for now, then in renamed.items()}
    return pa.schema([f.with_name(back.get(f.name, f.name)) for f in have_schema], metadata=have_schema.metadata)


@dataclass(frozen=True)
class _Footer:
    """What the checks read of a file's footer, read once per file: pyarrow builds
    ``schema_arrow`` anew at every access, and the column index and the row groups' first rows
    are lists over the footer (on a lake of 3,000 files, ``find_inputs`` took 1.23-1.30 CPU s
    with them read once per file, 1.62-1.71 with them read once per check)."""

    schema: pa.Schema  # the file's Arrow schema, under today's column names
    leaves: dict[str, int]  # column path (today's name) -> column index in the footer
    offsets: list[int]  # the first row of each row group, counted from 0 in the file
    renamed: dict[str, str]  # former_names: today's name -> the file's

    @classmethod
    def of(cls, pf: pq.ParquetFile) -> _Footer:
        meta = pf.metadata
        offsets, total = [], 0
        for i in range(pf.num_row_groups):
            offsets.append(total)
            total += meta.row_group(i).num_rows
        renamed = former_names(pf.schema_arrow)
        back = {then: now for now, then in renamed.items()}
        paths = (meta.schema.column(j).path for j in range(meta.num_columns))
        leaves = {back.get(path, path): j for j, path in enumerate(paths)}
        return cls(_today(pf.schema_arrow, renamed), leaves, offsets, renamed)


def _check_header(path: Path, schema: pa.Schema, have_schema: pa.Schema) -> None:
    """``have_schema``: the file's Arrow schema under today's names (``_Footer.schema``)."""
    version = (have_schema.metadata or {}).get(b"schema_version", b"").decode() or None
    if version not in READ_SCHEMA_VERSIONS:
        raise InputFileError(
            path, f"schema_version is {version!r}, this specdec reads {' or '.join(map(repr, READ_SCHEMA_VERSIONS))}"
        )
    present = set(have_schema.names)
    missing = [f.name for f in schema if f.name not in present and not absent_as_null(f)]
    if missing:
        raise InputFileError(path, "missing column(s)", field=", ".join(missing))
    for want in schema:
        if want.name not in present:
            continue  # absent_as_null: read as NULL
        have = have_schema.field(want.name).type
        if not _castable(have, want.type):
            raise InputFileError(
                path, f"a column has the wrong type ({have}, the record's is {want.type})", field=want.name
            )


def _castable(have: pa.DataType, want: pa.DataType) -> bool:
    """Whether a file's column type casts to the record's without losing its meaning."""
    t = pa.types
    if have.equals(want) or t.is_null(have):
        return True
    if t.is_dictionary(have):  # a dictionary-encoded column reads as the values it holds
        return _castable(have.value_type, want)
    if t.is_integer(want):
        return t.is_integer(have)
    if t.is_floating(want):
        return t.is_integer(have) or t.is_floating(have)
    if t.is_string(want) or t.is_large_string(want):
        return t.is_string(have) or t.is_large_string(have) or t.is_string_view(have)
    if t.is_list(want) or t.is_large_list(want):
        return (t.is_list(have) or t.is_large_list(have)) and _castable(have.value_type, want.value_type)
    return False


def _first_null(column) -> int:
    return pc.index(pc.is_null(column), True).as_py()


def _null_error(path: Path, name: str, count: int, first_row: int) -> InputFileError:
    return InputFileError(
        path, f"{count} null value(s) in a required column (row counted from 0 in the file)", row=first_row, field=name
    )


def _check_nulls(path: Path, pf: pq.ParquetFile, schema: pa.Schema, footer: _Footer) -> None:
    """Required columns hold no null: from the file's schema and footer where they tell."""
    leaves, offsets, have_schema = footer.leaves, footer.offsets, footer.schema
    for want in schema:
        if want.nullable or not have_schema.field(want.name).nullable:
            continue  # the record allows nulls, or the file's column is REQUIRED (cannot hold one)
        count, first = 0, None
        for i in range(pf.num_row_groups):
            stats = pf.metadata.row_group(i).column(leaves[want.name]).statistics if want.name in leaves else None
            if stats is not None and stats.has_null_count:
                nulls = stats.null_count
                if nulls and first is None:
                    first = offsets[i] + _first_null(_read(path, pf, i, footer.renamed.get(want.name, want.name)))
            else:  # no statistics, or a list column: read it
                column = _read(path, pf, i, footer.renamed.get(want.name, want.name))
                nulls = column.null_count
                if nulls and first is None:
                    first = offsets[i] + _first_null(column)
            count += nulls
        if count:
            assert first is not None  # a null counted is a null found: its row was noted
            raise _null_error(path, want.name, count, first)


def _read(path: Path, pf: pq.ParquetFile, group: int, name: str):
    try:
        return pf.read_row_group(group, columns=[name]).column(0)
    except Exception as exc:  # decompression, page header, checksum ...
        raise InputFileError(
            path,
            f"row group {group} of {pf.num_row_groups} cannot be read, "
            f"the file is corrupted or truncated ({_why(exc)})",
        ) from None


def _read_group(pf: pq.ParquetFile, i: int, schema: pa.Schema, renamed: dict[str, str]) -> pa.Table:
    """Row group ``i`` with the record's columns in order, under today's names (``renamed``:
    ``former_names``); a column the file lacks (``absent_as_null``, checked by
    ``_check_header``) is all NULL."""
    present = set(pf.schema_arrow.names)
    wanted = [(n, renamed.get(n, n)) for n in schema.names if renamed.get(n, n) in present]
    group = pf.read_row_group(i, columns=[then for _, then in wanted]).rename_columns([now for now, _ in wanted])
    present = {now for now, _ in wanted}
    for j, field in enumerate(schema):
        if field.name not in present:
            group = group.add_column(j, field.name, pa.nulls(group.num_rows, field.type))
    return group.select(schema.names)


def _read_all(path: Path, pf: pq.ParquetFile, schema: pa.Schema, renamed: dict[str, str]) -> None:
    """Every row group, pages checksummed, values cast; nulls counted on the data."""
    nulls: dict[str, list[int]] = {}  # column -> [count, first row]
    types = pa.schema([f.with_nullable(True) for f in schema])  # nulls are counted, not cast
    offset = 0
    for i in range(pf.num_row_groups):
        try:
            group = _read_group(pf, i, schema, renamed)
        except Exception as exc:  # decompression, page header, checksum ...
            raise InputFileError(
                path,
                f"row group {i} of {pf.num_row_groups} cannot be read, "
                f"the file is corrupted or truncated ({_why(exc)})",
            ) from None
        for field, column in zip(schema, group.columns):
            if not field.nullable and column.null_count:
                seen = nulls.setdefault(field.name, [0, offset + _first_null(column)])
                seen[0] += column.null_count
        _cast(path, group, types)
        offset += group.num_rows

    for name in schema.names:  # in record order, as a whole-file read reports them
        if name in nulls:
            raise _null_error(path, name, *nulls[name])


def _cast(path: Path, table: pa.Table, schema: pa.Schema) -> pa.Table:
    try:
        return table.cast(schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, ValueError) as exc:
        raise InputFileError(path, f"a column has the wrong type ({_why(exc)})") from None


def _check_run_id(path: Path, pf: pq.ParquetFile, run_id: str, whose: str, footer: _Footer) -> None:
    """Every row's run_id is ``run_id``: from the row groups' min/max, read where they do not tell."""
    leaves, offsets = footer.leaves, footer.offsets
    for i in range(pf.num_row_groups):
        stats = pf.metadata.row_group(i).column(leaves["run_id"]).statistics
        if stats is not None and stats.has_min_max and stats.min == run_id == stats.max:
            continue
        if pf.metadata.row_group(i).num_rows == 0:
            continue
        column = _read(path, pf, i, "run_id")
        other = pc.not_equal(column.fill_null(""), pa.scalar(run_id))
        if pc.any(other).as_py():
            row = pc.index(other, True).as_py()
            raise InputFileError(
                path,
                f"run_id is {column[row].as_py()!r}, but {whose} is {run_id!r}: the rows "
                "of a run folder or lake partition belong to that run only",
                row=offsets[i] + row,
                field="run_id",
            )


@dataclass(frozen=True)
class FileCheck:
    """What ``check_file`` found: the file's rows, and the record's columns it lacks
    (``absent_as_null`` ones only: any other is an error)."""

    rows: int
    absent: tuple[str, ...]
    partial: tuple[str, ...] = ()  # of the ``derived`` columns asked about: present, may hold a null
    renamed: tuple[tuple[str, str], ...] = ()  # the record's columns the file holds under a former name: (now, then)


def _may_hold_null(pf: pq.ParquetFile, name: str, footer: _Footer) -> bool:
    """Whether a column may hold a null, from the footer's statistics (no statistics: it may)."""
    leaf = footer.leaves.get(name)
    for i in range(pf.num_row_groups):
        stats = pf.metadata.row_group(i).column(leaf).statistics if leaf is not None else None
        if stats is None or not stats.has_null_count or stats.null_count:
            return True
    return False


def check_file(
    path: Path,
    schema: pa.Schema,
    *,
    run_id: str | None = None,
    whose: str = "",
    full: bool = False,
    derived: tuple[str, ...] = (),
) -> FileCheck:
    """Check one file (module docstring). ``run_id``: the run every row must hold,
    ``whose`` says where that comes from (for the message). ``derived``: columns to
    report in ``FileCheck.partial`` when the file has them but its footer does not
    show them free of nulls."""
    pf = _open(path)
    with pf:
        footer = _Footer.of(pf)
        _check_header(path, schema, footer.schema)
        if full:
            _read_all(path, pf, schema, footer.renamed)
        else:
            _check_nulls(path, pf, schema, footer)
        if run_id is not None:
            _check_run_id(path, pf, run_id, whose, footer)
        present = set(footer.schema.names)
        partial = tuple(n for n in derived if n in present and _may_hold_null(pf, n, footer))
        absent = tuple(n for n in schema.names if n not in present)
        renamed = tuple((now, then) for now, then in footer.renamed.items() if now in schema.names)
        return FileCheck(pf.metadata.num_rows, absent, partial, renamed)


def read_parquet_checked(path: Path, schema: pa.Schema) -> pa.Table:
    """Read one Parquet file as ``schema``; every problem names the file and,
    where known, the row group, row and column."""
    pf = _open(path)
    with pf:
        renamed = former_names(pf.schema_arrow)
        _check_header(path, schema, _today(pf.schema_arrow, renamed))
        groups = []
        for i in range(pf.num_row_groups):
            try:
                groups.append(_read_group(pf, i, schema, renamed))
            except Exception as exc:  # decompression, page header, checksum ...
                raise InputFileError(
                    path,
                    f"row group {i} of {pf.num_row_groups} cannot be read, "
                    f"the file is corrupted or truncated ({_why(exc)})",
                ) from None
    table = pa.concat_tables(groups) if groups else schema.empty_table()
    for field, column in zip(schema, table.columns):
        if not field.nullable and column.null_count:
            raise _null_error(path, field.name, column.null_count, _first_null(column))
    return _cast(path, table, schema)
