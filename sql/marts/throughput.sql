-- throughput
-- Grain: one row per arm and concurrency level (all categories together).
-- Purpose: system throughput of a level (capacity), from the client's clock.
--   level_seconds        = (max wall_end_ns - min wall_send_ns) / 1e9 over the level's
--                          successful requests
--   output_tokens_per_s  = sum(output_tokens) / level_seconds   [tokens/s, whole server]
--   requests_per_s       = successful requests / level_seconds
with requests as (
    select * from int_requests_measured
),
final as (
    select
        arm,
        concurrency,
        count(*) as requests,
        sum(output_tokens) as output_tokens,
        (max(wall_end_ns) - min(wall_send_ns)) / 1e9 as level_seconds,
        sum(output_tokens) / ((max(wall_end_ns) - min(wall_send_ns)) / 1e9) as output_tokens_per_s,
        count(*) / ((max(wall_end_ns) - min(wall_send_ns)) / 1e9) as requests_per_s
    from requests
    group by arm, concurrency
)
select * from final order by arm, concurrency
