"""Discover the SQL models shipped in ``specdec.sql`` and order them.

One model per file, file name = view name, in three layers (staging,
intermediate, marts). A model depends on every other model whose name it
mentions as a word; models are created in layer order, then dependency order.

A model is **materialized** (computed once at build into a table, see
``build.py``) when it is a mart, or when its header has a line starting
``-- Materialized: table``; every other model stays a view, computed when read.
A materialized intermediate model's table lives only during the build (the
marts read it); in the finished database it is a view again.
``sql/macros.sql`` holds the macros the models share (``macros_sql``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from specdec.errors import SpecdecError

LAYERS = ("staging", "intermediate", "marts")
MATERIALIZED = "-- Materialized: table"


@dataclass(frozen=True)
class SqlModel:
    name: str
    layer: str
    path: Path
    sql: str
    depends_on: frozenset[str]

    @property
    def materialized(self) -> bool:
        """Computed once at build into a table: every mart, and a model whose header says so."""
        return self.layer == "marts" or any(line.startswith(MATERIALIZED) for line in self.sql.splitlines())


def sql_root() -> Path:
    return Path(str(resources.files("specdec.sql")))


def macros_sql(root: Path | None = None) -> str:
    """The macros the models share (``sql/macros.sql``), created before them."""
    return ((root or sql_root()) / "macros.sql").read_text()


def discover(root: Path | None = None) -> list[SqlModel]:
    root = root or sql_root()
    raw: dict[str, tuple[str, Path, str]] = {}
    for layer in LAYERS:
        for path in sorted((root / layer).glob("*.sql")):
            if path.stem in raw:
                raise SpecdecError(f"{path}: model name {path.stem!r} is defined twice")
            raw[path.stem] = (layer, path, path.read_text())
    models = []
    for name, (layer, path, sql) in raw.items():
        body = _strip_comments(sql)
        deps = {other for other in raw if other != name and re.search(rf"\b{re.escape(other)}\b", body)}
        models.append(SqlModel(name, layer, path, sql, frozenset(deps)))
    return order(models)


def order(models: list[SqlModel]) -> list[SqlModel]:
    """Layer order first, then a stable topological order within the whole graph."""
    by_name = {m.name: m for m in models}
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    for m in models:
        for d in m.depends_on:
            if rank[by_name[d].layer] > rank[m.layer]:
                raise SpecdecError(f"{m.path}: a {m.layer} model may not read the {by_name[d].layer} model {d!r}")
    done: list[SqlModel] = []
    seen: set[str] = set()
    visiting: set[str] = set()

    def visit(m: SqlModel) -> None:
        if m.name in seen:
            return
        if m.name in visiting:
            raise SpecdecError(f"{m.path}: dependency cycle through {m.name!r}")
        visiting.add(m.name)
        for d in sorted(m.depends_on, key=lambda n: (rank[by_name[n].layer], n)):
            visit(by_name[d])
        visiting.discard(m.name)
        seen.add(m.name)
        done.append(m)

    for m in sorted(models, key=lambda m: (rank[m.layer], m.name)):
        visit(m)
    return done


def _strip_comments(sql: str) -> str:
    return re.sub(r"--[^\n]*", "", sql)


def has_view(con, name: str) -> bool:
    """Whether the database has a view (a model) of this name."""
    return bool(con.execute("select count(*) from duckdb_views() where view_name = ?", [name]).fetchone()[0])
