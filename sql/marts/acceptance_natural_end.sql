-- acceptance_natural_end
-- Grain: one row per run_id, category, concurrency level and segment (before / after
--   the natural end) of the speculative arm's greedy (temperature = 0) timed requests,
--   pooled over repeats.
-- Purpose: with ignore_eos and a fixed length the model often runs past where it
--   would have stopped, into repetitive text that drafts predict well; this splits
--   draft acceptance at that point so the tail cannot flatter the figure.
--   The natural end of a prompt (int_natural_ends) is stg_greedy_checks.natural_end_position of the
--   baseline's verification request for the same prompt at the same level (repeat 0;
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
--                    'unknown'             no successful baseline verification request for
--                                          the prompt at this level, end-of-sequence ids
--                                          unknown (external server), or no prompt_tokens
--   requests         speculative requests with at least one verify round in the segment
--   verify_rounds    captured rows with tokens_proposed > 0
--   tokens_proposed, tokens_accepted   summed over those rounds
--   mean_acceptance_length   1 + tokens_accepted / verify_rounds (as acceptance; includes the
--                    bonus token; NULL without verify rounds)
--   acceptance_rate  tokens_accepted / tokens_proposed (NULL when none proposed)
--   The speedup split at the same natural end is speedup_natural_end (time to the natural
--   end from the server's per-chunk running token count, exact to one chunk).
with rounds as (
    select * from int_rounds_attributed where arm = 'speculative' and is_verify_round
),
requests as (
    select run_id, request_id, prompt_tokens from stg_requests where arm = 'speculative' and temperature = 0
),
ends as (
    select * from int_natural_ends
),
placed as (
    select
        rounds.run_id,
        rounds.category,
        rounds.concurrency,
        rounds.request_id,
        rounds.tokens_proposed,
        rounds.tokens_accepted,
        case
            when ends.eos_known is not true or requests.prompt_tokens is null then 'unknown'
            when ends.natural_end_position is null then 'before_natural_end'
            when rounds.context_len - requests.prompt_tokens + 1 < ends.natural_end_position
                then 'before_natural_end'
            else 'after_natural_end'
        end as segment
    from rounds
    join requests using (run_id, request_id)
    left join ends
      on ends.run_id = rounds.run_id and ends.concurrency = rounds.concurrency and ends.prompt_id = rounds.prompt_id
),
final as (
    select
        run_id,
        category,
        concurrency,
        segment,
        count(distinct request_id) as requests,
        count(*) as verify_rounds,
        cast(sum(tokens_proposed) as bigint) as tokens_proposed,
        cast(sum(tokens_accepted) as bigint) as tokens_accepted,
        1 + sum(tokens_accepted) / count(*) as mean_acceptance_length,
        sum(tokens_accepted) / nullif(sum(tokens_proposed), 0) as acceptance_rate
    from placed
    group by all
)
select * from final order by run_id, category, concurrency, segment

