"""Discover the SQL models shipped in ``specdec.sql`` and order them.

One model per file, file name = view name, in three layers (staging,
intermediate, marts). A model's dependencies are parsed from its SQL with
sqlglot (DuckDB dialect): every relation it reads in a FROM or a JOIN (in any
CTE or subquery), and the relation a ``by_role('raw_...')`` call reads, less
the names of its own CTEs where they are in scope. Those that are models are
its ``depends_on``; the others (``sources``) must be relations the build
creates before the models (``SOURCES``: the raw relations and the tables
computed in Python). A name that is neither is an error naming the file, and so
is SQL that does not parse. A column, an alias or a CTE named like a model is
not a dependency. Models are created in layer order, then dependency order.
(Discovering the models, 58 of them then, took 0.40 s with sqlglot 30.31 against 0.17 s for the
word match it replaced, measured side by side, best of 5, on this 2-core host at
load 9: a quarter of a second per build, less than one mart. The word match
invented edges: a column ``speedup`` made the ``speedup`` mart a dependency of
``speedup_weighted``.) What a SQL text reads is kept in the specdec cache
(``cache_root()/sql-relations.json``, keyed by the text's SHA-256, written for one
sqlglot version and ``PARSE_VERSION``), so a process parses only the models it has
not seen: a build no longer imports sqlglot nor parses the models (63 of them then: 0.17 s + 0.23 s
of CPU before its first query, measured with ``discover()`` alone at load 9-10).

Every file starts with its parsed header (``MODEL (name ..., kind ..., grain (...));``,
``analytics/sql_header.py``). A model is **materialized** (computed once at build into a
table, see ``build.py``) when its kind is ``TABLE``: every mart is (a mart of kind VIEW is
an error), and a few intermediate and staging models that many others read. A
materialized intermediate model's table lives only during the build (the marts read
it); in the finished database it is a view again.

Staging models sit in ``sql/staging/``, one per source. Intermediate models and marts
sit in a folder per domain (``sql/marts/speedup/speedup.sql``): ``DOMAINS`` names them,
and a model in another folder is an error naming the file.
``sql/macros.sql`` holds the macros the models share (``macros_sql``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from dataclasses import dataclass, field
from importlib import metadata, resources
from pathlib import Path
from typing import TYPE_CHECKING

from specdec import arms
from specdec.analytics import settings, sql_header
from specdec.analytics.sql_header import ModelHeader
from specdec.atomic import atomic_write_text
from specdec.errors import SpecdecError
from specdec.model import cache_root
from specdec.runfolder import LAKE_RECORDS, RECORD_FILES

if TYPE_CHECKING:  # sqlglot is imported only to parse a SQL text the cache does not hold
    from sqlglot import exp

log = logging.getLogger("specdec.analytics.sql_models")

LAYERS = ("staging", "intermediate", "marts")
#: The folders of the intermediate models and marts, one per question the marts answer.
DOMAINS = ("acceptance", "speedup", "lossless", "latency", "capacity", "health", "compat", "plan", "run")
#: Bump when ``_relations`` reads a parse differently (the cache's entries then no longer apply).
PARSE_VERSION = 1
#: SQL texts the cache keeps (the latest written): the models of a few versions of the package
CACHE_ENTRIES = 1000

#: The tables computed in Python that models read (``build.COMPUTED``'s ``TABLE``s and
#: ``settings.TABLE``); ``intervals`` imports this module, so its name is written here
#: and ``test_models`` checks the set against the modules.
COMPUTED_TABLES = frozenset({"int_speedup_intervals", "sampling_tests", settings.TABLE})
#: Every relation the build creates before the models: one raw relation per record of the
#: run folder and of the lake, ``raw_manifest`` and the arms' roles (``build._create_manifest``),
#: and the tables computed in Python.
SOURCES = frozenset(
    {rec.raw_table for rec in RECORD_FILES}
    | {rec.raw_table for rec in LAKE_RECORDS}
    | {"raw_manifest", arms.ROLES_TABLE}
    | COMPUTED_TABLES
)
#: Table macros (sql/macros.sql) whose first argument is the name of the relation they read.
RELATION_MACROS = frozenset({"by_role", "query_table"})


@dataclass(frozen=True)
class SqlModel:
    name: str
    layer: str
    path: Path
    #: the SQL after the header block: its prose comments, then the query
    sql: str
    depends_on: frozenset[str]
    #: The relations it reads that are not models (``SOURCES``).
    sources: frozenset[str] = field(default=frozenset())
    #: the parsed ``MODEL (...)`` block
    header: ModelHeader = field(default=ModelHeader("", "VIEW", ("run_id",)))
    #: the folder under its layer ('' for staging)
    domain: str = ""

    @property
    def materialized(self) -> bool:
        """Computed once at build into a table: the header's kind is TABLE (every mart)."""
        return self.header.kind == "TABLE"


def sql_root() -> Path:
    return Path(str(resources.files("specdec.sql")))


def macros_sql(root: Path | None = None) -> str:
    """The macros the models share (``sql/macros.sql``), created before them."""
    return ((root or sql_root()) / "macros.sql").read_text()


