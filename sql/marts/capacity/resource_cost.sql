MODEL (name resource_cost, kind TABLE, grain (run_id, arm, level));
-- Grain: one row per run_id, arm and level with resource samples (repeats pooled).
-- Purpose: what each arm costs in memory and KV cache at each level: speculation adds a
--   drafter (and, for a draft model, its weights and KV cache) to the same server.
--   samples              resource samples of the level (about one per second per block)
--   repeats              blocks (repeats) with samples
--   rss_peak_mib         max over samples of the process tree's RSS / 2^20 [MiB]
--   rss_mean_mib         mean over samples of the same [MiB]; both NULL when no sample had
--                        a process to read (external servers)
--   kv_cache_usage_mean  mean over samples of vllm:kv_cache_usage_perc [share 0..1]
--   kv_cache_usage_peak  max over samples of the same
--   requests_running_mean  mean over samples of vllm:num_requests_running (how much of the
--                        level's concurrency the server actually held)
--   rss_peak_vs_baseline  speculative rows: rss_peak_mib / the baseline's at the same level
--                        (NULL on baseline rows or without both)
with samples as (
    select * from stg_resources
),
per_level as (
    select run_id, arm, level,
        count(*) as samples,
        count(distinct repeat) as repeats,
        max(rss_bytes) / 1048576.0 as rss_peak_mib,
        avg(rss_bytes) / 1048576.0 as rss_mean_mib,
        avg(kv_cache_usage) as kv_cache_usage_mean,
        max(kv_cache_usage) as kv_cache_usage_peak,
        avg(requests_running) as requests_running_mean
    from samples
    group by all
),
final as (
    select p.*,
        case when p.arm <> 'baseline' then p.rss_peak_mib / nullif(b.rss_peak_mib, 0) end as rss_peak_vs_baseline
    from per_level p
    left join per_level b on b.run_id = p.run_id and b.arm = 'baseline' and b.level = p.level
)
select * from final order by run_id, arm, level
