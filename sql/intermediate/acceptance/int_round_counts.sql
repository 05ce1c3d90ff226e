MODEL (name int_round_counts, kind TABLE, grain (run_id, engine_key, phase, tokens_proposed, tokens_accepted, context_low));
-- Grain: one row per run_id, engine request of a replayed request, phase,
--   tokens_proposed, tokens_accepted and context bucket that has captured rounds: the rows
--   of int_rounds_attributed, counted (int_round_groups of replayed requests).
-- Kind TABLE: computed once at build, so the marts over the rounds (acceptance,
--   acceptance_by_context, acceptance_definitions, acceptance_natural_end,
--   acceptance_positions, reconciliation) read a few rows per request instead of every
--   captured row, without each joining the groups to their requests again (at 50 million
--   rounds, 2.5 million groups: half a second per mart).
-- Purpose: the captured rounds of the run's replayed requests, with the request's
--   attributes.
--   arm, level, repeat, category, request_key   of the replayed request
--                   (int_engine_requests; request_key stands for its request_id, which
--                   int_engine_requests maps it back to)
--   engine_key, phase, tokens_proposed, tokens_accepted, context_low,
--   rounds, tokens_emitted   as in int_round_groups
--   (The request and engine request are integers, not their id strings: at 50 million
--   rounds the join took 0.68 s against 1.31 with the strings, and the table is read by
--   six marts; a mart that needs a request's id or attributes joins its requests by
--   id_key(request_id), which int_engine_requests holds free of clashes.)
--   is_verify_round  tokens_proposed > 0
with grouped as (
    select * from int_round_groups
),
engine as (
    select * from int_engine_requests where replayed
),
final as (
    select
        engine.arm, engine.level, engine.repeat, engine.category,
        engine.run_id, engine.request_key, grouped.engine_key,
        grouped.phase, grouped.tokens_proposed, grouped.tokens_accepted,
        grouped.tokens_proposed > 0 as is_verify_round,
        grouped.context_low, grouped.rounds, grouped.tokens_emitted
    from grouped
    join engine on engine.source_run_id = grouped.run_id and engine.engine_key = grouped.engine_key
)
select * from final