def discover(root: Path | None = None) -> list[SqlModel]:
    """Every model under ``root`` (``specdec.sql``), with its parsed dependencies, in build order."""
    root = root or sql_root()
    raw: dict[str, tuple[str, Path, str, ModelHeader, str]] = {}
    for layer in LAYERS:
        for path in sorted((root / layer).rglob("*.sql")):
            if path.stem in raw:
                raise SpecdecError(f"{path}: model name {path.stem!r} is defined twice")
            domain = _domain(root / layer, path)
            header, sql = sql_header.parse(path.read_text(), path)
            if layer == "marts" and header.kind != "TABLE":
                raise SpecdecError(f"{path}: a mart is computed into a table at build: kind TABLE")
            raw[path.stem] = (layer, path, sql, header, domain)
    models = []
    for name, (layer, path, sql, header, domain) in raw.items():
        reads = relations_read(sql, path)
        unknown = sorted(reads - raw.keys() - SOURCES)
        if unknown:
            raise SpecdecError(
                f"{path}: reads {', '.join(map(repr, unknown))}, which is neither a model "
                f"(no sql/<layer>/<name>.sql) nor a relation the build creates before the "
                f"models (a raw_* relation or a table computed in Python)"
            )
        models.append(
            SqlModel(
                name,
                layer,
                path,
                sql,
                frozenset(reads & raw.keys() - {name}),
                frozenset(reads & SOURCES),
                header,
                domain,
            )
        )
    _save_cache()
    return order(models)


def _domain(layer_dir: Path, path: Path) -> str:
    """The domain folder of a model file: none in staging, one of ``DOMAINS`` elsewhere."""
    parts = path.relative_to(layer_dir).parts[:-1]
    if layer_dir.name == "staging":
        if parts:
            raise SpecdecError(f"{path}: a staging model sits in sql/staging/ itself, one per source")
        return ""
    if len(parts) != 1 or parts[0] not in DOMAINS:
        raise SpecdecError(
            f"{path}: a {layer_dir.name} model sits in sql/{layer_dir.name}/<domain>/, a domain one of "
            f"{', '.join(DOMAINS)}"
        )
    return parts[0]


def relations_read(sql: str, path: Path | str = "<sql>") -> frozenset[str]:
    """The relations a query reads (lower case): every table of a FROM or a JOIN in any of its
    scopes that is not a CTE visible there, and the first argument of a ``RELATION_MACROS``
    call. A column, an alias or a CTE is never one, whatever its name. Parsed once per SQL
    text and sqlglot version on this machine (the cache, module docstring), and once per
    process (``_relations``)."""
    digest = hashlib.sha256(sql.encode("utf-8")).hexdigest()
    known = _cache()["relations"].get(digest)
    if isinstance(known, list) and all(isinstance(r, str) for r in known):
        return frozenset(known)
    from sqlglot.errors import SqlglotError  # heavy: sqlglot, only for a text the cache does not hold

    try:
        found = _relations(sql)
    except SqlglotError as exc:
        raise SpecdecError(
            f"{path}: the SQL does not parse (sqlglot, DuckDB dialect): {' '.join(str(exc).split())}"
        ) from None
    _cache()["relations"][digest] = sorted(found)
    _cache()["dirty"] = True
    return found


def _cache_file() -> Path:
    return cache_root() / "sql-relations.json"


def _cache_stamp() -> str:
    return f"sqlglot {metadata.version('sqlglot')}; parse {PARSE_VERSION}; macros {sorted(RELATION_MACROS)}"


@functools.lru_cache(maxsize=1)
def _cache() -> dict:
    """This process's view of the cache file: {"relations": digest -> names, "dirty": bool}; an
    unreadable file, or one written for another sqlglot or PARSE_VERSION, counts as empty."""
    try:
        data = json.loads(_cache_file().read_text(encoding="utf-8"))
        if isinstance(data, dict) and data.get("stamp") == _cache_stamp() and isinstance(data.get("relations"), dict):
            return {"relations": data["relations"], "dirty": False}
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as e:
        log.warning("SQL relations cache %s not read: %s", _cache_file(), e)
    return {"relations": {}, "dirty": False}


def _save_cache() -> None:
    """Write what this process parsed to the cache file (atomically); a failure is logged."""
    cache = _cache()
    if not cache["dirty"]:
        return
    try:
        _cache_file().parent.mkdir(parents=True, exist_ok=True)
        kept = dict(list(cache["relations"].items())[-CACHE_ENTRIES:])  # the latest texts seen
        atomic_write_text(_cache_file(), json.dumps({"stamp": _cache_stamp(), "relations": kept}))
        cache["dirty"] = False
    except OSError as e:
        log.warning("SQL relations cache %s not written: %s", _cache_file(), e)


@functools.lru_cache(maxsize=1024)
def _relations(sql: str) -> frozenset[str]:
    import sqlglot  # heavy: sqlglot, only for a text the cache does not hold
    from sqlglot import exp
    from sqlglot.optimizer.scope import traverse_scope

    tree = sqlglot.parse_one(sql, read="duckdb")
    out: set[str] = set()
    for scope in traverse_scope(tree):
        for source in scope.sources.values():  # a CTE in scope is a Scope here, not a Table
            if not isinstance(source, exp.Table):
                continue
            if source.name:
                out.add(source.name.lower())
            elif isinstance(source.this, exp.Func) and _func_name(source.this) in RELATION_MACROS:
                first = source.this.expressions[0] if source.this.expressions else None
                if isinstance(first, exp.Literal) and first.is_string:
                    out.add(first.this.lower())
    return frozenset(out)


def _func_name(func: exp.Func) -> str:
    from sqlglot import exp  # heavy: sqlglot (the caller has parsed already)

    return (func.name if isinstance(func, exp.Anonymous) else func.sql_name()).lower()


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


def has_view(con, name: str) -> bool:
    """Whether the database has a view (a model) of this name."""
    return bool(con.execute("select count(*) from duckdb_views() where view_name = ?", [name]).fetchone()[0])
