"""Read a traffic file's rows as raw records, before validation: the file format
of a traffic mix (Parquet or JSON Lines of TrafficRow), shared by the replay,
which validates and sends the rows (``specdec.traffic.io``), and the data
contracts, which list every offending row (``specdec validate``).

A row is 1-based, as a person counts: in JSON Lines it is the line number
(blank lines count), in Parquet the row index + 1. How the file is read:

JSON Lines (``.jsonl``, ``.ndjson``)
  * UTF-8 only. Bytes that are not UTF-8 are refused with the row and the byte
    offset. A UTF-8 byte-order mark at the start of the file is accepted and
    ignored (Windows editors write one); the sha256 is of the file as it is.
  * Lines are split on ``\\n`` only, and one ``\\r`` before it is dropped, so
    ``\\r\\n`` files work. ``str.splitlines`` is not used: it also splits on
    U+2028, U+0085 and other characters that are plain text inside a prompt.
  * Blank lines (only spaces, tabs or ``\\r``) are skipped.
  * Each line is one JSON object. Refused, with the row: invalid JSON (with the
    column), a value that is not an object, a key given twice in one object
    (``json.loads`` would silently keep the last one), and ``NaN``/``Infinity``
    (Python's ``json`` accepts them; JSON does not).

Parquet (``.parquet``)
  * Columns are checked against ``TrafficRow`` before any row: a missing
    required column, an unknown column, or a column of the wrong Arrow type is
    named with the file and column. String fields need a string column, integer
    fields an integer column (a double column of whole numbers is refused:
    that usually means the writer saw a NaN), float fields a float or integer
    column.
  * A null is refused with the row in a required column and in
    ``temperature`` (leave the column out to get the default 0); the optional
    fields of format version 2 (``messages``, ``arrival_ms``, ``session_id``
    ...) may be null, meaning "not recorded". A string value that is not UTF-8
    (Arrow does not check it on read) is refused with the byte offset.
  * Format version 3 (``specdec.schemas.traffic_blocks``): a row may give its
    prompt as ``prompt_blocks`` (ids in the block table, the key-value
    metadata ``traffic_blocks``) and ``prompt_tail``; the reader joins them
    into ``prompt`` (the blocks' texts in order, then the tail), so every
    caller sees the same records as from a file with whole prompts. Refused,
    naming the file and the row or table entry: a block table that is not a
    JSON array of blocks (or gives an id twice), ``prompt_blocks`` without a
    block table, an id not in it, a row giving both ``prompt`` and
    ``prompt_blocks``, a ``prompt_tail`` without ``prompt_blocks``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from specdec.errors import InputFileError
from specdec.schemas.records import TrafficRow
from specdec.schemas.traffic_blocks import BLOCKS_KEY, TrafficBlock, TrafficStoredPrompt

_BOM = "\ufeff"


def read_traffic_records(path: str | Path, raw: bytes | None = None) -> list[tuple[int, dict[str, Any]]]:
    """The rows of a traffic file as (row number from 1, raw dict), before any
    validation (``load_traffic`` validates them; ``specdec validate`` lists
    every offending row instead). ``raw``: the file's bytes when the caller
    has read them already. A file that cannot be read is an InputFileError
    naming it (and the line, for JSON Lines)."""
    path = Path(path)
    if raw is None and not path.is_file():
        raise InputFileError(path, "no such file")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return _read_parquet(path)
    if suffix in (".jsonl", ".ndjson"):
        return _read_jsonl(path, path.read_bytes() if raw is None else raw)
    raise InputFileError(path, "unknown format: expected .parquet or .jsonl")


# ------------------------------------------------------------ messages
def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean " + ("true" if value else "false")
    if isinstance(value, (int, float)):
        return f"number {value!r}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:40] + "..."
        return f"string {shown!r}"
    names: dict[type, str] = {dict: "object", list: "array"}
    return names.get(type(value), type(value).__name__)


def describe_error(err: Mapping[str, Any]) -> str:  # a pydantic ErrorDetails
    """Pydantic's message, plus what was found when the type was wrong."""
    msg = str(err["msg"])
    if err["type"].endswith("_type") or err["type"] in ("finite_number",):
        msg += f" (got {_json_type(err.get('input'))})"
    return msg


