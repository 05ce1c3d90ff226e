MODEL (name int_natural_ends, kind VIEW, grain (run_id, level, prompt_id));
-- Grain: one row per run_id, level and prompt that has a successful baseline
--   lossless-pass request at repeat 0 (stg_greedy_checks).
-- Purpose: where the model would have stopped without ignore_eos, looked up once
--   for the models that split a request there (int_natural_end_pairs; the same
--   lookup as acceptance_natural_end's).
--   natural_end_position  min over those requests (the earliest, if the prompt was sent
--                         more than once) of stg_greedy_checks.natural_end_position:
--                         the first output position (0-based) whose greedy token was
--                         end-of-sequence [position]. NULL: it never was within
--                         max_tokens, or the end-of-sequence ids are unknown (eos_known)
--   eos_known             true when every such request knew the end-of-sequence ids
--                         (false for an external server: then natural_end_position is NULL
--                         and means "unknown", not "never ended")
--   The baseline's lossless pass at the level stands for both arms: in float32 the same
--   prompt gives the same text in both; in bfloat16 it is where the baseline at that
--   level would have stopped.
with checks as (
    select * from stg_greedy_checks where arm = 'baseline' and success and repeat = 0
),
final as (
    select
        run_id,
        level,
        prompt_id,
        min(natural_end_position) as natural_end_position,
        bool_and(eos_token_ids is not null) as eos_known
    from checks
    group by all
)
select * from final
