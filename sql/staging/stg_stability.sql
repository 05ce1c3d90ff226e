MODEL (
    name stg_stability,
    kind VIEW,
    grain (run_id, fault, probe_index)
);
-- Grain: one row per run_id and fault probe of a `specdec stability` run (StabilityResult).
-- Purpose: the probe record, typed. Nothing is derived here.
--   outcome  ok | degraded | failed | skipped (see StabilityResult.outcome)
--   rss_*    NULL = not sampled (only the soak samples RSS, and only for an
--            embedded server); rss_mb is the server's RSS after the probe.
with source as (
    select * from raw_stability
),
final as (
    select
        run_id,
        fault,
        probe_index,
        wall_start_ns,
        duration_ms,
        requests_sent,
        requests_failed,
        error_types,
        expected,
        outcome,
        server_healthy_after,
        detail,
        rss_mb,
        rss_samples,
        rss_first_mb,
        rss_last_mb,
        rss_max_mb,
        rss_slope_mb_per_min
    from source
)
select * from final
