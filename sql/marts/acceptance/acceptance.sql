MODEL (name acceptance, kind TABLE, grain (run_id, arm, category));
-- Grain: one row per run_id, arm and category (pooled over the run's levels
--   and repeats; never over runs).
-- Purpose: draft acceptance under two explicit definitions, from the captured rounds.
--   A verify round is a captured row with tokens_proposed > 0 (k > 0).
--   mean_acceptance_length   = mean_acceptance_length(sum(tokens_accepted), verify_rounds)
--                              per-round definition (sql/macros.sql), pooled over all
--                              rounds [tokens per verify round, the bonus token included]
--   acceptance_rate          = acceptance_rate(sum(tokens_accepted), sum(tokens_proposed))
--                              per-token definition (sql/macros.sql), pooled [fraction]
--   decode_steps_no_draft    = decode rows with k = 0 (nothing proposed); not rounds,
--                              excluded from both denominators, counted here
--   rounds_all_rejected      = verify rounds with tokens_accepted = 0
--   Both ratios are NULL (not applicable) when there are no verify rounds.
--   (The rows of int_rounds_attributed, read counted from int_round_counts: a group of n
--   rounds with k proposed and a accepted adds n rounds, n k and n a.)
with rounds as (
    select * from int_round_counts
),
final as (
    select
        run_id, arm, category,
        cast(coalesce(sum(rounds) filter (where is_verify_round), 0) as bigint) as verify_rounds,
        coalesce(sum(tokens_proposed * rounds), 0) as tokens_proposed,
        coalesce(sum(tokens_accepted * rounds), 0) as tokens_accepted,
        mean_acceptance_length(sum(tokens_accepted * rounds), sum(rounds) filter (where is_verify_round))
            as mean_acceptance_length,
        acceptance_rate(sum(tokens_accepted * rounds), sum(tokens_proposed * rounds)) as acceptance_rate,
        cast(coalesce(sum(rounds) filter (where phase = 'decode' and not is_verify_round), 0) as bigint)
            as decode_steps_no_draft,
        cast(coalesce(sum(rounds) filter (where is_verify_round and tokens_accepted = 0), 0) as bigint)
            as rounds_all_rejected
    from rounds
    group by run_id, arm, category
)
select * from final order by run_id, arm, category
