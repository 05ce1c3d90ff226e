MODEL (name capacity_under_slo, kind TABLE, grain (run_id, arm));
-- Grain: one row per run_id and arm.
-- Purpose: the number capacity planning needs: the highest measured concurrency each
--   arm sustains under a latency SLO, before (baseline) and after (speculative).
--   The SLO is the analysis's, not the run's: int_analysis_settings, given to
--   `specdec analytics build` / `specdec report` (--slo-ttft-p95-ms, --slo-tpot-p95-ms;
--   defaults 2000 ms and 100 ms, slo_source says which).
--   A level passes when it did not fail its error budget (level_health) and, over all
--   successful requests of the arm at that level (every category and repeat pooled):
--     ttft_ms_p95 = quantile_cont(ttft_ms, 0.95) <= slo_ttft_p95_ms, and
--     tpot_ms_p95 = quantile_cont(tpot_ms, 0.95) <= slo_tpot_p95_ms
--   (tpot_ms as in int_requests_measured: (e2e - ttft) / (tokens - 1)).
--   levels_measured          levels the arm ran
--   max_level                the highest level L such that every measured level up to L
--                            passes (load is only added, so a pass above a failure is not
--                            capacity); NULL when the lowest level already fails
--   sustains_all_measured    true when every measured level passes: the real limit is
--                            above the highest level measured, max_level is a lower bound
--   first_failing_level      the lowest level that does not pass; NULL when none
--   first_failing_reason     'ttft', 'tpot', 'ttft and tpot', or 'level failed (error budget)'
--   ttft_ms_p95_at_max, tpot_ms_p95_at_max  the p95 figures at max_level [ms]
--   capacity_ratio           speculative row: its max_level / the baseline's (NULL on
--                            the baseline row, or when either is NULL). Levels are the
--                            measured ones only (no interpolation), so this is as coarse as
--                            the level grid
--   slo_ttft_p95_ms, slo_tpot_p95_ms, slo_source  the SLO used
with settings as (
    select * from int_analysis_settings
),
per_level as (
    select run_id, arm, level,
           quantile_cont(ttft_ms, 0.95) as ttft_ms_p95,
           quantile_cont(tpot_ms, 0.95) as tpot_ms_p95
    from int_requests_measured
    group by all
),
levels as (
    select h.run_id, h.arm, h.level, h.level_failed, p.ttft_ms_p95, p.tpot_ms_p95,
           s.slo_ttft_p95_ms, s.slo_tpot_p95_ms,
           case
               when h.level_failed or p.ttft_ms_p95 is null then 'level failed (error budget)'
               when p.ttft_ms_p95 > s.slo_ttft_p95_ms and coalesce(p.tpot_ms_p95 > s.slo_tpot_p95_ms, false)
                   then 'ttft and tpot'
               when p.ttft_ms_p95 > s.slo_ttft_p95_ms then 'ttft'
               when coalesce(p.tpot_ms_p95 > s.slo_tpot_p95_ms, false) then 'tpot'
           end as fails_because
    from level_health h
    left join per_level p using (run_id, arm, level)
    cross join settings s
),
per_arm as (
    select run_id, arm,
           count(*) as levels_measured,
           min(level) filter (where fails_because is not null) as first_failing_level
    from levels group by run_id, arm
),
capped as (
    select a.run_id, a.arm, a.levels_measured, a.first_failing_level, max(l.level) as max_level
    from per_arm a
    left join levels l
      on l.run_id = a.run_id and l.arm = a.arm
     and (a.first_failing_level is null or l.level < a.first_failing_level)
    group by a.run_id, a.arm, a.levels_measured, a.first_failing_level
),
baseline_capacity as (
    select run_id, max_level from capped where arm = 'baseline'
),
final as (
    select
        c.run_id, c.arm, c.levels_measured, c.max_level,
        c.first_failing_level is null as sustains_all_measured,
        c.first_failing_level,
        f.fails_because as first_failing_reason,
        m.ttft_ms_p95 as ttft_ms_p95_at_max,
        m.tpot_ms_p95 as tpot_ms_p95_at_max,
        case when c.arm <> 'baseline' then c.max_level / nullif(b.max_level, 0) end as capacity_ratio,
        s.slo_ttft_p95_ms, s.slo_tpot_p95_ms, s.slo_source
    from capped c
    cross join settings s
    left join baseline_capacity b on b.run_id = c.run_id
    left join levels f on f.run_id = c.run_id and f.arm = c.arm and f.level = c.first_failing_level
    left join levels m on m.run_id = c.run_id and m.arm = c.arm and m.level = c.max_level
)
select * from final order by run_id, arm
