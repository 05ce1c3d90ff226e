"""The database file the build writes: in DuckDB 1.0's storage format, so an analyst's
notebook on any DuckDB from 1.0 opens it (DuckDB 2.0's own format is refused by 1.x);
and the build's start does not import pandas (0.2 s of every build for nothing)."""

from __future__ import annotations

import subprocess
import sys

import duckdb

from specdec.analytics.build import STORAGE_VERSION, build
from tests.support.synthetic_run import write_run


def test_the_database_is_written_in_the_storage_format_of_duckdb_1_0(tmp_path):
    db = build(write_run(tmp_path))
    con = duckdb.connect(str(db), read_only=True)
    try:
        tags = con.execute("select tags from duckdb_databases() where database_name = ?", [db.stem]).fetchone()[0]
        assert con.execute("select count(*) from acceptance").fetchone()[0] > 0
    finally:
        con.close()
    assert STORAGE_VERSION == "v1.0.0"
    assert tags["storage_version"] == "v1.0.0+"  # a file in DuckDB 2.0's own format says v2.0.0+


def test_a_build_imports_no_pandas(tmp_path):
    run = write_run(tmp_path)
    code = (
        "import sys; from pathlib import Path; from specdec.analytics.build import build; "
        f"build(Path({str(run)!r})); print('pandas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_the_fills_read_only_what_their_sql_names_and_each_mart_is_stored_with_its_view(tmp_path):
    """The computed tables' fills are found to read the models their SQL names, not the ones their
    prose mentions (intervals.py's docstrings name the ``speedup`` mart, which reads the fill's
    table): a mart outside that set gets its view only with its stored table, its SQL bound once.
    Every mart still ends as a view over its stored table."""
    from specdec.analytics.build import _named_by_fills
    from specdec.analytics.sql_models import discover

    models = discover()
    named = {m.name for m in _named_by_fills(models)}
    assert {"int_requests_paired", "int_blocks_paired", "speedup_weighted"} <= named
    assert "speedup" not in named and "throughput" not in named
    con = duckdb.connect(str(build(write_run(tmp_path))), read_only=True)
    marts = [m.name for m in models if m.layer == "marts"]
    views = dict(con.execute("select view_name, sql from duckdb_views() where not internal").fetchall())
    stored = {
        r[0] for r in con.execute("select table_name from duckdb_tables() where schema_name = 'stored'").fetchall()
    }
    assert set(marts) <= stored
    assert all("stored" in views[m] for m in marts)
