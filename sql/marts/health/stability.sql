MODEL (name stability, kind TABLE, grain (run_id, fault));
-- Grain: one row per run_id and fault type probed by `specdec stability`, in the order run.
-- Purpose: the fault -> outcome table of a stability run.
--   probes                probes of this fault type
--   requests_sent         requests sent by its probes (sum)
--   requests_failed       requests that ended in an error, expected ones included (sum)
--   error_rate            requests_failed / requests_sent   [share 0..1]; NULL when none was sent
--   error_types           distinct error labels over its probes, sorted
--                         (http_<status>, or the client's error_type)
--   expected              what a healthy server does, distinct texts of its probes joined by ' | '
--   outcome               worst outcome over its probes: failed > degraded > ok > skipped
--   server_healthy_after  every probe was followed by GET /health = 200
--   detail                the detail of its worst probe (lowest probe_index among equals)
--   duration_s            sum(duration_ms) / 1000 over its probes
--   rss_first_mb, rss_last_mb, rss_max_mb, rss_samples, rss_slope_mb_per_min
--                         the soak's server RSS trend (MiB; slope = least-squares
--                         MiB per minute over the soak's samples, computed by
--                         specdec.replay.soak.rss_trend); NULL for other faults
--                         and when the server is not a process specdec started
with probes as (
    select
        *,
        case outcome when 'failed' then 3 when 'degraded' then 2 when 'ok' then 1 else 0 end as outcome_rank
    from stg_stability
),
final as (
    select
        run_id,
        fault,
        count(*) as probes,
        sum(requests_sent) as requests_sent,
        sum(requests_failed) as requests_failed,
        case when sum(requests_sent) > 0 then sum(requests_failed) / sum(requests_sent) end as error_rate,
        list_sort(list_distinct(flatten(list(error_types)))) as error_types,
        string_agg(distinct expected, ' | ' order by expected) as expected,
        case max(outcome_rank) when 3 then 'failed' when 2 then 'degraded' when 1 then 'ok' else 'skipped' end as outcome,
        bool_and(server_healthy_after) as server_healthy_after,
        first(detail order by outcome_rank desc, probe_index) as detail,
        sum(duration_ms) / 1000 as duration_s,
        first(rss_first_mb order by probe_index) filter (where rss_samples is not null) as rss_first_mb,
        first(rss_last_mb order by probe_index) filter (where rss_samples is not null) as rss_last_mb,
        first(rss_max_mb order by probe_index) filter (where rss_samples is not null) as rss_max_mb,
        first(rss_samples order by probe_index) filter (where rss_samples is not null) as rss_samples,
        first(rss_slope_mb_per_min order by probe_index) filter (where rss_samples is not null) as rss_slope_mb_per_min,
        min(wall_start_ns) as first_wall_start_ns
    from probes
    group by run_id, fault
)
select * exclude (first_wall_start_ns) from final order by run_id, first_wall_start_ns, fault
