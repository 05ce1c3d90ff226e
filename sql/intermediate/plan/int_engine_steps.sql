MODEL (name int_engine_steps, kind VIEW, grain (run_id, source_run_id, arm, concurrency, has_prefill, has_decode, batch_size, drafts_verified));
-- Grain: one row per run_id, arm, concurrency level (and source_run_id, the run folder's id),
--   has_prefill, has_decode, batch_size and drafts_verified of the engine steps of replayed
--   requests: the steps, counted by what the models over engine steps describe them by.
-- Purpose: the engine steps, grouped for int_plan_steps (the steps without a prefill row),
--   with the counts and sums it pools. The planner stages the same steps itself, in one pass
--   with the rounds each category met (analytics/plan/inputs.py; tests/plan/test_plan_inputs.py
--   holds its decode-only steps equal to int_plan_steps'). (step_timing groups the same
--   steps by the level alone, on its own: grouped by these five columns, they cost it 1.3-1.6
--   CPU s more at 50 million rounds, and the build does not compute this model.) A step is (process_token, step_index) of the rows of
--   replayed requests (process_token, not pid: a restarted engine can reuse a PID and restarts
--   its step counter); a step's timings and batch size are the whole batch's and repeat on each
--   of its rows, so a step counts once. The rows are stg_rounds joined to int_engine_requests
--   (the same rows as int_rounds_attributed, looked up per engine request instead of parsed per
--   row). A row whose step scheduled one request, batch_size = 1, is the only row of its step,
--   so it is a step as it is; only the rows of larger batches are grouped into steps (the same
--   steps, and most steps of a run, every step at concurrency 1, skip the grouping). Steps are
--   grouped by a number per level (dense_rank of run_id, source_run_id, arm, concurrency)
--   instead of those four columns: the same groups, and at 50 million rounds 1.6 s less. The
--   sums let a reader pool the steps of several groups exactly as over the steps.
--   has_prefill, has_decode   the step has a prefill row, a decode row
--   batch_size        requests scheduled in the step (RoundTrace.batch_size), from its decode
--                     rows; NULL for a step without one
--   drafts_verified   D: sum of tokens_proposed over the step's rows (draft tokens the target
--                     verified in the step, whole batch; 0 for the baseline)
--   max_proposed      the largest tokens_proposed of any row of the group's steps
--   steps             steps in the group
--   verify_steps, verify_ms_sum, verify_ms_sumsq   steps with verify_ms measured, the sum and
--                     the sum of squares of their verify_ms [ms, ms^2]; a step's verify_ms (the
--                     target forward + sampling time) is that of its decode rows
--   draft_steps, draft_ms_sum, draft_ms_sumsq   the same for draft_ms (the drafter's time, the
--                     largest of the step's decode rows'; steps where a drafter ran); 0 steps
--                     and NULL sums for the baseline
--   verify_ms_sum_drafted   sum of verify_ms over the steps with draft_ms [ms]
with engine as (
    select run_id, source_run_id, engine_key, arm, concurrency,
           dense_rank() over (order by run_id, source_run_id, arm, concurrency) as level_key
    from int_engine_requests
    where replayed
),
levels as (
    select distinct level_key, run_id, source_run_id, arm, concurrency from engine
),
rounds as (
    select e.level_key, r.process_token, r.step_index, r.phase, r.batch_size, r.tokens_proposed, r.verify_ms,
           r.draft_ms
    from stg_rounds r
    join engine e on e.source_run_id = r.run_id and e.engine_key = id_key(r.engine_request_id)
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
    select level_key, has_prefill, has_decode, batch_size, drafts_verified,
           max(max_proposed) as max_proposed,
           count(*) as steps,
           count(verify_ms) as verify_steps,
           sum(verify_ms) as verify_ms_sum,
           sum(verify_ms * verify_ms) as verify_ms_sumsq,
           count(draft_ms) as draft_steps,
           sum(draft_ms) as draft_ms_sum,
           sum(draft_ms * draft_ms) as draft_ms_sumsq,
           sum(verify_ms) filter (where draft_ms is not null) as verify_ms_sum_drafted
    from steps
    group by level_key, has_prefill, has_decode, batch_size, drafts_verified
),
final as (
    select levels.run_id, levels.source_run_id, levels.arm, levels.concurrency, grouped.* exclude (level_key)
    from grouped
    join levels using (level_key)
)
select * from final
