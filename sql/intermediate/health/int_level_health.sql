MODEL (name int_level_health, kind TABLE, grain (run_id, arm, level));
-- Grain: one row per run_id, arm and level that has requests.
-- Kind TABLE: computed once at build (five marts read it).
-- Purpose: did the level work? Failures are data: counted, typed and judged
--   against the run's error budget (manifest.max_error_rate).
--   repeats          repeats of the level (blocks with requests)
--   requests         replayed requests of the level, all repeats, successful or not
--   requests_ok      requests with success = true
--   requests_failed  requests with success = false
--   error_rate       requests_failed / requests   [share 0..1]
--   error_types      '<error_type>: <count>' for each error_type among the failed
--                    requests, most frequent first, '; '-separated; NULL when none failed
--   http_statuses    the same for the HTTP status of failed requests that got a
--                    reply; NULL when no failed request got one
--   error_example    error_message of the level's first failed request (by send
--                    time); NULL when none failed
--   max_error_rate   the run's threshold (int_run_settings.max_error_rate)
--   level_failed     error_rate > max_error_rate: no speedup or lossless figure
--                    is computed from this level (see int_levels_compared)
with requests as (
    select * from stg_requests
),
settings as (
    select run_id, max_error_rate from int_run_settings
),
types as (
    select run_id, arm, level, coalesce(error_type, '(untyped)') as error_type, count(*) as n
    from requests
    where not success
    group by all
),
type_lists as (
    select run_id, arm, level,
           string_agg(error_type || ': ' || n, '; ' order by n desc, error_type) as error_types
    from types
    group by all
),
statuses as (
    select run_id, arm, level, http_status, count(*) as n
    from requests
    where not success and http_status is not null
    group by all
),
status_lists as (
    select run_id, arm, level,
           string_agg(cast(http_status as varchar) || ': ' || n, '; ' order by n desc, http_status) as http_statuses
    from statuses
    group by all
),
counts as (
    select
        run_id, arm, level,
        count(distinct repeat) as repeats,
        count(*) as requests,
        count(*) filter (where success) as requests_ok,
        count(*) filter (where not success) as requests_failed,
        arg_min(error_message, wall_send_ns) filter (where not success) as error_example
    from requests
    group by all
),
final as (
    select
        counts.run_id,
        counts.arm,
        counts.level,
        counts.repeats,
        counts.requests,
        counts.requests_ok,
        counts.requests_failed,
        counts.requests_failed / counts.requests as error_rate,
        type_lists.error_types,
        status_lists.http_statuses,
        counts.error_example,
        settings.max_error_rate,
        counts.requests_failed / counts.requests > settings.max_error_rate as level_failed
    from counts
    left join settings using (run_id)
    left join type_lists using (run_id, arm, level)
    left join status_lists using (run_id, arm, level)
)
select * from final
