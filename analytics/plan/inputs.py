"""The planner's inputs staged from a built database: three temporary tables computed in one
pass per input over the rounds (``STAGE_SQL``), and their cache beside the database
(``<db>.plan-inputs``) so only the first plan of a database computes them. ``data.py`` reads them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path

from specdec.analytics import sql_header
from specdec.analytics.sql_models import sql_root
from specdec.atomic import atomic_write_with
from specdec.errors import SpecdecError

__all__ = [
    "MAX_CATEGORIES",
    "MET_TABLE",
    "ROUNDS_TABLE",
    "STAGE_SQL",
    "STEPS_TABLE",
    "TABLES",
    "cache_path",
    "stage",
    "staged",
    "statements",
]

log = logging.getLogger("specdec.analytics.plan")

#: Temporary tables (this connection only; a read-only connection may create them) holding what
#: the planner reads of the rounds: the speculative arm's decode rounds counted per request, k_r,
#: a_r and context bucket (ROUNDS_TABLE: int_round_counts' rows of that arm and phase, summed over
#: the engine requests), the steps grouped by their regressors (STEPS_TABLE: int_plan_steps' rows)
#: and what each category's decode rounds met (MET_TABLE). The steps are the SQL models
#: int_engine_steps and int_plan_steps themselves, run here on a table of the replayed engine
#: requests (REQUESTS_TABLE) in place of int_engine_requests, and on GROUPED_TABLE (int_engine_steps'
#: rows, with the counts per category) in place of int_engine_steps: after the build the views read
#: the Parquet rows, and int_engine_requests counts every round again to find the engine request
#: ids, once per model that reads it; computed once here, at 51.9 million rounds staging took
#: 11.9-13.2 CPU s against 19.3-20.4 through the views (load 10-11; ``benchmarks/plan_scale.py
#: --staging``), and 16.0-16.6 with the rounds met counted beside the steps (11.9-12.4 without,
#: side by side, load 9-11). Each step's categories are counted in one integer column per
#: category of the run (``met_<key>``, written at int_engine_steps' met_ marker comments for
#: the run's categories by ``statements``; any number of them): as a list of small integers per
#: step the step statement took 8.3-8.5 CPU s against 7.0-7.4 (51.9M rounds, 3 categories,
#: alternated, load 2.3-2.6; /tmp/i23s/met.py, 2026-12-03), with the category strings 14.2-15.5
#: (load 9-11); one integer packing 16 bits per category held at most 8.
#: tests/plan/test_plan_inputs.py holds the tables equal to the views' rows.
#: The helper tables (REQUESTS_TABLE, GROUPED_TABLE) are dropped once the others exist
#: (``HELPER_TABLES``).
REQUESTS_TABLE = "plan_replayed_requests"
GROUPED_TABLE = "plan_steps_grouped"
ROUNDS_TABLE = "plan_speculative_rounds"
STEPS_TABLE = "plan_steps"
MET_TABLE = "plan_rounds_met"
TABLES = (ROUNDS_TABLE, STEPS_TABLE, MET_TABLE)
HELPER_TABLES = (REQUESTS_TABLE, GROUPED_TABLE)


def _model_sql(name: str, reads: dict[str, str]) -> str:
    """The SQL of the model ``name`` (sql/intermediate/plan/<name>.sql, after its header), each
    relation it reads that ``reads`` names replaced by the table given there."""
    path = sql_root() / "intermediate" / "plan" / f"{name}.sql"
    sql = sql_header.parse(path.read_text(), path)[1]
    for relation, table in reads.items():
        sql = re.sub(rf"\b{relation}\b", table, sql)
    return sql


#: Each statement creates one table, in order. The requests: int_engine_requests' replayed rows
#: (its columns that int_engine_steps reads, and the category and success the counts per category
#: read), from the distinct engine request ids of the rounds (one pass over one column). The
#: rounds: grouped per engine request before the join (2.5 million groups, not 51.9 million rows
#: joined); context_low as int_round_groups buckets it. The grouped steps: int_engine_steps, each
#: category's decode rounds in the step counted beside the step's own figures (a successful
#: request's category; a failed request's rows count for none). The steps: int_plan_steps. The
#: rounds met: per analysis run, arm, level and category, the sums over the category's decode
#: rounds of their steps' batch size, drafts verified, prompt tokens prefilled and verify + draft
#: ms, and the category's successful requests' mean TTFT and decode time (e2e - TTFT, over the
#: requests with rounds captured).
STAGE_SQL = (
    f"""create temp table if not exists {REQUESTS_TABLE} as
    with engine as (
        select distinct run_id, engine_request_id from stg_rounds
    ),
    parsed as (
        select run_id, engine_request_id, request_id_of(engine_request_id) as request_id from engine
    ),
    requests as (
        select run_id, source_run_id, request_id, arm, level, repeat, category, success from stg_requests
    ),
    categories as (
        select category, cast(row_number() over (order by category) as usmallint) as category_key
        from (select distinct category from stg_requests)
    )
    select requests.run_id, parsed.run_id as source_run_id, parsed.engine_request_id,
           id_key(parsed.engine_request_id) as engine_key, true as replayed, requests.request_id,
           requests.arm, requests.level, coalesce(requests.repeat, 0) as repeat, requests.category,
           requests.success, categories.category_key
    from parsed
    join requests on requests.source_run_id = parsed.run_id and requests.request_id = parsed.request_id
    join categories using (category)""",
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
    f"create temp table if not exists {GROUPED_TABLE} as\n"
    + _model_sql("int_engine_steps", {"int_engine_requests": REQUESTS_TABLE}),
    f"create temp table if not exists {STEPS_TABLE} as\n"
    + _model_sql("int_plan_steps", {"int_engine_steps": GROUPED_TABLE}),
    f"""create temp table if not exists {MET_TABLE} as
    with met as (
        /*met_rows*/
    ),
    rounds as (
        select met.run_id, met.arm, met.level, categories.category,
               cast(sum(met.rounds * met.steps) as bigint) as decode_rounds,
               sum(met.rounds * met.steps * met.batch_size) as batch_sum,
               sum(met.rounds * met.steps * met.drafts_verified) as drafts_sum,
               sum(met.rounds * met.steps * met.prefill_tokens) as prefill_tokens_sum,
               sum(met.rounds * met.engine_ms_sum) as engine_ms_sum
        from met
        join (select distinct category_key, category from {REQUESTS_TABLE}) categories using (category_key)
        group by all
    ),
    captured as (
        select distinct run_id, arm, level, repeat, request_id from {REQUESTS_TABLE} where success
    ),
    requests as (
        select q.run_id, q.arm, q.level, q.category,
               avg(q.ttft_ms) as ttft_ms_mean,
               sum(q.e2e_ms - q.ttft_ms) filter (where c.request_id is not null) as decode_ms_sum
        from stg_requests q
        left join captured c
          on c.run_id = q.run_id and c.arm = q.arm and c.level = q.level
         and c.repeat = coalesce(q.repeat, 0) and c.request_id = q.request_id
        where q.success
        group by all
    )
    select rounds.*, requests.ttft_ms_mean, requests.decode_ms_sum
    from rounds
    join requests using (run_id, arm, level, category)
    order by run_id, arm, level, category""",
)


#: The most categories the staging takes: it counts each step's decode rounds in one column per
#: category (``met_<key>``), part of the steps' group key, so its memory and time grow with their
#: number (issue 42: 10,000 categories over 7 GB). Staged alone on synthetic tables of 800,000
#: rounds, 40,000 requests (a one-off script, 2026-12-06, load 3-6): 16 categories 0.5 s and
#: 0.32 GB peak RSS, 64: 1.5 s and 0.58 GB, 128: 3.3-3.4 s and 0.75-0.95 GB, 256: 12.1-34.9 s
#: and 1.4-1.5 GB, 1,000: 200 s and 5.2 GB. A run with more is refused before anything is staged.
MAX_CATEGORIES = 64

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
    names = list(TABLES)
    found = con.execute(
        "select count(*) from duckdb_tables() where temporary and list_contains(?, table_name)", [names]
    ).fetchone()[0]
    return found == len(names)


def _met_text(marker: str, keys: list[int]) -> str:
    """What ``marker`` of STAGE_SQL stands for, given the run's category keys: one count column per
    category (``met_<key>``: the step's decode rounds of that category's successful requests) and,
    for MET_TABLE, one row per (group of steps, category) that met any (``rounds``: that count)."""
    if marker == "met_single":
        return "".join(
            f", cast(phase = 'decode' and category is not distinct from {k} as integer) as met_{k}" for k in keys
        )
    if marker == "met_grouped":
        return "".join(f", count(*) filter (where phase = 'decode' and category = {k}) as met_{k}" for k in keys)
    if marker == "met_columns":
        return "".join(f", met_{k}" for k in keys)
    if marker == "met_engine":
        return ", case when success then category_key end as category" if keys else ""
    if marker == "met_rounds":
        return ", e.category" if keys else ""
    rows = [
        f"""select run_id, arm, level, cast({k} as usmallint) as category_key, met_{k} as rounds, steps,
               batch_size, drafts_verified, prefill_tokens, engine_ms_sum
        from {GROUPED_TABLE} where met_{k} > 0"""
        for k in keys
    ]
    # no category (no successful request): no row, with the columns the statement reads
    return "\n        union all\n        ".join(rows) or (
        "select '' as run_id, '' as arm, 0 as level, cast(0 as usmallint) as category_key, 0 as rounds, "
        "0 as steps, 0 as batch_size, 0 as drafts_verified, 0 as prefill_tokens, 0.0 as engine_ms_sum where false"
    )


def statements(con) -> Iterator[str]:
    """STAGE_SQL in order, ready to run on ``con``: a statement's ``/*met_...*/`` markers filled with
    the run's category keys, read from REQUESTS_TABLE once the first statement has made it."""
    keys: list[int] | None = None
    for sql in STAGE_SQL:
        if "/*met_" in sql:
            if keys is None:
                keys = [
                    r[0]
                    for r in con.execute(f"select distinct category_key from {REQUESTS_TABLE} order by 1").fetchall()
                ]
            for marker in _MET_MARKERS:
                sql = sql.replace(f"/*{marker}*/", _met_text(marker, keys))
        yield sql


