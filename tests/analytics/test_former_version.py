"""A run folder written before schema version 3 (the names until 2026-12-07: ``FORMER_NAMES``,
the level key in a column called ``concurrency``, the manifest's keys in another field) is read
under today's names: alone, under full and footer validation, and beside a run of today's
version in one folder (one raw view over files of both versions)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from specdec.analytics.build import build
from specdec.errors import InputFileError
from specdec.schemas.records import FORMER_NAMES, SCHEMA_VERSION
from tests.support.synthetic_run import make_counters, make_manifest, make_requests, make_rounds, write_run

THEN = FORMER_NAMES["2"]
QUERIES = {
    "speedup": "select category, level, speedup, label from speedup order by all",
    "level_health": "select arm, level, requests_ok from level_health order by all",
    "reconciliation": "select arm, level, capture_present from reconciliation order by all",
    "levels": "select run_id, manifest->>'$.levels' from stg_manifest order by all",
}


def _run(root: Path, run_id: str) -> Path:
    (root / run_id).mkdir(parents=True)
    relabel = lambda records: [r.model_copy(update={"run_id": run_id}) for r in records]  # noqa: E731
    return write_run(
        root / run_id,
        relabel(make_counters()),
        requests=relabel(make_requests()),
        rounds=relabel(make_rounds()),
        manifest=make_manifest(run_id=run_id),
    )


def _as_version_2(run_dir: Path) -> None:
    """Rewrite a run folder of today's version as version 2 wrote it."""
    for path in sorted(run_dir.rglob("*.parquet")):
        table = pq.read_table(path)
        meta = {**(table.schema.metadata or {}), b"schema_version": b"2"}
        renamed = table.rename_columns([THEN.get(n, n) for n in table.column_names])
        pq.write_table(renamed.replace_schema_metadata(meta), path)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest = {THEN.get(k, k): v for k, v in manifest.items()} | {"schema_version": "2"}
    (run_dir / "manifest.json").write_text(json.dumps(manifest))


def _read(db: Path) -> dict[str, list[tuple]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return {name: con.execute(sql).fetchall() for name, sql in QUERIES.items()}


@pytest.mark.parametrize("validate", ["full", "footer"])
def test_a_version_2_run_reads_as_today(tmp_path, validate):
    today = _read(build(_run(tmp_path / "now", "t"), validate=validate))
    old = _run(tmp_path / "then", "t")
    _as_version_2(old)
    assert pq.read_schema(old / "requests.parquet").names.count("concurrency") == 1
    assert json.loads((old / "manifest.json").read_text())[THEN["levels"]] == [1, 2]
    assert _read(build(old, validate=validate)) == today
    assert today["levels"] == [("t", "[1,2]")] and len(today["speedup"]) >= 4


def test_runs_of_both_versions_in_one_folder(tmp_path):
    _run(tmp_path, "a")
    _as_version_2(_run(tmp_path, "b"))
    db = build(tmp_path)
    assert _read(db)["levels"] == [("a", "[1,2]"), ("b", "[1,2]")]
    with duckdb.connect(str(db), read_only=True) as con:  # one view reads both runs' files
        (view,) = con.execute("select sql from duckdb_views() where view_name = 'raw_requests'").fetchone()
    assert re.search(r'coalesce\("?level"?, "?concurrency"?\)', view, re.I) and "union_by_name = true" in view
    alone = _read(build(_run(tmp_path / "alone", "a")))
    for name in ("speedup", "level_health", "reconciliation"):
        with duckdb.connect(str(db), read_only=True) as con:
            per_run = {
                r: con.execute(f"{QUERIES[name].split(' order by')[0]} where run_id = ? order by all", [r]).fetchall()
                for r in ("a", "b")
            }
        assert per_run["a"] == per_run["b"] == alone[name], name


def test_an_unknown_version_is_named(tmp_path):
    run = _run(tmp_path, "t")
    path = run / "requests.parquet"
    table = pq.read_table(path)
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, b"schema_version": b"9"}), path)
    with pytest.raises(InputFileError, match=f"schema_version is '9', this specdec reads '2' or '{SCHEMA_VERSION}'"):
        build(run)
