MODEL (name acceptance_requests, kind TABLE, grain (run_id, arm, level, category));
-- Grain: one row per run_id, arm, level and category, plus a row per run_id, arm
--   and level with category '(all)' (pooled over the level's repeats; never over
--   runs or levels).
-- Purpose: acceptance from the engine's per-request speculative stats, for every engine:
--   the only acceptance an engine without per-round rows has (llama.cpp: timings.draft_n
--   and draft_n_accepted; specdec/engines), and for vLLM a check on the rounds (its
--   metrics.speculative_decoding). Requests whose stats are unknown (NULL: a baseline arm,
--   a failed request, an engine that reports none) are left out, not counted as 0.
--   requests_with_stats   successful requests with both counts
--   tokens_proposed       sum of their draft tokens
--   tokens_accepted       sum of their accepted draft tokens
--   acceptance_rate       = acceptance_rate(tokens_accepted, tokens_proposed)
--                         (sql/macros.sql: per token, pooled); NULL when nothing was proposed
--   acceptance_rate_per_request   mean over requests with tokens proposed of each one's
--                         acceptance_rate(accepted, proposed) (AIPerf's per-request mean)
--   steps                 sum of the requests' verify steps where the engine says (vLLM);
--                         NULL for llama.cpp, which reports none
--   engine_proposed, engine_accepted   '(all)' rows only: the engine's counters over the
--                         level's blocks (int_counter_deltas, summed over repeats); NULL
--                         where the server exports none
--   diff_proposed, diff_accepted   '(all)' rows: per-request sums minus the counters; 0
--                         when every drafted token of the blocks is in a request's stats
--                         (the blocks bracket the timed requests only: no warm-up or
--                         lossless-pass request falls between a block's two scrapes)
with requests as (
    select run_id, arm, level, category, spec_num_steps, spec_num_draft_tokens as proposed,
           spec_num_accepted_tokens as accepted
    from stg_requests
    where success and spec_num_draft_tokens is not null and spec_num_accepted_tokens is not null
),
engine as (
    select run_id, arm, level,
           cast(sum(engine_proposed) as bigint) as engine_proposed,
           cast(sum(engine_accepted) as bigint) as engine_accepted
    from int_counter_deltas
    group by run_id, arm, level
),
grouped as (
    select run_id, arm, level, coalesce(category, '(all)') as category,
           count(*) as requests_with_stats,
           cast(sum(proposed) as bigint) as tokens_proposed,
           cast(sum(accepted) as bigint) as tokens_accepted,
           acceptance_rate(sum(accepted), sum(proposed)) as acceptance_rate,
           avg(acceptance_rate(accepted, proposed)) filter (where proposed > 0) as acceptance_rate_per_request,
           cast(sum(spec_num_steps) as bigint) as steps
    from requests
    group by grouping sets ((run_id, arm, level, category), (run_id, arm, level))
),
final as (
    select g.*,
           case when g.category = '(all)' then e.engine_proposed end as engine_proposed,
           case when g.category = '(all)' then e.engine_accepted end as engine_accepted,
           case when g.category = '(all)' then g.tokens_proposed - e.engine_proposed end as diff_proposed,
           case when g.category = '(all)' then g.tokens_accepted - e.engine_accepted end as diff_accepted
    from grouped g
    left join engine e using (run_id, arm, level)
)
select * from final order by run_id, arm, level, category = '(all)', category
