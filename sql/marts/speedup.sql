-- speedup
-- Grain: one row per category and concurrency level, plus category '(system)',
--   for every group that has requests in either arm.
-- Purpose: the effect of speculation, as a ratio of two arms that differ only in
--   the speculative setting (see manifest.arm_difference).
--   per category:  speedup = speculative output_tokens_per_s_mean
--                            / baseline output_tokens_per_s_mean   (from latency;
--                            mean over successful requests of tokens / e2e seconds, Spec-Bench style)
--   '(system)':    speedup = speculative / baseline output_tokens_per_s of the
--                            whole level (from throughput: capacity)
--   baseline_tokens_per_s, speculative_tokens_per_s  the two figures divided
--                  (successful requests only; NULL when the arm has none in the group)
--   definition     which ratio the row is: 'mean per-request tokens/s' or 'level tokens/s (capacity)'
--   excluded_reason  why speedup is NULL: the level failed in either arm or an arm
--                  did not run it (int_levels_compared.excluded_reason), else
--                  'no successful <arm> request in this group' (or baseline 0 tokens/s);
--                  NULL when speedup is computed
--   speedup is NULL exactly when excluded_reason is not NULL.
with lat as (
    select * from latency
),
thr as (
    select * from throughput
),
levels as (
    select * from int_levels_compared
),
per_category as (
    select
        coalesce(b.category, s.category) as category,
        coalesce(b.concurrency, s.concurrency) as concurrency,
        b.output_tokens_per_s_mean as baseline_tokens_per_s,
        s.output_tokens_per_s_mean as speculative_tokens_per_s,
        'mean per-request tokens/s' as definition
    from (select * from lat where arm = 'baseline') b
    full outer join (select * from lat where arm = 'speculative') s
      on s.category = b.category and s.concurrency = b.concurrency
),
system as (
    select
        '(system)' as category,
        coalesce(b.concurrency, s.concurrency) as concurrency,
        b.output_tokens_per_s as baseline_tokens_per_s,
        s.output_tokens_per_s as speculative_tokens_per_s,
        'level tokens/s (capacity)' as definition
    from (select * from thr where arm = 'baseline') b
    full outer join (select * from thr where arm = 'speculative') s on s.concurrency = b.concurrency
),
groups as (
    select * from per_category
    union all
    select * from system
),
judged as (
    select
        groups.*,
        coalesce(
            levels.excluded_reason,
            case
                when groups.baseline_tokens_per_s is null
                    then 'no successful baseline request in this group'
                when groups.baseline_tokens_per_s = 0
                    then 'baseline produced 0 tokens/s (nothing to divide by)'
                when groups.speculative_tokens_per_s is null
                    then 'no successful speculative request in this group'
            end
        ) as excluded_reason
    from groups
    left join levels using (concurrency)
),
final as (
    select
        category,
        concurrency,
        baseline_tokens_per_s,
        speculative_tokens_per_s,
        case when excluded_reason is null then speculative_tokens_per_s / baseline_tokens_per_s end as speedup,
        definition,
        excluded_reason
    from judged
)
select * from final order by category, concurrency
