MODEL (name int_engine_steps, kind VIEW, grain (run_id, source_run_id, arm, level, has_prefill, has_decode, batch_size, drafts_verified, prefill_tokens));
-- Grain: one row per run_id, arm, level (and source_run_id, the run folder's id),
--   has_prefill, has_decode, batch_size, drafts_verified and prefill_tokens of the engine steps
--   of replayed requests: the steps, counted by what the planner describes them by.
-- Purpose: the engine steps, grouped, with the counts and sums the planner pools
--   (int_plan_steps; `specdec plan`, analytics/plan/inputs.py). This file is the one definition:
--   the planner runs this SQL itself, on its own table of the replayed engine requests in place
--   of int_engine_requests (computed once per plan instead of once per model that reads it), with
--   the per-category counts it adds at the met_ marker comments (one column per category of the
--   run: the step's decode rounds of that category's successful requests); here the markers are
--   comments and add nothing. (step_timing groups the same steps by the level alone, on its own:
--   grouped by these columns, they cost it 1.3-1.6 CPU s more at 50 million rounds, and the build
--   does not compute this model.) A step is (process_token, step_index) of the rows of replayed
--   requests (process_token, not pid: a restarted engine can reuse a PID and restarts its step
--   counter); a step's timings and batch size are the whole batch's and repeat on each of its
--   rows, so a step counts once. The rows are stg_rounds joined to int_engine_requests (the same
--   rows as int_rounds_attributed, looked up per engine request instead of parsed per row). A row
--   whose step scheduled one request, batch_size = 1, is the only row of its step, so it is a
--   step as it is; only the rows of larger batches are grouped into steps (the same steps, and
--   most steps of a run, every step at concurrency 1, skip the grouping). Steps are grouped by a
--   number per level (dense_rank of run_id, source_run_id, arm, level) instead of those four
--   columns: the same groups, and at 50 million rounds 1.6 s less. The sums let a reader pool the
--   steps of several groups exactly as over the steps. A step time that is NaN, infinite or
--   negative is read as not measured (NULL) and counted (verify_bad, draft_bad): the planner
--   refuses a run that holds any unless told to leave them out (analytics/plan/guards.py).
--   has_prefill, has_decode   the step has a prefill row, a decode row
--   batch_size        requests scheduled in the step (RoundTrace.batch_size)
--   drafts_verified   D: sum of tokens_proposed over the step's rows (draft tokens the target
--                     verified in the step, whole batch; 0 for the baseline)
--   prefill_tokens    P: the prompt tokens the step's prefill rows scheduled (sum of
--                     num_scheduled_tokens; 0 for a step without a prefill row)
--   max_proposed      the largest tokens_proposed of any row of the group's steps
--   steps             steps in the group
--   verify_steps, verify_ms_sum, verify_ms_sumsq   steps with verify_ms measured, the sum and
--                     the sum of squares of their verify_ms [ms, ms^2]; a step's verify_ms is the
--                     target forward + sampling time
--   draft_steps, draft_ms_sum, draft_ms_sumsq   the same for draft_ms (the drafter's time, the
--                     largest of the step's decode rows'; steps where a drafter ran); 0 steps
--                     and NULL sums for the baseline
--   engine_ms_sum     sum over the steps of verify_ms + draft_ms (0 where no drafter ran) [ms]
--   verify_bad, draft_bad   rows of the group's steps whose verify_ms, draft_ms was NaN,
--                     infinite or negative
with engine as (
    select run_id, source_run_id, engine_key, arm, level,
           dense_rank() over (order by run_id, source_run_id, arm, level) as level_key
           /*met_engine*/
    from int_engine_requests
    where replayed
),
levels as (
    select distinct level_key, run_id, source_run_id, arm, level from engine
),
rounds as (
    select e.level_key, r.process_token, r.step_index, r.phase, r.batch_size, r.tokens_proposed,
           r.num_scheduled_tokens,
           case when isfinite(r.verify_ms) and r.verify_ms >= 0 then r.verify_ms end as verify_ms,
           case when isfinite(r.draft_ms) and r.draft_ms >= 0 then r.draft_ms end as draft_ms,
           coalesce(not (isfinite(r.verify_ms) and r.verify_ms >= 0), false) as verify_bad,
           coalesce(not (isfinite(r.draft_ms) and r.draft_ms >= 0), false) as draft_bad
           /*met_rounds*/
    from stg_rounds r
    join engine e on e.source_run_id = r.run_id and e.engine_key = id_key(r.engine_request_id)
),
steps as (
    select level_key,
           phase = 'prefill' as has_prefill,
           phase = 'decode' as has_decode,
           batch_size,
           verify_ms,
           case when phase = 'decode' then draft_ms end as draft_ms,
           cast(tokens_proposed as bigint) as drafts_verified,
           tokens_proposed as max_proposed,
           cast(case when phase = 'prefill' then num_scheduled_tokens else 0 end as bigint) as prefill_tokens,
           cast(verify_bad as integer) as verify_bad,
           cast(draft_bad as integer) as draft_bad
           /*met_single*/
    from rounds
    where batch_size = 1
    union all
    select level_key,
           bool_or(phase = 'prefill') as has_prefill,
           bool_or(phase = 'decode') as has_decode,
           any_value(batch_size) as batch_size,
           any_value(verify_ms) as verify_ms,
           max(draft_ms) filter (where phase = 'decode') as draft_ms,
           cast(sum(tokens_proposed) as bigint) as drafts_verified,
           max(tokens_proposed) as max_proposed,
           cast(coalesce(sum(num_scheduled_tokens) filter (where phase = 'prefill'), 0) as bigint)
               as prefill_tokens,
           cast(count(*) filter (where verify_bad) as integer) as verify_bad,
           cast(count(*) filter (where draft_bad) as integer) as draft_bad
           /*met_grouped*/
    from rounds
    where batch_size <> 1
    group by level_key, process_token, step_index
),
grouped as (
    select level_key, has_prefill, has_decode, batch_size, drafts_verified, prefill_tokens /*met_columns*/,
           max(max_proposed) as max_proposed,
           count(*) as steps,
           count(verify_ms) as verify_steps,
           sum(verify_ms) as verify_ms_sum,
           sum(verify_ms * verify_ms) as verify_ms_sumsq,
           count(draft_ms) as draft_steps,
           sum(draft_ms) as draft_ms_sum,
           sum(draft_ms * draft_ms) as draft_ms_sumsq,
           sum(verify_ms + coalesce(draft_ms, 0)) as engine_ms_sum,
           cast(sum(verify_bad) as bigint) as verify_bad,
           cast(sum(draft_bad) as bigint) as draft_bad
    from steps
    group by level_key, has_prefill, has_decode, batch_size, drafts_verified, prefill_tokens /*met_columns*/
),
final as (
    select levels.run_id, levels.source_run_id, levels.arm, levels.level, grouped.* exclude (level_key)
    from grouped
    join levels using (level_key)
)
select * from final
