MODEL (name step_timing, kind TABLE, grain (run_id, arm, level));
-- Grain: one row per run_id, arm and level.
-- Purpose: where engine time goes, per engine step (a step's timings are the
--   whole batch's and repeat on every row of that step, so steps are
--   de-duplicated on (process_token, step_index) first: process_token, not pid,
--   because a restarted engine can reuse a PID and restarts its step counter).
--   steps              distinct decode steps of replayed requests
--   verify_ms_mean     mean target forward + sampling time per step [ms]
--   draft_ms_mean      mean drafter time per step that verified drafts [ms];
--                      NULL when no drafter ran (baseline)
--   draft_share        sum(draft_ms) / (sum(draft_ms) + sum(verify_ms)) over steps with drafts
--   batch_size_mean    mean requests per step
--   (The rows of replayed requests: stg_rounds joined to int_engine_requests, the same rows
--   as int_rounds_attributed, looked up per engine request instead of parsed per row. A row
--   whose step scheduled one request, batch_size = 1, is the only row of its step, so it is
--   a step as it is; only the rows of larger batches are grouped into steps: the same steps,
--   and most steps of a run (every step at concurrency 1) skip the grouping. The steps are
--   grouped by level_key, a number for (run_id, arm, level), instead of those three
--   columns, and by the level alone: int_engine_steps groups the same steps by five
--   columns, which at 50 million rounds costs this mart 1.3-1.6 CPU s more. The
--   rows are not materialized for the two kinds of step (rounds is read by both): DuckDB
--   would store all 50 million joined rows first, 0.3-0.9 CPU s more than joining twice.)
with engine as (
    select run_id, source_run_id, engine_key, arm, level,
           dense_rank() over (order by run_id, arm, level) as level_key
    from int_engine_requests
    where replayed
),
levels as (
    select distinct level_key, run_id, arm, level from engine
),
rounds as not materialized (
    select e.level_key, r.process_token, r.step_index, r.batch_size, r.verify_ms, r.draft_ms
    from stg_rounds r
    join engine e on e.source_run_id = r.run_id and e.engine_key = id_key(r.engine_request_id)
    where r.phase = 'decode'
),
steps as (
    select level_key, batch_size, verify_ms, draft_ms
    from rounds
    where batch_size = 1
    union all
    select level_key,
           any_value(batch_size) as batch_size,
           any_value(verify_ms) as verify_ms,
           max(draft_ms) as draft_ms
    from rounds
    where batch_size <> 1
    group by level_key, process_token, step_index
),
per_level as (
    select
        level_key,
        count(*) as steps,
        avg(verify_ms) as verify_ms_mean,
        avg(draft_ms) as draft_ms_mean,
        sum(draft_ms) / nullif(sum(draft_ms) + sum(verify_ms) filter (where draft_ms is not null), 0) as draft_share,
        avg(batch_size) as batch_size_mean
    from steps
    group by level_key
),
final as (
    select levels.run_id, levels.arm, levels.level,
           per_level.steps, per_level.verify_ms_mean, per_level.draft_ms_mean, per_level.draft_share,
           per_level.batch_size_mean
    from per_level
    join levels using (level_key)
)
select * from final order by run_id, arm, level
