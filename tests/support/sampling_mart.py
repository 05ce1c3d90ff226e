"""Build the sampling mart from SampleCheck rows, as ``analytics build`` does:
raw -> stg_sample_checks -> sampling_tests -> sampling."""

from __future__ import annotations

import duckdb

from specdec.analytics import sampling_test as st
from specdec.analytics.models import discover, macros_sql
from specdec.arms import create_roles_table
from specdec.schemas.arrow import table_from_records
from specdec.schemas.records import SampleCheck
from tests.support.duck import rows


def roles(con) -> None:
    """What build creates before the staging models: the macros, and the (empty) table of
    analysis runs that by_role reads."""
    con.execute(macros_sql())
    create_roles_table(con)


def no_pass_counters(con) -> None:
    """The sampling mart also reads the pass counters and the manifest: empty here (pass_valid NULL)."""
    con.execute("create table int_passes_checked (run_id varchar, arm varchar, concurrency integer, "
                "pass_kind varchar, draft_tokens double, speculation_ran boolean)")
    con.execute("create table stg_manifest (run_id varchar, manifest json, treatment_arm varchar)")


def mart(records) -> list[dict]:
    """The sampling mart's rows from SampleCheck records or an Arrow table of them."""
    con = duckdb.connect()
    con.register("_raw", records if hasattr(records, "schema") else table_from_records(SampleCheck, records))
    con.execute("create table raw_sample_checks as select * from _raw")
    roles(con)
    models = {m.name: m for m in discover()}
    con.execute(f"create view stg_sample_checks as\n{models['stg_sample_checks'].sql}")
    st.create_table(con)
    no_pass_counters(con)
    con.execute(f"create view sampling as\n{models['sampling'].sql}")
    st.fill(con)
    return rows(con, "select * from sampling")


def by_stat(rows: list[dict], **where) -> dict[str, dict]:
    """The rows matching ``where``, by statistic."""
    return {r["statistic"]: r for r in rows if all(r[k] == v for k, v in where.items())}
