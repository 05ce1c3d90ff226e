-- stg_engine_counters
-- Grain: one row per run_id, arm, concurrency level, repeat and position (before/after).
-- Purpose: vLLM's cumulative /metrics counters (MetricSnapshot), typed.
--   NULL = the server does not export that counter (no speculation).
with source as (
    select * from raw_engine_counters
),
final as (
    select
        run_id,
        arm,
        concurrency,
        repeat,
        position,
        wall_time_ns,
        spec_num_drafts,
        spec_num_draft_tokens,
        spec_num_accepted_tokens,
        generation_tokens,
        prefix_cache_queries,
        prefix_cache_hits,
        prefix_cache_reset
    from source
)
select * from final
