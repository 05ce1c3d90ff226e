"""Fixtures of the analytics tests: the synthetic run of
tests/support/synthetic_run.py written to a temporary folder, and a query on
its built database."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from specdec.analytics.build import build
from tests.support.duck import rows
from tests.support.synthetic_run import write_run


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_run(tmp_path)


@pytest.fixture
def query(run_dir: Path):
    """query(sql) -> rows as dicts. The database is built on the first call, so a
    test may rewrite the run's files before querying."""
    con = None

    def run(sql: str) -> list[dict]:
        nonlocal con
        con = con or duckdb.connect(str(build(run_dir)), read_only=True)
        return rows(con, sql)

    yield run
    if con is not None:
        con.close()
