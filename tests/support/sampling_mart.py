"""Build the sampling mart from SampleCheck rows, as ``analytics build`` does:
raw -> stg_sample_checks -> sampling_tests -> sampling; and hand-built
SampleCheck rows for it (``check``, ``two_arms``)."""

from __future__ import annotations

import duckdb

from specdec.analytics import sampling_check as st
from specdec.analytics.sql_models import discover, macros_sql
from specdec.arms import create_roles_table
from specdec.schemas.arrow import table_from_records
from specdec.schemas.records import SampleCheck
from tests.support.duck import rows

EOS = [2]


def check(
    arm: str,
    prompt: str,
    k: int,
    logprob: float | None,
    end: int | None = None,
    *,
    category: str = "chat",
    level: int = 1,
    success: bool = True,
    max_tokens: int = 32,
    eos: list[int] | None = EOS,
    rescored: float | None = None,
    tokens: list[int] | None = None,
    by: str | None = "baseline",
) -> SampleCheck:
    """A sample; ``rescored`` and ``tokens`` (the new fields) None: as a file before they existed."""
    return SampleCheck(
        run_id="t",
        arm=arm,
        level=level,
        request_id=f"{arm}.{level}.{prompt}.{k}",
        prompt_id=prompt,
        category=category,
        sample_index=k,
        seed=1000 + k,
        temperature=1.0,
        max_tokens=max_tokens,
        success=success,
        error_type=None if success else "http_status",
        output_tokens=max_tokens if success else None,
        sequence_logprob=logprob if success else None,
        natural_end_position=end,
        eos_token_ids=eos,
        token_ids=tokens if success else None,
        rescored_logprob_sum=rescored if success else None,
        rescored_by=by if rescored is not None and success else None,
    )


def two_arms(
    base: list[float], spec: list[float], ends=None, prompts: int = 4, rescored=None, tokens=None, **kw
) -> list[SampleCheck]:
    """Sample i of each arm goes to prompt i % prompts, sample index i // prompts.
    ``rescored``, ``tokens``: (baseline, speculative) lists of the new fields' values."""
    ends = ends or (None, None)
    rescored, tokens = rescored or (None, None), tokens or (None, None)
    out = []
    for j, (arm, values, end) in enumerate((("baseline", base, ends[0]), ("speculative", spec, ends[1]))):
        for i, v in enumerate(values):
            e = end[i] if isinstance(end, list) else end
            out.append(
                check(
                    arm,
                    f"p{i % prompts}",
                    i // prompts,
                    v,
                    e,
                    rescored=None if rescored[j] is None else rescored[j][i],
                    tokens=None if tokens[j] is None else tokens[j][i],
                    **kw,
                )
            )
    return out


def roles(con) -> None:
    """What build creates before the staging models: the macros, and the (empty) table of
    analysis runs that by_role reads."""
    con.execute(macros_sql())
    create_roles_table(con)


def no_pass_counters(con) -> None:
    """The sampling mart also reads the pass counters and the manifest: empty here (pass_valid NULL)."""
    con.execute(
        "create table int_passes_checked (run_id varchar, arm varchar, level integer, "
        "pass_kind varchar, draft_tokens double, speculation_ran boolean)"
    )
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
