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
