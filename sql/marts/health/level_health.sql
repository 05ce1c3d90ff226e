MODEL (name level_health, kind TABLE, grain (run_id, arm, level));
-- Grain: one row per run_id, arm and level that has requests (repeats pooled).
-- Purpose: failures per level, shown first in the report and the terminal summary.
--   repeats          repeats of the level (blocks with requests)
--   requests         replayed requests of the level, all repeats, successful or not
--   requests_ok      requests with success = true
--   requests_failed  requests with success = false
--   error_rate       requests_failed / requests   [share 0..1]
--   error_types      '<error_type>: <count>' over failed requests, most frequent first; NULL when none failed
--   http_statuses    '<status>: <count>' over failed requests that got a reply; NULL when none
--   error_example    error_message of the level's first failed request; NULL when none failed
--   max_error_rate   the run's error budget (manifest.max_error_rate, --max-error-rate)
--   level_failed     error_rate > max_error_rate; speedup and output_equality
--                    compute no figure from a level that failed in either arm
--   (formulas: int_level_health)
with health as (
    select * from int_level_health
),
final as (
    select * from health
)
select * from final order by run_id, arm, level
