-- throughput
-- Grain: one row per arm and concurrency level that has requests (all categories together).
-- Purpose: system throughput of a level (capacity), from the client's clock,
--   over successful requests only; failed requests are counted beside it.
--   requests_ok          successful requests of the level
--   requests_failed      requests of the level with success = false (see level_health)
--   output_tokens        sum(output_tokens) over successful requests
--   level_seconds        = (max wall_end_ns - min wall_send_ns) / 1e9 over the level's
--                          successful requests; NULL when none succeeded
--   output_tokens_per_s  = output_tokens / level_seconds   [tokens/s, whole server]
--   requests_per_s       = requests_ok / level_seconds
--   The per-second figures are NULL when no request of the level succeeded.
with requests as (
    select * from int_requests_measured
),
levels as (
    select arm, concurrency, count(*) filter (where not success) as requests_failed
    from stg_requests
    group by all
),
measured as (
    select
        arm,
        concurrency,
        count(*) as requests_ok,
        sum(output_tokens) as output_tokens,
        (max(wall_end_ns) - min(wall_send_ns)) / 1e9 as level_seconds
    from requests
    group by arm, concurrency
),
final as (
    select
        levels.arm,
        levels.concurrency,
        coalesce(measured.requests_ok, 0) as requests_ok,
        levels.requests_failed,
        measured.output_tokens,
        measured.level_seconds,
        measured.output_tokens / nullif(measured.level_seconds, 0) as output_tokens_per_s,
        measured.requests_ok / nullif(measured.level_seconds, 0) as requests_per_s
    from levels
    left join measured using (arm, concurrency)
)
select * from final order by arm, concurrency
