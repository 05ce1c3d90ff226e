MODEL (name block_throughput, kind TABLE, grain (run_id, arm, level, repeat));
-- Grain: one row per run_id, arm, level and repeat that has requests: one
--   block of requests sent to one server (a run with R repeats sends, per level,
--   baseline r0, speculative r0, baseline r1, speculative r1, ...).
-- Purpose: the per-repeat figures behind throughput and the '(system)' speedup,
--   and the prefix-cache hit rate of every block: a block served from a cache
--   that an earlier block warmed is faster for reasons that are not speculation.
--   requests, requests_ok, requests_failed   the block's requests, all / successful / failed
--   output_tokens        sum(output_tokens) over successful requests
--   block_seconds        (max wall_end_ns - min wall_send_ns) / 1e9 over successful requests [s]
--   output_tokens_per_s  = output_tokens / block_seconds   [tokens/s, whole server]
--   requests_per_s       = requests_ok / block_seconds
--   prefix_cache_queries, prefix_cache_hits   after - before deltas of vLLM's cumulative
--                        prefix-cache counters around the block [tokens]; NULL when absent
--   prefix_cache_hit_rate  = prefix_cache_hits / prefix_cache_queries [share 0..1]; NULL when
--                        the counters are absent or nothing was looked up
--   prefix_cache_reset   true: the prefix cache was reset just before the block; false:
--                        the reset was refused; NULL: not tried
--   (formulas: int_blocks_measured)
with blocks as (
    select * from int_blocks_measured
),
final as (
    select * from blocks
)
select * from final order by run_id, level, repeat, arm
