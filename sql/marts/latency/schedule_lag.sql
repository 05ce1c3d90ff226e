MODEL (name schedule_lag, kind TABLE, grain (run_id, arm, level));
-- Grain: one row per run_id, arm and level (the level column: the concurrency in
--   closed loop, the level key 1..N in open loop) that has requests.
-- Purpose: did the client keep the schedule? In open loop (load_mode recorded or
--   poisson) every request has a planned and an actual send time, and the lag is
--   what the client added (event-loop wake-up, task start). Closed loop has no
--   plan: its lag and offered-rate figures are NULL. Pooled over the level's
--   repeats; failed requests count too (what is measured is the sending).
--   arm, level           the arm and the level's key
--   load_mode            closed | recorded | poisson
--   level_value          the level's setting: concurrency, time scale, or rate [requests/s]
--   repeats              blocks of the level with requests
--   requests             requests sent at the level, all repeats
--   requests_held        requests held past their planned time because the previous
--                        turn of their session had not finished (session_wait_ms > 0);
--                        NULL in closed loop
--   lag_ms_p50, lag_ms_p99
--                        quantile_cont of schedule_lag_ms = actual_send_ms - intended_send_ms [ms]
--   lag_ms_max           max of schedule_lag_ms [ms]
--   intended_span_s      sum over blocks of (last - first intended_send_ms) / 1000 [s]
--   actual_span_s        sum over blocks of (last - first actual_send_ms) / 1000 [s]
--   offered_rate_per_s   sum over blocks of (requests - 1) / intended_span_s [requests/s]:
--                        the rate the plan asked for (a Poisson plan's realised rate,
--                        not its nominal one); NULL when the span is 0
--   achieved_rate_per_s  the same over actual send times [requests/s]; below
--                        offered_rate_per_s when the client fell behind
with requests as (
    select * from stg_requests
),
blocks as (
    select run_id, arm, level, repeat,
           count(*) as requests,
           (max(intended_send_ms) - min(intended_send_ms)) / 1000.0 as intended_span_s,
           (max(actual_send_ms) - min(actual_send_ms)) / 1000.0 as actual_span_s
    from requests
    group by all
),
spans as (
    select run_id, arm, level,
           count(*) as repeats,
           sum(requests - 1) as intervals,
           sum(intended_span_s) as intended_span_s,
           sum(actual_span_s) as actual_span_s
    from blocks
    group by all
),
lags as (
    select run_id, arm, level,
           max(load_mode) as load_mode,
           max(level_value) as level_value,
           count(*) as requests,
           case when max(load_mode) = 'closed' then null
                else count(*) filter (where session_wait_ms > 0) end as requests_held,
           quantile_cont(schedule_lag_ms, 0.5) as lag_ms_p50,
           quantile_cont(schedule_lag_ms, 0.99) as lag_ms_p99,
           max(schedule_lag_ms) as lag_ms_max
    from requests
    group by all
),
final as (
    select
        lags.run_id, lags.arm, lags.level, lags.load_mode, lags.level_value,
        spans.repeats, lags.requests, lags.requests_held,
        lags.lag_ms_p50, lags.lag_ms_p99, lags.lag_ms_max,
        spans.intended_span_s, spans.actual_span_s,
        spans.intervals / nullif(spans.intended_span_s, 0) as offered_rate_per_s,
        spans.intervals / nullif(spans.actual_span_s, 0) as achieved_rate_per_s
    from lags
    join spans using (run_id, arm, level)
)
select * from final order by run_id, arm, level
