MODEL (name int_levels_compared, kind VIEW, grain (run_id, level));
-- Grain: one row per run_id and level that has requests in either arm.
-- Purpose: may the two arms be compared at this level? Speedup and output
--   equality take their exclusion rule from here, so it is defined once.
--   baseline_failed      int_level_health.level_failed of the baseline arm; NULL if it has no requests
--   speculative_failed   the same for the speculative arm
--   excluded_reason      why no speedup or lossless figure is computed from this
--                        level; NULL when both arms ran it and neither failed:
--                        'level failed in both arms (error rate b > max m, s > max m)',
--                        '<arm> level failed (error rate r > max m)',
--                        '<arm> arm has no requests at this level'
with health as (
    select * from int_level_health
),
baseline as (
    select * from health where arm = 'baseline'
),
speculative as (
    select * from health where arm = 'speculative'
),
final as (
    select
        coalesce(b.run_id, s.run_id) as run_id,
        coalesce(b.level, s.level) as level,
        b.level_failed as baseline_failed,
        s.level_failed as speculative_failed,
        case
            when b.level_failed and s.level_failed then
                printf('level failed in both arms (error rate %.3f and %.3f > max %.3f)',
                       b.error_rate, s.error_rate, b.max_error_rate)
            when b.level_failed then
                printf('baseline level failed (error rate %.3f > max %.3f)', b.error_rate, b.max_error_rate)
            when s.level_failed then
                printf('speculative level failed (error rate %.3f > max %.3f)', s.error_rate, s.max_error_rate)
            when b.level is null then 'baseline arm has no requests at this level'
            when s.level is null then 'speculative arm has no requests at this level'
        end as excluded_reason
    from baseline b
    full outer join speculative s on s.run_id = b.run_id and s.level = b.level
)
select * from final
