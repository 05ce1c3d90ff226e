-- speedup
-- Grain: one row per category and concurrency level, plus category '(system)'.
-- Purpose: the effect of speculation, as a ratio of two arms that differ only in
--   the speculative setting (see manifest.arm_difference).
--   per category:  speedup = speculative output_tokens_per_s_mean
--                            / baseline output_tokens_per_s_mean   (from latency;
--                            mean over requests of tokens / e2e seconds, Spec-Bench style)
--   '(system)':    speedup = speculative / baseline output_tokens_per_s of the
--                            whole level (from throughput: capacity)
--   NULL when either arm is missing for that group.
with lat as (
    select * from latency
),
thr as (
    select * from throughput
),
per_category as (
    select
        b.category,
        b.concurrency,
        b.output_tokens_per_s_mean as baseline_tokens_per_s,
        s.output_tokens_per_s_mean as speculative_tokens_per_s,
        s.output_tokens_per_s_mean / b.output_tokens_per_s_mean as speedup,
        'mean per-request tokens/s' as definition
    from lat b
    join lat s on s.category = b.category and s.concurrency = b.concurrency
    where b.arm = 'baseline' and s.arm = 'speculative'
),
system as (
    select
        '(system)' as category,
        b.concurrency,
        b.output_tokens_per_s as baseline_tokens_per_s,
        s.output_tokens_per_s as speculative_tokens_per_s,
        s.output_tokens_per_s / b.output_tokens_per_s as speedup,
        'level tokens/s (capacity)' as definition
    from thr b
    join thr s on s.concurrency = b.concurrency
    where b.arm = 'baseline' and s.arm = 'speculative'
),
final as (
    select * from per_category
    union all
    select * from system
)
select * from final order by category, concurrency
