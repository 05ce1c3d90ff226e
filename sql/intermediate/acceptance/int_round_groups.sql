MODEL (name int_round_groups, kind TABLE, grain (run_id, engine_key, phase, tokens_proposed, tokens_accepted, context_low));
-- Grain: one row per run_id, engine request (engine_key), phase, tokens_proposed, tokens_accepted
--   and context bucket that has captured rounds (stg_rounds): every captured row,
--   replayed request or not, counted.
-- Kind TABLE: computed once at build in the one pass over every captured row's
--   counts that the models over the rounds share (a few rows per request instead of one per
--   request and engine step; the engine request ids are grouped by their engine_key, an
--   integer, not parsed per row: at 50 million rounds, 3.3 million groups, the table held 426
--   MiB with the id strings and 271 with the integer, and grouping took 1.92 s against 1.67;
--   int_engine_requests maps each key back to its id).
-- Purpose: the rounds, counted, with nothing lost that a round model defines a figure by
--   (the per-step timings are step_timing's, read from stg_rounds; the engines and wall
--   times are capture_acceptance's, likewise).
--   engine_key      id_key(engine_request_id) (sql/macros.sql) of the rows' engine request
--   phase, tokens_proposed, tokens_accepted   as in stg_rounds
--   context_low     the context-length bucket of the rows' context_len: 0, 256, 512, 1024,
--                   2048, 4096 (powers of two from 256, high exclusive; acceptance_by_context
--                   names them)
--   rounds          captured rows in the group
--   tokens_emitted  sum of their tokens_emitted
with rounds as (
    select
        run_id, id_key(engine_request_id) as engine_key, phase, tokens_proposed, tokens_accepted, tokens_emitted,
        case when context_len < 256 then 0
             when context_len < 512 then 256
             when context_len < 1024 then 512
             when context_len < 2048 then 1024
             when context_len < 4096 then 2048
             else 4096 end as context_low
    from stg_rounds
),
final as (
    select run_id, engine_key, phase, tokens_proposed, tokens_accepted, context_low,
           count(*) as rounds, sum(tokens_emitted) as tokens_emitted
    from rounds
    group by all
)
select * from final
