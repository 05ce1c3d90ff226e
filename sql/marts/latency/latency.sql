MODEL (name latency, kind TABLE, grain (run_id, arm, category, level));
-- Grain: one row per run_id, arm, category and level that has requests
--   (repeats pooled).
-- Purpose: client-side latency percentiles and speed (successful requests only;
--   failed requests are counted beside them, see level_health).
--   requests_ok        requests of the group with success = true (the ones measured)
--   requests_failed    requests of the group with success = false (from stg_requests)
--   output_tokens      sum(output_tokens) over successful requests
--   ttft_ms_p50, ttft_ms_p95, ttft_ms_p99
--                      quantile_cont of time to first content chunk [ms]
--   tpot_ms_p50, tpot_ms_p95, tpot_ms_p99
--                      quantile_cont of per-request (e2e - ttft)/(tokens - 1) [ms/token]
--   output_tokens_per_s_mean  mean over requests of output_tokens / e2e seconds
--   itl_chunk_gap_ms_p50, itl_chunk_gap_ms_p95, itl_chunk_gap_ms_p99
--                      quantile_cont of gaps between streamed chunks, pooled over
--                      all chunks of all requests in the group [ms]
--   Every figure is NULL when no request of the group succeeded.
--   (Each column's three percentiles come from one quantile_cont over a list of fractions:
--   the same figures as three calls, one pass over the values instead of three. The gaps
--   are pooled by run_id and int_chunk_gaps' gap_group, a number per group in its run.)
with requests as (
    select * from int_requests_measured
),
gap_quantiles as (
    select run_id, any_value(arm) as arm, any_value(category) as category,
           any_value(level) as level, quantile_cont(chunk_gap_ms, [0.5, 0.95, 0.99]) as q
    from int_chunk_gaps
    group by run_id, gap_group
),
gaps as (
    select run_id, arm, category, level,
           q[1] as itl_chunk_gap_ms_p50, q[2] as itl_chunk_gap_ms_p95, q[3] as itl_chunk_gap_ms_p99
    from gap_quantiles
),
failed as (
    select run_id, arm, category, level, count(*) filter (where not success) as requests_failed
    from stg_requests group by all
),
group_quantiles as (
    select
        run_id, arm, category, level,
        count(*) as requests,
        sum(output_tokens) as output_tokens,
        quantile_cont(ttft_ms, [0.5, 0.95, 0.99]) as ttft_q,
        quantile_cont(tpot_ms, [0.5, 0.95, 0.99]) as tpot_q,
        avg(output_tokens_per_s) as output_tokens_per_s_mean
    from requests
    group by all
),
per_group as (
    select run_id, arm, category, level, requests, output_tokens,
           ttft_q[1] as ttft_ms_p50, ttft_q[2] as ttft_ms_p95, ttft_q[3] as ttft_ms_p99,
           tpot_q[1] as tpot_ms_p50, tpot_q[2] as tpot_ms_p95, tpot_q[3] as tpot_ms_p99,
           output_tokens_per_s_mean
    from group_quantiles
),
final as (
    select failed.run_id, failed.arm, failed.category, failed.level,
           coalesce(per_group.requests, 0) as requests_ok, failed.requests_failed,
           per_group.* exclude (run_id, arm, category, level, requests),
           gaps.* exclude (run_id, arm, category, level)
    from failed
    left join per_group using (run_id, arm, category, level)
    left join gaps using (run_id, arm, category, level)
)
select * from final order by run_id, arm, category, level
