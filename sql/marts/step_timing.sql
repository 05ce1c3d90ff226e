-- step_timing
-- Grain: one row per run_id, arm and concurrency level.
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
with steps as (
    select run_id, arm, concurrency, process_token, step_index,
           any_value(batch_size) as batch_size,
           any_value(verify_ms) as verify_ms,
           max(draft_ms) as draft_ms
    from int_rounds_attributed
    where phase = 'decode'
    group by run_id, arm, concurrency, process_token, step_index
),
final as (
    select
        run_id, arm, concurrency,
        count(*) as steps,
        avg(verify_ms) as verify_ms_mean,
        avg(draft_ms) as draft_ms_mean,
        sum(draft_ms) / nullif(sum(draft_ms) + sum(verify_ms) filter (where draft_ms is not null), 0) as draft_share,
        avg(batch_size) as batch_size_mean
    from steps
    group by run_id, arm, concurrency
)
select * from final order by run_id, arm, concurrency

