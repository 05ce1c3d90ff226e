"""Every SQL model's parsed header (issue 44, item 4; analytics/sql_header.py): the block
parses or fails naming the file and field, each model sits in its domain folder, and its
grain is a key of the rows it makes on the test runs."""

from __future__ import annotations

import tomllib
from pathlib import Path

import duckdb
import pytest

from specdec.analytics.build import build
from specdec.analytics.sql_header import ModelHeader, parse
from specdec.analytics.sql_models import DOMAINS, discover, sql_root
from specdec.errors import SpecdecError
from tests.support.lossless_run import make_run
from tests.support.named_run import write_named_run
from tests.support.synthetic_run import write_run

ROOT = Path(__file__).resolve().parents[2]
BODY = "-- Grain: one row per run_id.\nselect 1 as run_id\n"


def test_a_header_parses_into_its_fields_and_the_sql_after_it():
    text = "MODEL (\n  name m, -- a comment\n  kind table,\n  grain (run_id, Arm)\n);\n" + BODY
    header, body = parse(text, "sql/marts/health/m.sql")
    assert header == ModelHeader("m", "TABLE", ("run_id", "arm"))
    assert body == BODY
    assert parse(header.render() + BODY, "m.sql") == (header, BODY)  # render writes what parse reads
    assert parse("MODEL (name m, kind VIEW, grain run_id);\n" + BODY, "m.sql")[0].grain == ("run_id",)


@pytest.mark.parametrize(
    "text, says",
    [
        (BODY, "starts with its MODEL"),
        ("MODEL (name m, kind VIEW, grain (run_id)\n" + BODY, "not closed by ');'"),
        ("MODEL (name m, kind VIEW, grain (run_id), owner me);\n" + BODY, "field 'owner' is not one of"),
        ("MODEL (name m, kind VIEW);\n" + BODY, "lacks grain"),
        ("MODEL (name other, kind VIEW, grain (run_id));\n" + BODY, "is not the file's name 'm'"),
        ("MODEL (name m, kind INCREMENTAL, grain (run_id));\n" + BODY, "kind 'INCREMENTAL' is not one of"),
        ("MODEL (name m, kind VIEW, grain ());\n" + BODY, "grain names no column"),
        ("MODEL (name m, name m, kind VIEW, grain (run_id));\n" + BODY, "'name' is given twice"),
    ],
)
def test_a_bad_header_names_the_file_and_what_is_wrong(text, says):
    with pytest.raises(SpecdecError, match="m.sql") as err:
        parse(text, "sql/marts/health/m.sql")
    assert says in str(err.value)


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    for layer in ("staging", "intermediate", "marts"):
        (tmp_path / layer).mkdir(exist_ok=True)
    return tmp_path


def test_a_model_outside_its_domain_folder_or_a_mart_of_kind_view_is_refused(tmp_path):
    view = "MODEL (name {n}, kind VIEW, grain (run_id));\nselect 1 as run_id\n"
    with pytest.raises(SpecdecError, match=r"marts/m\.sql: a marts model sits in sql/marts/<domain>/"):
        discover(_tree(tmp_path / "a", {"marts/m.sql": view.format(n="m")}))
    with pytest.raises(SpecdecError, match=r"intermediate/misc/i\.sql: .*a domain one of"):
        discover(_tree(tmp_path / "b", {"intermediate/misc/i.sql": view.format(n="i")}))
    with pytest.raises(SpecdecError, match=r"speedup/m\.sql: a mart is computed into a table at build: kind TABLE"):
        discover(_tree(tmp_path / "c", {"marts/speedup/m.sql": view.format(n="m")}))
    with pytest.raises(SpecdecError, match=r"staging/x/s\.sql: a staging model sits in sql/staging/ itself"):
        discover(_tree(tmp_path / "d", {"staging/x/s.sql": view.format(n="s")}))


def test_every_shipped_model_has_a_header_and_sits_where_its_layer_says():
    models = discover()
    assert len(models) > 50
    for m in models:
        assert m.header.name == m.name
        assert (m.domain == "") == (m.layer == "staging"), m.path
        assert m.domain == "" or m.domain in DOMAINS, m.path
        assert m.layer != "marts" or m.materialized, m.name
        assert not m.sql.lstrip().upper().startswith("MODEL"), m.name


def test_pyproject_ships_every_sql_folder():
    """A domain folder that pyproject.toml does not list would be left out of the wheel."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    root = sql_root()
    folders = {p.parent for p in root.rglob("*.sql") if p.parent != root}
    for folder in folders:
        package = ".".join(("specdec.sql", *folder.relative_to(root).parts))
        assert package in config["packages"], package
        assert config["package-data"][package] == ["*.sql"], package


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> list[duckdb.DuckDBPyConnection]:
    """The databases of three test runs: the synthetic run, the lossless run and a run of named arms."""
    base = tmp_path_factory.mktemp("grain")
    (base / "synthetic").mkdir()
    runs = [write_run(base / "synthetic"), make_run(base / "lossless"), write_named_run(base / "named")]
    cons = [duckdb.connect(str(build(run)), read_only=True) for run in runs]
    yield cons
    for con in cons:
        con.close()


def test_every_models_grain_names_its_columns_and_one_row(built):
    """The grain is a key: its columns exist and no two rows share them (NULLs counted as equal),
    on every test run. A model whose rows double (a join that fans out) fails here."""
    problems, rows_seen = [], 0
    for m in discover():
        for con in built:
            columns = {r[0] for r in con.execute(f"describe {m.name}").fetchall()}
            missing = [c for c in m.header.grain if c not in columns]
            if missing:
                problems.append(f"{m.name}: grain column(s) {missing} not among its columns")
                break
            keys = ", ".join(m.header.grain)
            total, dup = con.execute(
                f"select (select count(*) from {m.name}), "
                f"(select count(*) from (select {keys} from {m.name} group by all having count(*) > 1))"
            ).fetchone()
            rows_seen += total
            if dup:
                problems.append(f"{m.name}: {dup} grain value(s) with more than one row")
    assert problems == []
    assert rows_seen > 1000  # the runs fill the models: the check reads rows
