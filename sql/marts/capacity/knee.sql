MODEL (name knee, kind TABLE, grain (run_id, category));
-- Grain: one row per run_id and category of the speedup mart ('(system)' included).
-- Purpose: where the speculative gain ends as concurrency rises, from the speedup
--   mart's rows that have a speedup (failed or unpaired levels are left out).
--   levels                 levels with a speedup
--   levels_with_interval   of those, levels with a measurement interval (ci_high)
--   peak_speedup           the largest speedup over those levels
--   peak_level             the lowest level at which it occurs
--   peak_label             the speedup mart's label at that level: a "gain" that is
--                          not 'faster' (or NULL, no interval) is no gain to lose, so
--                          read gain_lost_level with it (the verdict cites it only
--                          after a 'faster' peak)
--   peak_fraction          int_run_settings.knee_peak_fraction of the run (default 0.5)
--   below_one_level        the first (lowest) level labelled 'slower' in the speedup mart
--                          (its family-wise interval lies below 1: speculation is measurably
--                          slower from there, with the run's labels' family-wise error rate);
--                          NULL when no level is labelled 'slower' 
--   gain_lost_level              the first level above peak_level where the gain has
--                          fallen below peak_fraction of the peak gain:
--                          speedup - 1 < peak_fraction * (peak_speedup - 1);
--                          NULL when it never does within the measured levels, or when
--                          peak_speedup <= 1 (no gain to lose)
with speedup_rows as (
    select * from speedup where speedup is not null
),
settings as (
    select run_id, knee_peak_fraction as peak_fraction from int_run_settings
),
categories as (
    select distinct run_id, category from speedup
),
peaks as (
    select
        run_id,
        category,
        count(*) as levels,
        count(ci_high) as levels_with_interval,
        max(speedup) as peak_speedup,
        first(level order by speedup desc, level) as peak_level,
        first(label order by speedup desc, level) as peak_label
    from speedup_rows
    group by run_id, category
),
below_one as (
    select run_id, category, min(level) as below_one_level
    from speedup_rows
    where label = 'slower'
    group by run_id, category
),
gain_lost as (
    select s.run_id, s.category, min(s.level) as gain_lost_level
    from speedup_rows s
    join peaks p using (run_id, category)
    join settings using (run_id)
    where p.peak_speedup > 1
      and s.level > p.peak_level
      and s.speedup - 1 < settings.peak_fraction * (p.peak_speedup - 1)
    group by s.run_id, s.category
),
final as (
    select
        categories.run_id,
        categories.category,
        coalesce(peaks.levels, 0) as levels,
        coalesce(peaks.levels_with_interval, 0) as levels_with_interval,
        peaks.peak_speedup,
        peaks.peak_level,
        peaks.peak_label,
        settings.peak_fraction,
        below_one.below_one_level,
        gain_lost.gain_lost_level
    from categories
    left join settings using (run_id)
    left join peaks using (run_id, category)
    left join below_one using (run_id, category)
    left join gain_lost using (run_id, category)
)
select * from final order by run_id, category
