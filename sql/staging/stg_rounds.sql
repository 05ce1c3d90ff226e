MODEL (name stg_rounds, kind VIEW, grain (run_id, engine_request_id, process_token, step_index));
-- Grain: one row per run_id, request and engine step that emitted tokens (RoundTrace).
-- Purpose: the captured engine trace, typed, with the client request id
--   recovered from vLLM's engine request id ("chatcmpl-<X-Request-Id>-<8 hex>").
-- Columns: as schemas.records.RoundTrace, plus
--   request_id   client request id (macro request_id_of, sql/macros.sql; NULL if the id
--                has another shape)
--   is_verify_round  tokens_proposed > 0 (the target verified drafts this step)
--   step_drafts_verified  drafts the runner put into the step's verify forward, whole batch
--                (Model Runner V2 only; below the step's sum of tokens_proposed only under
--                DSpark adaptive verification); NULL when not measured, and in files
--                written before the column existed
with source as (
    select * from raw_rounds
),
final as (
    select
        run_id, engine_request_id, request_id_of(engine_request_id) as request_id,
        pid,
        process_token,
        step_index,
        round_index,
        phase,
        tokens_proposed,
        tokens_accepted,
        tokens_emitted,
        batch_size,
        num_scheduled_tokens,
        context_len,
        draft_ms,
        verify_ms,
        wall_time_ns,
        step_drafts_verified,
        tokens_proposed > 0 as is_verify_round
    from source
)
select * from final
