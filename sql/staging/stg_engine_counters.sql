MODEL (
    name stg_engine_counters,
    kind VIEW,
    grain (run_id, arm, concurrency, repeat, position)
);
-- Grain: one row per run_id, arm, concurrency level, repeat and position (before/after).
-- Purpose: vLLM's cumulative /metrics counters (MetricSnapshot), typed.
--   NULL = the server does not export that counter (no speculation).
--   accepted_per_position  the per-position accepted-token counter, list by draft
--   position from 0 (DuckDB lists index from 1: element i + 1 is position i); NULL
--   without it (and in files written before the column existed).
--   run_id, arm: the analysis run and the role in it (by_role, sql/macros.sql; a classic
--   run's own); arm_name: the arm's own name; source_run_id: the run folder's id.
with source as (
    select * from by_role('raw_engine_counters')
),
final as (
    select
        columns(role_keys()),  -- the key columns by_role adds (sql/macros.sql)
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
        accepted_per_position,
        prefix_cache_reset
    from source
)
select * from final
