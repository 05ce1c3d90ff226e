MODEL (name int_plan_steps, kind VIEW, grain (run_id, source_run_id, arm, level, has_prefill, has_decode, batch_size, drafts_verified, prefill_tokens));
-- Grain: one row per run_id, arm, level, has_prefill, has_decode, batch_size,
--   drafts_verified and prefill_tokens of the engine steps of replayed requests (steps grouped by
--   their regressors); source_run_id (the run folder's id) beside run_id, so the arms of one run
--   of named arms (a --sweep-k run: one analysis run per k) can be fitted together. A reference
--   arm's steps are in every analysis run that compares against it.
-- Purpose: the steps of the planner's step-cost fit (`specdec plan`, analytics/plan/fit.py):
--   verify ms as a function of batch size, drafted tokens verified in the step and prompt tokens
--   prefilled (the steps with a prefill row, has_prefill, and the decode-only ones), draft ms as
--   a function of batch size (and k, across arms of a sweep) over the decode-only steps. The
--   planner runs this SQL itself on its own staging of int_engine_steps (that model's header says
--   how; analytics/plan/inputs.py). A step is (process_token, step_index) of the rows of replayed
--   requests (as step_timing: a step's timings are the whole batch's and repeat on each of its
--   rows). The sums make the least-squares fit on the groups equal the fit on every step: the
--   regressors are constant in a group.
--   steps             steps in the group
--   has_prefill, has_decode   the steps have a prefill row, a decode row
--   batch_size        requests scheduled in the step (RoundTrace.batch_size)
--   drafts_verified   D: sum of tokens_proposed over the step's rows (draft tokens the
--                     target verified in the step, whole batch; 0 for the baseline)
--   prefill_tokens    P: the prompt tokens the step's prefill rows scheduled (0 without one)
--   arm_k             the largest tokens_proposed of any row of the arm at the level
--                     (the arm's k as observed; 0 for the baseline)
--   verify_ms_sum, verify_ms_sumsq   sum and sum of squares of the steps' verify_ms [ms, ms^2]
--                     (steps with verify_ms NULL are not counted: verify_steps)
--   verify_steps      steps of the group with verify_ms measured
--   draft_ms_sum, draft_ms_sumsq, draft_steps   the same for draft_ms (steps where a
--                     drafter ran); 0 steps and NULL sums for the baseline
--   verify_bad, draft_bad   rows whose verify_ms, draft_ms was NaN, infinite or negative
with steps as (
    select * from int_engine_steps
),
arm_k as (
    select run_id, arm, level, max(max_proposed) as arm_k from steps group by run_id, arm, level
),
final as (
    select s.run_id, s.source_run_id, s.arm, s.level, s.batch_size, s.drafts_verified,
           any_value(a.arm_k) as arm_k,
           cast(sum(s.steps) as bigint) as steps,
           cast(sum(s.verify_steps) as bigint) as verify_steps,
           sum(s.verify_ms_sum) as verify_ms_sum,
           sum(s.verify_ms_sumsq) as verify_ms_sumsq,
           cast(sum(s.draft_steps) as bigint) as draft_steps,
           sum(s.draft_ms_sum) as draft_ms_sum,
           sum(s.draft_ms_sumsq) as draft_ms_sumsq,
           s.has_prefill,
           s.has_decode,
           s.prefill_tokens,
           cast(sum(s.verify_bad) as bigint) as verify_bad,
           cast(sum(s.draft_bad) as bigint) as draft_bad
    from steps s
    join arm_k a on a.run_id = s.run_id and a.arm = s.arm and a.level = s.level
    group by s.run_id, s.source_run_id, s.arm, s.level, s.has_prefill, s.has_decode, s.prefill_tokens,
             s.batch_size, s.drafts_verified
)
select * from final
order by run_id, arm, level, has_prefill, has_decode, prefill_tokens, batch_size, drafts_verified