# ------------------------------------------------------------ JSON Lines
class _Refused(Exception):
    def __init__(self, problem: str, field: str | None = None):
        super().__init__(problem)
        self.problem, self.field = problem, field


def _object_without_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"key {key!r} appears twice in one object (which value is meant is unclear)", key)
        out[key] = value
    return out


def _no_constants(name: str) -> object:
    raise _Refused(f"{name} is not valid JSON (use a finite number)")


def _decode_utf8(path: Path, raw: bytes) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        line_start = raw.rfind(b"\n", 0, exc.start) + 1
        raise InputFileError(
            path,
            f"not UTF-8: byte 0x{raw[exc.start]:02x} at byte offset {exc.start} of the file "
            f"(byte {exc.start - line_start + 1} of the line) is {exc.reason}; save the file as UTF-8",
            row=line,
        ) from None
    return text[1:] if text.startswith(_BOM) else text


def _read_jsonl(path: Path, raw: bytes) -> list[tuple[int, dict[str, Any]]]:
    out = []
    for i, line in enumerate(_decode_utf8(path, raw).split("\n"), start=1):
        if line.endswith("\r"):
            line = line[:-1]
        if not line.strip(" \t\r"):
            continue
        try:
            obj = json.loads(line, object_pairs_hook=_object_without_duplicates, parse_constant=_no_constants)
        except json.JSONDecodeError as exc:
            raise InputFileError(path, f"invalid JSON ({exc.msg} at column {exc.colno})", row=i) from None
        except _Refused as exc:
            raise InputFileError(path, exc.problem, row=i, field=exc.field) from None
        except (ValueError, RecursionError) as exc:  # e.g. an integer of 5,000 digits, [[[[...
            raise InputFileError(path, f"invalid JSON ({type(exc).__name__}: {str(exc)[:120]})", row=i) from None
        if not isinstance(obj, dict):
            raise InputFileError(path, f"each line must be a JSON object, got {_json_type(obj).split()[0]}", row=i)
        out.append((i, obj))
    return out


# ------------------------------------------------------------ Parquet
def _accepts(expected: Any, actual: Any) -> bool:  # two pyarrow DataTypes
    """Whether an Arrow column type can hold a field of the expected Arrow type."""
    import pyarrow.types as pt  # heavy: pyarrow, only when a Parquet file is read

    if pt.is_dictionary(actual):
        actual = actual.value_type
    if pt.is_list(expected):
        return bool(pt.is_list(actual) or pt.is_large_list(actual)) and _accepts(expected.value_type, actual.value_type)
    if pt.is_string(expected):
        return (
            pt.is_string(actual) or pt.is_large_string(actual) or getattr(pt, "is_string_view", lambda t: False)(actual)
        )
    if pt.is_integer(expected):
        return bool(pt.is_integer(actual))
    if pt.is_floating(expected):
        return bool(pt.is_floating(actual) or pt.is_integer(actual))
    return bool(actual == expected)


def _read_parquet(path: Path) -> list[tuple[int, dict[str, Any]]]:
    # heavy: pyarrow (schemas.arrow too), only when a Parquet file is read; `specdec --help` imports this module
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from specdec.schemas.arrow import arrow_schema

    try:
        pf = pq.ParquetFile(path)
        table = pf.read()
        kv = pf.metadata.metadata or {}
    except Exception as exc:
        raise InputFileError(path, f"not a readable Parquet file ({exc})") from None
    expected = arrow_schema(TrafficRow)
    stored = arrow_schema(TrafficStoredPrompt)  # version 3: a prompt as blocks + tail
    known = expected.names + stored.names
    for name in table.column_names:
        if name not in known:
            raise InputFileError(path, f"unknown column (expected some of {', '.join(known)})", field=name)
    blocks = _block_table(path, kv[BLOCKS_KEY.encode()]) if BLOCKS_KEY.encode() in kv else None
    for field in [*expected, *stored]:
        if field.name not in table.column_names:
            if field.name in TrafficRow.model_fields and TrafficRow.model_fields[field.name].is_required():
                raise InputFileError(path, "missing column", field=field.name)
            continue
        column = table.column(field.name)
        if not _accepts(field.type, column.type):
            raise InputFileError(path, f"column has Arrow type {column.type}, expected {field.type}", field=field.name)
        if column.null_count and not _nullable(field.name):
            first = pc.index(column.is_null(), True).as_py()
            raise InputFileError(
                path, f"null value ({column.null_count} in this column)", row=first + 1, field=field.name
            )
        _check_utf8(path, field.name, column)
    records = table.to_pylist()
    if "prompt_blocks" in table.column_names or "prompt_tail" in table.column_names:
        if blocks is None:
            raise InputFileError(
                path,
                f"the file gives prompts as blocks but holds no block table (key-value metadata {BLOCKS_KEY!r})",
                field="prompt_blocks",
            )
        _join_blocks(path, records, blocks)
    return list(enumerate(records, start=1))


