MODEL (name acceptance_natural_end, kind TABLE, grain (run_id, category, level, segment));
-- Grain: one row per run_id, category, level and segment (before / after
--   the natural end) of the speculative arm's greedy (temperature = 0) timed requests,
--   pooled over repeats.
-- Purpose: with ignore_eos and a fixed length the model often runs past where it
--   would have stopped, into repetitive text that drafts predict well; this splits
--   draft acceptance at that point so the tail cannot flatter the figure.
--   The natural end of a prompt (int_natural_ends) is stg_greedy_checks.natural_end_position of the
--   baseline's lossless-pass request for the same prompt at the same level (repeat 0;
--   the earliest if the prompt was sent more than once): the first position whose
--   greedy token was end-of-sequence. In float32 the same prompt gives the same text
--   in both arms; in bfloat16 it is where the baseline at that level would have stopped.
--   A verify round's first drafted output position (0-based) is
--     context_len - prompt_tokens + 1
--   (context_len: tokens computed before the step; the last sampled token is the step's
--   input, the drafts follow it). A round is assigned by that position, so a round that
--   straddles the end counts as before it.
--   segment          'before_natural_end'  first drafted position < natural end, or the
--                                          prompt never ended within max_tokens
--                    'after_natural_end'   first drafted position >= natural end
--                    'unknown'             no successful baseline lossless-pass request for
--                                          the prompt at this level, end-of-sequence ids
--                                          unknown (external server), or no prompt_tokens
--   requests         speculative requests with at least one verify round in the segment
--   verify_rounds    captured rows with tokens_proposed > 0
--   tokens_proposed, tokens_accepted   summed over those rounds
--   mean_acceptance_length   mean_acceptance_length(tokens_accepted, verify_rounds)
--                    (sql/macros.sql, as acceptance; includes the bonus token; NULL without
--                    verify rounds)
--   acceptance_rate  acceptance_rate(tokens_accepted, tokens_proposed) (sql/macros.sql;
--                    NULL when none proposed)
--   The speedup split at the same natural end is speedup_natural_end (time to the natural
--   end from the server's per-chunk running token count, exact to one chunk).
--   How (int_engine_requests places each request): a request whose rounds all fall in one
--   segment ('unknown', or a prompt that never ended) is read counted from
--   int_round_counts; only the rounds of requests split at a natural end are read one by
--   one (stg_rounds), each placed by its context_len.
with engine as (
    select * from int_engine_requests where replayed and arm = 'speculative' and temperature = 0
),
whole as (
    select engine.run_id, engine.category, engine.level, engine.request_id,
           engine.natural_end_segment as segment, counted.rounds,
           counted.tokens_proposed * counted.rounds as proposed, counted.tokens_accepted * counted.rounds as accepted
    from int_round_counts counted
    join engine on engine.run_id = counted.run_id and engine.engine_key = counted.engine_key
    where counted.is_verify_round and engine.natural_end_segment is not null
),
split as (
    select engine.run_id, engine.category, engine.level, engine.request_id,
           case when rounds.context_len < engine.natural_end_context then 'before_natural_end'
                else 'after_natural_end' end as segment,
           1 as rounds, rounds.tokens_proposed as proposed, rounds.tokens_accepted as accepted
    from stg_rounds rounds
    join (select * from engine where natural_end_context is not null) engine
      on engine.source_run_id = rounds.run_id and engine.engine_key = id_key(rounds.engine_request_id)
    where rounds.tokens_proposed > 0
),
placed as (
    select * from whole
    union all
    select * from split
),
final as (
    select
        run_id, category, level, segment,
        count(distinct request_id) as requests,
        cast(sum(rounds) as bigint) as verify_rounds,
        cast(sum(proposed) as bigint) as tokens_proposed,
        cast(sum(accepted) as bigint) as tokens_accepted,
        mean_acceptance_length(sum(accepted), sum(rounds)) as mean_acceptance_length,
        acceptance_rate(sum(accepted), sum(proposed)) as acceptance_rate
    from placed
    group by all
)
select * from final order by run_id, category, level, segment