_MET_MARKERS = ("met_engine", "met_rounds", "met_single", "met_grouped", "met_columns", "met_rows")


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
    _check_categories(con)
    key = _cache_key(db) if db is not None else None
    if db is not None and _read_cache(con, cache_path(db), key):
        return
    for sql in statements(con):
        con.execute(sql)
    for table in HELPER_TABLES:
        con.execute(f"drop table {table}")
    if db is not None:
        _write_cache(con, cache_path(db), key)


def _check_categories(con) -> None:
    """Refuse a run of more than MAX_CATEGORIES categories before staging it (one pass over the
    requests, not the rounds)."""
    n = con.execute("select count(distinct category) from stg_requests").fetchone()[0]
    if n > MAX_CATEGORIES:
        raise SpecdecError(
            f"{n} categories: the planner plans at most {MAX_CATEGORIES} (its staging counts each step's decode "
            "rounds per category, one column each, and grows with their number); merge small categories, or plan "
            "a part of the traffic"
        )


def _interrupted() -> bool:
    """Whether SIGTERM or SIGINT arrived (``analytics.build.interruptible``): a cache error is then
    the interrupt's, not the cache's, and goes on up."""
    from specdec.analytics.build import pending  # heavy: only when planning

    return pending() is not None


def _is_ours(key: object) -> bool:
    """Whether ``key`` is a cache key as ``_cache_key`` writes them (of this file or of another)."""
    try:
        parsed = json.loads(key) if isinstance(key, str) else None
    except ValueError:
        return False
    return isinstance(parsed, list) and len(parsed) == 5 and isinstance(parsed[0], int)


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
        keys = [r[0] for r in con.execute("select key from plan_cache.cache_key").fetchall()]
        if len(keys) != 1 or not _is_ours(keys[0]):
            log.warning(
                "planner inputs cache %s not read: it holds %s, not one key of the planner's (a damaged or "
                "foreign file); the inputs are computed again and the cache written anew",
                path,
                f"{len(keys)} keys" if len(keys) != 1 else f"the key {str(keys[0])[:40]!r}",
            )
            return False
        if keys[0] != key:
            return False  # written for another database file (rebuilt since) or by other SQL
        for table in TABLES:
            con.execute(f"create temp table {table} as select * from plan_cache.{table}")
        return True
    except Exception as e:  # a damaged or foreign file: whatever DuckDB or the reading raises
        if _interrupted():
            raise
        log.warning("planner inputs cache %s not read (computed again): %s", path, " ".join(str(e).split()))
        for table in TABLES:
            con.execute(f"drop table if exists temp.{table}")
        return False
    finally:
        con.execute("detach plan_cache")


def _write_cache(con, path: Path, key: str | None) -> None:
    import duckdb  # heavy: only when planning

    def write(tmp: Path) -> None:
        try:
            con.execute("attach ? as plan_cache_new (read_write)", [str(tmp)])
            try:
                con.execute("create table plan_cache_new.cache_key as select ? as key", [key])
                for table in TABLES:
                    con.execute(f"create table plan_cache_new.{table} as select * from temp.{table}")
            finally:
                con.execute("detach if exists plan_cache_new")
        finally:
            Path(f"{tmp}.wal").unlink(missing_ok=True)  # DuckDB's log of the temporary file, also when interrupted

    try:
        atomic_write_with(path, write)
    except (OSError, duckdb.Error) as e:
        if _interrupted():
            raise
        log.warning("planner inputs cache %s not written: %s", path, e)
