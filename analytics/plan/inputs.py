"""The planner's inputs staged from a built database: three temporary tables computed in one
pass per input over the rounds (``STAGE_SQL``), and their cache beside the database
(``<db>.plan-inputs``) so only the first plan of a database computes them. ``data.py`` reads them.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from specdec.atomic import atomic_write_with

__all__ = ["REQUESTS_TABLE", "ROUNDS_TABLE", "STAGE_SQL", "STEPS_TABLE", "cache_path", "stage", "staged"]

log = logging.getLogger("specdec.analytics.plan")

#: Temporary tables (this connection only; a read-only connection may create them) holding what
#: the planner reads of the rounds: the replayed requests' engine request ids (REQUESTS_TABLE,
#: dropped once the others exist), the speculative arm's decode rounds counted per request, k_r,
#: a_r and context bucket (ROUNDS_TABLE: int_round_counts' rows of that arm and phase, summed over
#: the engine requests) and the decode-only steps grouped (STEPS_TABLE: int_plan_steps' rows).
#: Computed once per connection by ``STAGE_SQL``, not by reading those two views: after the build
#: they are views over the Parquet rows, and each took two passes over every round (its own and
#: int_engine_requests', which counts every round again to find the engine request ids); at 51.9
#: million rounds staging them cost 19.3-20.4 CPU s, this 11.9-13.2 (load 10-11;
#: ``benchmarks/plan_scale.py --staging``). The rows are the same: tests/plan/test_plan_inputs.py
#: holds them equal to the two views', whose headers define them (an edit to either model must
#: be made here too; the test says where they part).
REQUESTS_TABLE = "plan_replayed_requests"
ROUNDS_TABLE = "plan_speculative_rounds"
STEPS_TABLE = "plan_steps"
#: Each statement creates one of the three tables, in order. The requests: int_engine_requests'
#: replayed rows, from the distinct engine request ids of the rounds (one pass over one column).
#: The rounds: grouped per engine request before the join (2.5 million groups, not 51.9 million
#: rows joined); context_low as int_round_groups buckets it. The steps: int_engine_steps' and
#: int_plan_steps' SQL, the rows looked up in REQUESTS_TABLE (one pass, no second
#: int_engine_requests), the level numbered from its distinct values.
STAGE_SQL = (
    f"""create temp table if not exists {REQUESTS_TABLE} as
    with engine as (
        select distinct run_id, engine_request_id from stg_rounds
    ),
    parsed as (
        select run_id, engine_request_id, request_id_of(engine_request_id) as request_id from engine
    ),
    requests as (
        select run_id, source_run_id, request_id, arm, concurrency, repeat, category from stg_requests
    )
    select requests.run_id, parsed.run_id as source_run_id, parsed.engine_request_id, requests.request_id,
           requests.arm, requests.concurrency, coalesce(requests.repeat, 0) as repeat, requests.category
    from parsed
    join requests on requests.source_run_id = parsed.run_id and requests.request_id = parsed.request_id""",
    f"""create temp table if not exists {ROUNDS_TABLE} as
    with rounds as (
        select run_id as source_run_id, engine_request_id, tokens_proposed, tokens_accepted,
               case when context_len < 256 then 0
                    when context_len < 512 then 256
                    when context_len < 1024 then 512
                    when context_len < 2048 then 1024
                    when context_len < 4096 then 2048
                    else 4096 end as context_low,
               count(*) as rounds
        from stg_rounds
        where phase = 'decode'
        group by all
    )
    select r.run_id, r.category, r.request_id, r.repeat, rounds.context_low, rounds.tokens_proposed,
           rounds.tokens_accepted, sum(rounds.rounds) as rounds
    from rounds
    join {REQUESTS_TABLE} r using (source_run_id, engine_request_id)
    where r.arm = 'speculative'
    group by all""",
    f"""create temp table if not exists {STEPS_TABLE} as
    with levels as (
        select run_id, source_run_id, arm, concurrency, row_number() over () as level_key
        from (select distinct run_id, source_run_id, arm, concurrency from {REQUESTS_TABLE})
    ),
    engine as (
        select r.source_run_id, r.engine_request_id, levels.level_key
        from {REQUESTS_TABLE} r
        join levels using (run_id, source_run_id, arm, concurrency)
    ),
    rounds as (
        select e.level_key, r.process_token, r.step_index, r.phase, r.batch_size, r.tokens_proposed, r.verify_ms,
               r.draft_ms
        from stg_rounds r
        join engine e on e.source_run_id = r.run_id and e.engine_request_id = r.engine_request_id
    ),
    steps as (
        select level_key,
               phase = 'prefill' as has_prefill,
               phase = 'decode' as has_decode,
               case when phase = 'decode' then batch_size end as batch_size,
               case when phase = 'decode' then verify_ms end as verify_ms,
               case when phase = 'decode' then draft_ms end as draft_ms,
               tokens_proposed as drafts_verified,
               tokens_proposed as max_proposed
        from rounds
        where batch_size = 1
        union all
        select level_key,
               bool_or(phase = 'prefill') as has_prefill,
               bool_or(phase = 'decode') as has_decode,
               any_value(batch_size) filter (where phase = 'decode') as batch_size,
               any_value(verify_ms) filter (where phase = 'decode') as verify_ms,
               max(draft_ms) filter (where phase = 'decode') as draft_ms,
               cast(sum(tokens_proposed) as bigint) as drafts_verified,
               max(tokens_proposed) as max_proposed
        from rounds
        where batch_size <> 1
        group by level_key, process_token, step_index
    ),
    grouped as (
        select level_key, has_prefill, batch_size, drafts_verified,
               max(max_proposed) as max_proposed,
               count(*) as steps,
               count(verify_ms) as verify_steps,
               sum(verify_ms) as verify_ms_sum,
               sum(verify_ms * verify_ms) as verify_ms_sumsq,
               count(draft_ms) as draft_steps,
               sum(draft_ms) as draft_ms_sum,
               sum(draft_ms * draft_ms) as draft_ms_sumsq
        from steps
        group by level_key, has_prefill, has_decode, batch_size, drafts_verified
    ),
    arm_k as (
        select run_id, arm, concurrency, max(g.max_proposed) as arm_k
        from grouped g
        join levels using (level_key)
        group by run_id, arm, concurrency
    )
    select levels.run_id, levels.source_run_id, levels.arm, levels.concurrency, g.batch_size, g.drafts_verified,
           any_value(arm_k.arm_k) as arm_k,
           cast(sum(g.steps) as bigint) as steps,
           cast(sum(g.verify_steps) as bigint) as verify_steps,
           sum(g.verify_ms_sum) as verify_ms_sum,
           sum(g.verify_ms_sumsq) as verify_ms_sumsq,
           cast(sum(g.draft_steps) as bigint) as draft_steps,
           sum(g.draft_ms_sum) as draft_ms_sum,
           sum(g.draft_ms_sumsq) as draft_ms_sumsq
    from grouped g
    join levels using (level_key)
    join arm_k using (run_id, arm, concurrency)
    where not g.has_prefill
    group by levels.run_id, levels.source_run_id, levels.arm, levels.concurrency, g.batch_size, g.drafts_verified
    order by levels.run_id, levels.arm, levels.concurrency, g.batch_size, g.drafts_verified""",
)


#: Bump when what the cache holds changes in a way its key (the staging SQL's text) does not show.
CACHE_VERSION = 1


def cache_path(db: Path) -> Path:
    """The planner's inputs cache of the database ``db``: ``<db>.plan-inputs``, a DuckDB file beside it."""
    return Path(db).with_name(Path(db).name + ".plan-inputs")


