"""What each SQL model reads is kept in the specdec cache (``sql_models.relations_read``): a process
that finds a text there does not import sqlglot nor parse it; an unreadable file, one written
for another sqlglot or parse version, or a changed text is parsed again; SQL that does not
parse is still an error naming its file."""

from __future__ import annotations

import json

import pytest

from specdec.analytics import sql_models
from specdec.errors import SpecdecError


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """A cache folder of its own, and the process's memory of the cache and the parses cleared
    (as in a new process)."""
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    parse = sql_models._relations

    def clear():
        sql_models._cache.cache_clear()
        parse.cache_clear()

    clear()
    yield clear
    clear()


def _no_parse(monkeypatch):
    def fail(sql):
        raise AssertionError("parsed, not read from the cache")

    monkeypatch.setattr(sql_models, "_relations", fail)


def test_a_second_process_reads_the_models_from_the_cache(fresh, monkeypatch, tmp_path):
    first = sql_models.discover()
    stored = json.loads((tmp_path / "sql-relations.json").read_text())
    assert len(stored["relations"]) == len(first) and "sqlglot" in stored["stamp"]
    fresh()
    _no_parse(monkeypatch)
    again = sql_models.discover()
    assert [(m.name, m.depends_on, m.sources) for m in again] == [(m.name, m.depends_on, m.sources) for m in first]


def test_a_damaged_or_foreign_cache_is_parsed_again(fresh, monkeypatch, tmp_path):
    sql = "with x as (select * from raw_rounds) select * from x join stg_requests using (run_id)"
    want = sql_models.relations_read(sql)
    assert want == {"raw_rounds", "stg_requests"}
    sql_models._save_cache()
    path = tmp_path / "sql-relations.json"
    for damage in ("{not json", json.dumps({"stamp": "sqlglot 0.0; parse 0", "relations": {}}), "[]"):
        path.write_text(damage)
        fresh()
        assert sql_models.relations_read(sql) == want
    # a changed text is its own entry
    fresh()
    assert sql_models.relations_read(sql.replace("stg_requests", "stg_rounds")) == {"raw_rounds", "stg_rounds"}


def test_sql_that_does_not_parse_is_an_error_naming_its_file(fresh):
    with pytest.raises(SpecdecError, match="bad.sql: the SQL does not parse"):
        sql_models.relations_read("select from where (", "bad.sql")
    assert not sql_models._cache()["relations"]


def test_an_unwritable_cache_is_skipped(fresh, monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(blocker))
    fresh()
    assert sql_models.discover()
