MODEL (name int_blocks_measured, kind VIEW, grain (run_id, arm, level, repeat));
-- Grain: one row per run_id, arm, level and repeat that has requests: one
--   block, the requests of one level sent to one server in one repeat (a run
--   with R repeats sends, per level, baseline r0, speculative r0, baseline r1, ...).
-- Purpose: throughput of one block, from the client's clock, and the engine's
--   prefix-cache counters around it, so no figure spans another block.
--   requests             replayed requests of the block, successful or not
--   requests_ok          requests with success = true
--   requests_failed      requests with success = false
--   output_tokens        sum(output_tokens) over successful requests; NULL when none succeeded
--   block_seconds        = (max wall_end_ns - min wall_send_ns) / 1e9 over the block's
--                          successful requests [s]; NULL when none succeeded
--   output_tokens_per_s  = output_tokens / block_seconds   [tokens/s, whole server]
--   requests_per_s       = requests_ok / block_seconds
--   prefix_cache_queries = after - before delta of vllm:prefix_cache_queries_total around
--                          the block [tokens looked up]; NULL when the server does not
--                          export it or the block has no before/after snapshot pair
--   prefix_cache_hits    = the same delta of vllm:prefix_cache_hits_total [tokens found]
--   prefix_cache_hit_rate = prefix_cache_hits / prefix_cache_queries  [share 0..1];
--                          NULL when either is NULL or no token was looked up
--   prefix_cache_reset   the before-snapshot's flag: true = POST /reset_prefix_cache
--                          succeeded just before the block, false = refused (earlier
--                          blocks may have warmed the cache), NULL = not tried
with requests as (
    select * from stg_requests
),
measured as (
    select * from int_requests_measured
),
counted as (
    select run_id, arm, level, repeat,
           count(*) as requests,
           count(*) filter (where success) as requests_ok,
           count(*) filter (where not success) as requests_failed
    from requests
    group by all
),
timed as (
    select run_id, arm, level, repeat,
           sum(output_tokens) as output_tokens,
           (max(wall_end_ns) - min(wall_send_ns)) / 1e9 as block_seconds
    from measured
    group by all
),
cache as (
    select run_id, arm, level, repeat, prefix_cache_queries, prefix_cache_hits, prefix_cache_reset
    from int_counter_deltas
),
final as (
    select
        counted.run_id, counted.arm, counted.level, counted.repeat,
        counted.requests, counted.requests_ok, counted.requests_failed,
        timed.output_tokens,
        timed.block_seconds,
        timed.output_tokens / nullif(timed.block_seconds, 0) as output_tokens_per_s,
        counted.requests_ok / nullif(timed.block_seconds, 0) as requests_per_s,
        cache.prefix_cache_queries,
        cache.prefix_cache_hits,
        cache.prefix_cache_hits / nullif(cache.prefix_cache_queries, 0) as prefix_cache_hit_rate,
        cache.prefix_cache_reset
    from counted
    left join timed using (run_id, arm, level, repeat)
    left join cache using (run_id, arm, level, repeat)
)
select * from final