def _cache_key(db: Path) -> str:
    """The database file as it is (size, modification time, inode: a rebuild renames a new file
    over it) and the staging SQL: a cache written for another file, or by other SQL, is not read."""
    st = Path(db).stat()
    sql = hashlib.sha256("\n".join(STAGE_SQL).encode()).hexdigest()
    return json.dumps([CACHE_VERSION, st.st_size, st.st_mtime_ns, st.st_ino, sql])


def staged(con) -> bool:
    """Whether this connection holds the planner's inputs (``stage``)."""
    names = [ROUNDS_TABLE, STEPS_TABLE]
    found = con.execute(
        "select count(*) from duckdb_tables() where temporary and list_contains(?, table_name)", [names]
    ).fetchone()[0]
    return found == len(names)


def stage(con, db: Path | None = None) -> None:
    """Create the temporary tables (once per connection). With ``db`` (the database file ``con``
    reads), through a cache beside it (``cache_path``): read from it when it was written for this
    file, else computed and written to it, so only the first plan of a database computes them
    from the rounds. The cache holds what that first plan read: the views read the Parquet files
    in place, so rows added to them after the build reach neither the marts nor the cache (a
    rebuild replaces the database and so invalidates the cache). A cache that cannot be read or
    written is logged and skipped: the inputs are then computed."""
    if staged(con):
        return
    key = _cache_key(db) if db is not None else None
    if db is not None and _read_cache(con, cache_path(db), key):
        return
    for sql in STAGE_SQL:
        con.execute(sql)
    con.execute(f"drop table {REQUESTS_TABLE}")
    if db is not None:
        _write_cache(con, cache_path(db), key)


def _read_cache(con, path: Path, key: str | None) -> bool:
    import duckdb  # heavy: only when planning (the caller holds a connection already)

    if not path.is_file():
        return False
    try:
        con.execute("attach ? as plan_cache (read_only)", [str(path)])
    except duckdb.Error as e:
        log.warning("planner inputs cache %s not read: %s", path, e)
        return False
    try:
        if con.execute("select key from plan_cache.cache_key").fetchone()[0] != key:
            return False
        for table in (ROUNDS_TABLE, STEPS_TABLE):
            con.execute(f"create temp table {table} as select * from plan_cache.{table}")
        return True
    except duckdb.Error as e:
        log.warning("planner inputs cache %s not read: %s", path, e)
        for table in (ROUNDS_TABLE, STEPS_TABLE):
            con.execute(f"drop table if exists temp.{table}")
        return False
    finally:
        con.execute("detach plan_cache")


def _write_cache(con, path: Path, key: str | None) -> None:
    import duckdb  # heavy: only when planning

    def write(tmp: Path) -> None:
        con.execute("attach ? as plan_cache_new (read_write)", [str(tmp)])
        try:
            con.execute("create table plan_cache_new.cache_key as select ? as key", [key])
            for table in (ROUNDS_TABLE, STEPS_TABLE):
                con.execute(f"create table plan_cache_new.{table} as select * from temp.{table}")
        finally:
            con.execute("detach plan_cache_new")

    try:
        atomic_write_with(path, write)
    except (OSError, duckdb.Error) as e:
        log.warning("planner inputs cache %s not written: %s", path, e)