def _nullable(name: str) -> bool:
    """Whether a TrafficRow field may be null in Parquet: the optional fields of
    the version-2 format (None = not recorded). ``temperature`` is not: leave
    its column out to get the default 0. The stored-prompt columns of version 3 may."""
    info = TrafficRow.model_fields.get(name) or TrafficStoredPrompt.model_fields[name]
    return not info.is_required() and info.default is None


# ------------------------------------------------------------ version 3: prompts as blocks
def _block_table(path: Path, raw: bytes) -> dict[int, str]:
    """The block table (``TrafficBlock`` objects as JSON text): block id -> text."""
    where = BLOCKS_KEY
    try:
        items = json.loads(raw.decode("utf-8"), parse_constant=_no_constants)
    except (UnicodeDecodeError, ValueError, RecursionError, _Refused) as exc:
        raise InputFileError(path, f"the block table is not JSON text ({str(exc)[:120]})", field=where) from None
    if not isinstance(items, list):
        raise InputFileError(
            path, f"the block table must be a JSON array of blocks, got {_json_type(items).split()[0]}", field=where
        )
    texts: dict[int, str] = {}
    for k, item in enumerate(items):
        try:
            block = TrafficBlock.model_validate(item)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = "".join(f".{p}" for p in err["loc"])
            raise InputFileError(path, describe_error(err), field=f"{where}[{k}]{loc}") from None
        if block.block_id in texts:
            raise InputFileError(
                path, f"block id {block.block_id} is given twice in the block table", field=f"{where}[{k}].block_id"
            )
        texts[block.block_id] = block.text
    return texts


def _join_blocks(path: Path, records: list[dict[str, Any]], texts: dict[int, str]) -> None:
    """Each row's ``prompt_blocks`` + ``prompt_tail`` made its ``prompt`` (in place; both keys removed)."""
    for row, rec in enumerate(records, start=1):
        ids, tail = rec.pop("prompt_blocks", None), rec.pop("prompt_tail", None)
        if ids is None:
            if tail is not None:
                raise InputFileError(path, "prompt_tail is given without prompt_blocks", row=row, field="prompt_tail")
            continue
        if rec.get("prompt") is not None:
            raise InputFileError(
                path,
                "give the prompt whole (prompt) or as blocks (prompt_blocks), not both",
                row=row,
                field="prompt_blocks",
            )
        try:
            parts = [texts[i] for i in ids]
        except KeyError:
            k, missing = next((k, i) for k, i in enumerate(ids) if i not in texts)
            what = "a null block id" if missing is None else f"block id {missing}"
            raise InputFileError(
                path,
                f"{what} (element {k} of the list) is not in the file's block table ({BLOCKS_KEY!r}, {len(texts)} blocks)",
                row=row,
                field="prompt_blocks",
            ) from None
        if tail is not None:
            parts.append(tail)
        rec["prompt"] = "".join(parts)


def _check_utf8(path: Path, name: str, column: Any) -> None:  # a pyarrow ChunkedArray
    """Arrow does not check that a string column read from a file is UTF-8;
    find the first bad value and name its row and byte offset."""
    import pyarrow as pa  # heavy: pyarrow, only when a Parquet file is checked

    try:
        column.validate(full=True)
        return
    except pa.ArrowInvalid:
        pass
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    for i, value in enumerate(column.cast(pa.binary()).to_pylist(), start=1):
        try:
            value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputFileError(
                path,
                f"not UTF-8: byte 0x{value[exc.start]:02x} at byte offset {exc.start} of the value is {exc.reason}",
                row=i,
                field=name,
            ) from None
        except AttributeError:  # not bytes: nothing to decode
            return
    raise InputFileError(path, "column fails Arrow's validation", field=name)
