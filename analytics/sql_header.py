"""The parsed header of a SQL model: the ``MODEL (...)`` block that starts every file
under ``sql/``, as SQLMesh writes it, read here instead of from prose.

    MODEL (name speedup, kind TABLE, grain (run_id, category, level));
    -- Grain: one row per run_id, category and level ...   (prose: what the
    -- Purpose: ...                                                      columns mean)
    with ...

- ``name``: the model's view name; it must be the file's name (``speedup.sql``).
- ``kind``: ``VIEW`` (computed when read) or ``TABLE`` (computed once at build:
  every mart, and an intermediate or staging model that several others read;
  ``analytics/build.py``).
- ``grain``: the columns that name one row. A test builds the synthetic run's
  database and checks, model by model, that the columns exist and that no two
  rows share them (``tests/analytics/test_sql_headers.py``).

The block ends at its closing ``);``. What follows is the model's SQL, comments
first, which the build runs and the data dictionary prints below the parsed
fields (``analytics/docs.py``). A block that is missing, unclosed, or names an
unknown field or kind is an error naming the file and the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from specdec.errors import SpecdecError

__all__ = ["KINDS", "ModelHeader", "parse"]

KINDS = ("VIEW", "TABLE")
_FIELDS = ("name", "kind", "grain")
_TOKEN = re.compile(r"\s*(?:(--[^\n]*)|([A-Za-z_][A-Za-z0-9_]*)|([(),;]))")


@dataclass(frozen=True)
class ModelHeader:
    name: str
    kind: str
    grain: tuple[str, ...]

    def render(self) -> str:
        """The block as the files write it."""
        return f"MODEL (name {self.name}, kind {self.kind}, grain ({', '.join(self.grain)}));\n"


def _tokens(text: str, path: Path | str):
    """(token, end offset) up to the block's closing ';'; comments skipped."""
    pos = 0
    while True:
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            rest = text[pos:].lstrip()
            found = repr(rest[:20]) if rest else "the end of the file"
            raise SpecdecError(f"{path}: the MODEL block is not closed by ');' (found {found})")
        pos = m.end()
        if m.group(1):
            continue
        token = m.group(2) or m.group(3)
        yield token, pos
        if token == ";":
            return


def parse(text: str, path: Path | str = "<sql>") -> tuple[ModelHeader, str]:
    """The header of a model file and the SQL after it (from the line after ``);``)."""
    head = text.lstrip()
    if not re.match(r"MODEL\s*\(", head, re.IGNORECASE):
        raise SpecdecError(f"{path}: a SQL model starts with its MODEL (name ..., kind ..., grain (...)); block")
    tokens = _tokens(head, path)
    next(tokens), next(tokens)  # MODEL (
    fields: dict[str, str | tuple[str, ...]] = {}
    end = 0
    expect_field = True
    for token, end in tokens:
        if not expect_field:  # after a field: a comma, or the block's end
            if token == ",":
                expect_field = True
                continue
            if token == ")":
                token, end = next(tokens, (None, end))
                if token == ";":
                    break
            raise SpecdecError(f"{path}: the MODEL block is not closed by ');' (found {token!r} after a field)")
        key = token.lower()
        if key not in _FIELDS:
            raise SpecdecError(f"{path}: MODEL field {token!r} is not one of {', '.join(_FIELDS)}")
        if key in fields:
            raise SpecdecError(f"{path}: MODEL field {key!r} is given twice")
        value, end = next(tokens, (None, end))
        if value == "(":
            items = []
            for token, _end in tokens:
                if token == ")":
                    break
                if token != ",":
                    items.append(token.lower())
            fields[key] = tuple(items)
        elif value and value.isidentifier():
            fields[key] = value if key == "kind" else value.lower()
        else:
            raise SpecdecError(f"{path}: MODEL field {key!r} has no value")
        expect_field = False
    missing = [f for f in _FIELDS if f not in fields]
    if missing:
        raise SpecdecError(f"{path}: the MODEL block lacks {', '.join(missing)}")
    name, kind, grain = fields["name"], fields["kind"], fields["grain"]
    if not isinstance(name, str) or (Path(str(path)).suffix == ".sql" and name != Path(str(path)).stem):
        raise SpecdecError(f"{path}: MODEL name {name!r} is not the file's name {Path(str(path)).stem!r}")
    if not isinstance(kind, str) or kind.upper() not in KINDS:
        raise SpecdecError(f"{path}: MODEL kind {kind!r} is not one of {', '.join(KINDS)}")
    columns = (grain,) if isinstance(grain, str) else grain
    if not columns:
        raise SpecdecError(f"{path}: MODEL grain names no column")
    body = head[end:].lstrip(" \t").removeprefix("\n")
    return ModelHeader(name, kind.upper(), tuple(columns)), body
