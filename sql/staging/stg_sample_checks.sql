MODEL (name stg_sample_checks, kind VIEW, grain (run_id, request_id));
-- Grain: one row per run_id and request of the sampling-mode check (SampleCheck): a prompt
--   with temperature > 0 sent once per seed of a fixed seed list, per arm and
--   level, logprobs on, apart from the timed requests (specdec.replay.passes.sampling).
-- Purpose: the sample record, typed. Nothing is derived here.
-- Columns: as schemas.records.SampleCheck, in its field order.
--   sequence_logprob      sum of the emitted tokens' logprobs under the target [nats];
--                         NULL when the request failed
--   natural_end_position  first position (0-based) whose emitted token was
--                         end-of-sequence; NULL if none within max_tokens, or unknown
--                         (eos_token_ids NULL)
--   token_ids             the generated token ids; NULL when the request failed, or in a
--                         file written before they were recorded
--   rescored_logprob_sum  sum of the generated tokens' logprobs under the reference arm's
--                         server by teacher forcing (prompt logprobs of prompt + token_ids,
--                         specdec.replay.passes.rescore) [nats]: one instrument for both arms;
--                         NULL when not re-scored
--   rescored_by           arm whose server re-scored it; NULL when not re-scored
--   not_rescored_reason   why rescored_logprob_sum is NULL (failed sample, no prompt token
--                         ids, the re-scoring request's error); NULL when re-scored, and in
--                         files written before re-scoring existed
--   run_id, arm: the analysis run and the role in it (by_role, sql/macros.sql; a classic
--   run's own); arm_name: the arm's own name; source_run_id: the run folder's id.
with source as (
    select * from by_role('raw_sample_checks')
),
final as (
    -- every field of the record, in its order: the raw view casts each to the record's type, and
    -- tests/analytics/test_sql_models.py holds the columns to the record's fields
    select *
    from source
)
select * from final
