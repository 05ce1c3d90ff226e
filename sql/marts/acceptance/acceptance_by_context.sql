MODEL (name acceptance_by_context, kind TABLE, grain (run_id, arm, category, context_bucket));
-- Grain: one row per run_id, arm, category and context-length bucket that has verify
--   rounds, pooled over the run's levels and repeats.
-- Purpose: does acceptance hold up as the context grows (long prompts, long outputs)?
--   context_len is the request's tokens already computed before the round's step
--   (prompt + output so far), from the capture.
--   context_bucket      '0-255', '256-511', '512-1023', '1024-2047', '2048-4095', '4096+'
--                       (powers of two from 256; the boundaries are context_low and
--                       context_high, high exclusive, NULL for the last)
--   context_low, context_high  the bucket's bounds [tokens]
--   verify_rounds       rounds (tokens_proposed > 0) in the bucket
--   requests            distinct requests with a round in the bucket
--   mean_acceptance_length  mean_acceptance_length(sum(tokens_accepted), verify_rounds)
--                       (sql/macros.sql; per-round, as acceptance)
--   acceptance_rate     acceptance_rate(sum(tokens_accepted), sum(tokens_proposed))
--                       (sql/macros.sql; per-token, as acceptance)
--   tokens_per_round    tokens_per_round(sum(tokens_emitted), verify_rounds) (sql/macros.sql):
--                       mean tokens_emitted per verify round: the tokens one target
--                       forward yields for this request in this bucket (the bonus token
--                       included), the per-step throughput speculation buys
--   (Read counted from int_round_counts, which buckets context_len as above.)
with rounds as (
    select * from int_round_counts where is_verify_round
),
final as (
    select
        run_id, arm, category,
        case when context_low = 4096 then '4096+'
             else context_low || '-' || (case when context_low = 0 then 256 else context_low * 2 end - 1) end
            as context_bucket,
        context_low,
        case when context_low = 4096 then null when context_low = 0 then 256 else context_low * 2 end as context_high,
        cast(sum(rounds) as bigint) as verify_rounds,
        count(distinct request_key) as requests,
        mean_acceptance_length(sum(tokens_accepted * rounds), sum(rounds)) as mean_acceptance_length,
        acceptance_rate(sum(tokens_accepted * rounds), sum(tokens_proposed * rounds)) as acceptance_rate,
        tokens_per_round(sum(tokens_emitted), sum(rounds)) as tokens_per_round
    from rounds
    group by all
)
select * from final order by run_id, arm, category, context_low
