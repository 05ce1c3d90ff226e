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
--   (The steps are int_engine_steps' with a decode row, timed from their decode rows; that
--   model groups the rows of replayed requests into steps, once for this mart and the
--   planner's int_plan_steps, and counts them with the sums these means pool.)
with steps as (
    select * from int_engine_steps where has_decode
),
final as (
    select
        run_id, arm, concurrency,
        cast(sum(steps) as bigint) as steps,
        sum(verify_ms_sum) / nullif(sum(verify_steps), 0) as verify_ms_mean,
        sum(draft_ms_sum) / nullif(sum(draft_steps), 0) as draft_ms_mean,
        sum(draft_ms_sum) / nullif(sum(draft_ms_sum) + sum(verify_ms_sum_drafted), 0) as draft_share,
        sum(batch_size * steps) / sum(steps) as batch_size_mean
    from steps
    group by run_id, arm, concurrency
)
select * from final order by run_id, arm, concurrency
