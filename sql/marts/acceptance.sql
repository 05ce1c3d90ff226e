-- acceptance
-- Grain: one row per run_id, arm and category (pooled over the run's concurrency levels
--   and repeats; never over runs).
-- Purpose: draft acceptance under two explicit definitions, from the captured rounds.
--   A verify round is a captured row with tokens_proposed > 0 (k > 0).
--   mean_acceptance_length   = 1 + sum(tokens_accepted) / verify_rounds
--                              per-round definition, pooled over all rounds (vLLM's
--                              "mean acceptance length"; includes the bonus token)
--   acceptance_rate          = sum(tokens_accepted) / sum(tokens_proposed)
--                              per-token definition, pooled (vLLM's "draft acceptance rate")
--   decode_steps_no_draft    = decode rows with k = 0 (nothing proposed); not rounds,
--                              excluded from both denominators, counted here
--   rounds_all_rejected      = verify rounds with tokens_accepted = 0
--   Both ratios are NULL (not applicable) when there are no verify rounds.
with rounds as (
    select * from int_rounds_attributed
),
final as (
    select
        run_id,
        arm,
        category,
        count(*) filter (where is_verify_round) as verify_rounds,
        coalesce(sum(tokens_proposed), 0) as tokens_proposed,
        coalesce(sum(tokens_accepted), 0) as tokens_accepted,
        1 + sum(tokens_accepted) / nullif(count(*) filter (where is_verify_round), 0) as mean_acceptance_length,
        sum(tokens_accepted) / nullif(sum(tokens_proposed), 0) as acceptance_rate,
        count(*) filter (where phase = 'decode' and not is_verify_round) as decode_steps_no_draft,
        count(*) filter (where is_verify_round and tokens_accepted = 0) as rounds_all_rejected
    from rounds
    group by run_id, arm, category
)
select * from final order by run_id, arm, category

