-- speedup
-- Grain: one row per run_id, category and concurrency level, plus category '(system)',
--   for every group that has requests in either arm (a run is compared with itself only:
--   its two arms, its repeats, its own noise pool).
-- Purpose: the effect of speculation, as a ratio of two arms that differ only in
--   the speculative setting (see manifest.arm_difference), with its intervals,
--   its A/A noise floor and a label.
--   speedup       per category: geometric mean over paired prompts of
--                   baseline e2e_ms / speculative e2e_ms = exp(avg(log_ratio)) over
--                   int_requests_paired (comparison 'ab': same prompt, level,
--                   repeat and pair_index, both successful); under forced length the
--                   two requests emit the same tokens, so this is also the mean
--                   per-prompt ratio of tokens/s, and it does not favour the requests
--                   that happen to finish fast
--                 '(system)': geometric mean over repeats of the ratio of whole-level
--                   throughput, speculative block / baseline block of the same repeat
--                   (int_blocks_paired: one block = one arm, level and repeat)
--   ci_low, ci_high  95% "measurement" interval, prompts fixed: a Student t interval over
--                 repeats. Each repeat gives a block figure (mean log ratio over the group's
--                 prompts in that repeat; '(system)': the block throughput log ratio); the
--                 interval is mean +- t(0.975, df) * sqrt(s2 / R), where s2 is the run's pooled
--                 block noise: the mean squares of every group's A/B block residuals (scaled by
--                 sqrt(R/(R-1))) and of every A/A block figure, pooled by their degrees of
--                 freedom, because noise shared by a whole block or repeat dominates on a small
--                 host; df = sum over levels of (repeats - 1), for each of the two sets.
--                 Computed by analytics/intervals.py into
--                 int_speedup_intervals (its df column). NULL with one repeat
--   prompts_ci_low, prompts_ci_high  95% "prompts" interval, a paired bootstrap: prompts
--                 resampled with replacement within the category, each with all its pairs
--                 (covers the choice of prompts too), 2000 resamples, seed 0, percentile
--                 interval; NULL for '(system)' and with < 2 prompts
--   pairs         per category: request pairs the speedup is computed from;
--                 '(system)': block pairs (one per repeat)
--   prompts       distinct prompts among those pairs (for '(system)': over all categories)
--   repeats       distinct repeats among those pairs
--   aa_speedup    the same statistic for the A/A control, baseline repeat r + 1 against
--                 repeat r (all consecutive repeats): per category the geometric mean
--                 of e2e(r) / e2e(r + 1) over int_requests_paired (comparison 'aa');
--                 '(system)' the geometric mean of block throughput ratios (r + 1 / r).
--                 NULL with one repeat
--   aa_pairs      pairs the A/A figure is computed from (block pairs for '(system)')
--   aa_ci_low, aa_ci_high  its 95% interval: the t interval of the group's A/A block
--                 figures (R - 1 of them), mean +- t(0.975, df) * sqrt(s2 / (R - 1)), same s2
--                 and df; from 2 repeats, for '(system)' too
--   aa_floor      = greatest(aa_ci_high, 1 / aa_ci_low): the A/A interval mirrored
--                 about 1, since which repeat is "treatment" is arbitrary; NULL without
--                 an A/A interval
--   label         from the measurement interval (the claim is about this prompt set):
--                 'faster'  ci_low > 1 and, when there is an A/A floor, ci_low > aa_floor
--                 'slower'  ci_high < 1 and, when there is an A/A floor, ci_high < 1 / aa_floor
--                 'within noise' otherwise; NULL when there is no speedup or no interval
--   label_basis   what the label rests on, in words (says when there is no interval or no A/A floor)
--   speedup_mean_of_rates  per category only: speculative_tokens_per_s / baseline_tokens_per_s,
--                 the old mean-of-rates ratio (it favours requests that finish fast; kept for
--                 comparison); NULL for '(system)'
--   baseline_tokens_per_s, speculative_tokens_per_s  per category: mean over successful
--                 requests of output tokens / e2e seconds (latency.output_tokens_per_s_mean);
--                 '(system)': whole-level throughput pooled over repeats (throughput.output_tokens_per_s)
--   definition    which speedup the row is: 'geometric mean of paired e2e ratios' or
--                 'geometric mean of per-repeat level throughput ratios (capacity)'
--   excluded_reason  why speedup is NULL: the level failed in either arm or an arm did
--                 not run it (int_levels_compared.excluded_reason), else 'no successful
--                 <arm> request in this group', 'no prompt succeeded in both arms (no pair)';
--                 NULL when speedup is computed. speedup is NULL exactly when excluded_reason is not NULL.
with lat as (
    select * from latency
),
thr as (
    select * from throughput
),
levels as (
    select * from int_levels_compared
),
request_pairs as (
    select * from int_requests_paired
),
block_pairs as (
    select * from int_blocks_paired
),
intervals as (
    select * from int_speedup_intervals where segment is null
),
per_category as (
    select
        coalesce(b.run_id, s.run_id) as run_id,
        coalesce(b.category, s.category) as category,
        coalesce(b.concurrency, s.concurrency) as concurrency,
        b.output_tokens_per_s_mean as baseline_tokens_per_s,
        s.output_tokens_per_s_mean as speculative_tokens_per_s,
        'geometric mean of paired e2e ratios' as definition
    from (select * from lat where arm = 'baseline') b
    full outer join (select * from lat where arm = 'speculative') s
      on s.run_id = b.run_id and s.category = b.category and s.concurrency = b.concurrency
),
system as (
    select
        coalesce(b.run_id, s.run_id) as run_id,
        '(system)' as category,
        coalesce(b.concurrency, s.concurrency) as concurrency,
        b.output_tokens_per_s as baseline_tokens_per_s,
        s.output_tokens_per_s as speculative_tokens_per_s,
        'geometric mean of per-repeat level throughput ratios (capacity)' as definition
    from (select * from thr where arm = 'baseline') b
    full outer join (select * from thr where arm = 'speculative') s
      on s.run_id = b.run_id and s.concurrency = b.concurrency
),
groups as (
    select * from per_category
    union all
    select * from system
),
category_stats as (
    select
        run_id, category, concurrency,
        exp(avg(log_ratio) filter (where comparison = 'ab')) as speedup,
        count(*) filter (where comparison = 'ab') as pairs,
        count(distinct prompt_id) filter (where comparison = 'ab') as prompts,
        count(distinct repeat) filter (where comparison = 'ab') as repeats,
        exp(avg(log_ratio) filter (where comparison = 'aa')) as aa_speedup,
        count(*) filter (where comparison = 'aa') as aa_pairs
    from request_pairs
    group by all
),
level_prompts as (
    select run_id, concurrency, count(distinct prompt_id) as prompts
    from request_pairs
    where comparison = 'ab'
    group by all
),
system_stats as (
    select
        run_id, '(system)' as category, concurrency,
        exp(avg(log_ratio) filter (where comparison = 'ab')) as speedup,
        count(*) filter (where comparison = 'ab') as pairs,
        level_prompts.prompts,
        count(distinct repeat) filter (where comparison = 'ab') as repeats,
        exp(avg(log_ratio) filter (where comparison = 'aa')) as aa_speedup,
        count(*) filter (where comparison = 'aa') as aa_pairs
    from block_pairs
    left join level_prompts using (run_id, concurrency)
    group by all
),
stats as (
    select * from category_stats
    union all
    select * from system_stats
),
cis as (
    select
        run_id, category, concurrency,
        any_value(ci_low) filter (where comparison = 'ab' and "interval" = 'measurement') as ci_low,
        any_value(ci_high) filter (where comparison = 'ab' and "interval" = 'measurement') as ci_high,
        any_value(ci_low) filter (where comparison = 'ab' and "interval" = 'prompts') as prompts_ci_low,
        any_value(ci_high) filter (where comparison = 'ab' and "interval" = 'prompts') as prompts_ci_high,
        any_value(ci_low) filter (where comparison = 'aa' and "interval" = 'measurement') as aa_ci_low,
        any_value(ci_high) filter (where comparison = 'aa' and "interval" = 'measurement') as aa_ci_high
    from intervals
    group by all
),
judged as (
    select
        groups.*,
        stats.* exclude (run_id, category, concurrency),
        cis.* exclude (run_id, category, concurrency),
        greatest(cis.aa_ci_high, 1 / cis.aa_ci_low) as aa_floor,
        coalesce(
            levels.excluded_reason,
            case
                when groups.baseline_tokens_per_s is null
                    then 'no successful baseline request in this group'
                when groups.baseline_tokens_per_s = 0
                    then 'baseline produced 0 tokens/s (nothing to divide by)'
                when groups.speculative_tokens_per_s is null
                    then 'no successful speculative request in this group'
                when stats.speedup is null and groups.category = '(system)'
                    then 'no repeat has a throughput in both arms (no pair)'
                when stats.speedup is null
                    then 'no prompt succeeded in both arms (no pair)'
            end
        ) as excluded_reason
    from groups
    left join levels using (run_id, concurrency)
    left join stats using (run_id, category, concurrency)
    left join cis using (run_id, category, concurrency)
),
labelled as (
    select
        *,
        case
            when excluded_reason is not null or ci_low is null then null
            when ci_low > 1 and (aa_floor is null or ci_low > aa_floor) then 'faster'
            when ci_high < 1 and (aa_floor is null or ci_high < 1 / aa_floor) then 'slower'
            else 'within noise'
        end as label,
        case
            when excluded_reason is not null then null
            when ci_low is null and category = '(system)'
                then 'no interval: one repeat; needs --repeats 2 or more'
            when ci_low is null
                then 'no interval: one pair per prompt; needs --repeats 2 or more'
            when aa_floor is null
                then 'measurement interval against 1; no A/A floor, needs 2 repeats'
            else 'measurement interval against 1 and the A/A floor'
        end as label_basis
    from judged
),
final as (
    select
        run_id,
        category,
        concurrency,
        case when excluded_reason is null then speedup end as speedup,
        case when excluded_reason is null then ci_low end as ci_low,
        case when excluded_reason is null then ci_high end as ci_high,
        case when excluded_reason is null then prompts_ci_low end as prompts_ci_low,
        case when excluded_reason is null then prompts_ci_high end as prompts_ci_high,
        label,
        label_basis,
        coalesce(pairs, 0) as pairs,
        coalesce(prompts, 0) as prompts,
        coalesce(repeats, 0) as repeats,
        case when excluded_reason is null then aa_speedup end as aa_speedup,
        coalesce(aa_pairs, 0) as aa_pairs,
        case when excluded_reason is null then aa_ci_low end as aa_ci_low,
        case when excluded_reason is null then aa_ci_high end as aa_ci_high,
        case when excluded_reason is null then aa_floor end as aa_floor,
        case when excluded_reason is null and category <> '(system)'
             then speculative_tokens_per_s / baseline_tokens_per_s end as speedup_mean_of_rates,
        baseline_tokens_per_s,
        speculative_tokens_per_s,
        definition,
        excluded_reason
    from labelled
)
select * from final order by run_id, category, concurrency
