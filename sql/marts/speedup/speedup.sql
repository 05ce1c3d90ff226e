MODEL (name speedup, kind TABLE, grain (run_id, category, level));
-- Grain: one row per run_id, category and level, plus category '(system)',
--   for every group that has requests in either arm (a run is compared with itself only:
--   its two arms, its repeats, its own noise pool).
-- Purpose: the effect of speculation, as a ratio of two arms that differ only in
--   the speculative setting (see manifest.arm_difference), with its intervals,
--   a calibration check of its noise model and a label.
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
--   ci_low, ci_high  the family-wise interval the label reads: a Student t interval over
--                 repeats at ci_level. Each repeat gives a block figure (mean log ratio over the
--                 group's prompts in that repeat; '(system)': the block throughput log ratio);
--                 the interval is centre +- t(1 - (1 - ci_level) / 2, df) * se, from this
--                 category's own series across levels (analytics/variance.level_noise): the
--                 arm order as a fixed effect (centre: the level's mean with it averaged out),
--                 a shift shared by every level of a repeat (the server process), and the
--                 block's own noise, pooled over the levels unless the pooling test gives a
--                 level a variance of its own; slow blocks set aside; method of moments) and
--                 df is Satterthwaite's for that design. ci_level is the step-down level for the
--                 row's rank among the run's labelled rows (family_size of them): the level whose
--                 quantile is the 95% quantile of the largest |z| among the rows not yet rejected,
--                 rows at one level correlated as their series' residuals (analytics/labels.py,
--                 step_down_levels), so the labels keep a family-wise error rate of 5%. Computed by
--                 analytics/intervals.py into int_speedup_intervals ('family' rows).
--                 NULL with one repeat
--   ci_level      the confidence level of ci_low/ci_high (0.95 for a family of one)
--   pointwise_ci_low, pointwise_ci_high  the same interval at 95%, not adjusted for the family
--   df            Satterthwaite's degrees of freedom of V (repeats - 1 when the shared
--                 shift dominates; sum over levels of repeats - 1 when it is absent)
--   p_value       two-sided, against a ratio of 1, from the t statistic (mean / sqrt(V / R))
--   family_size   labelled rows of the run in this mart (the step-down's m)
--   prompts_ci_low, prompts_ci_high  95% "prompts and runs" interval: the prompts are a
--                 sample of the category, so mean over prompts of each prompt's mean log
--                 ratio +- t * sqrt(V / R + s2_prompt / P), df by Satterthwaite: covers the
--                 choice of prompts and run-to-run noise together; NULL for '(system)', with
--                 < 2 prompts or one repeat
--   pairs         per category: request pairs the speedup is computed from;
--                 '(system)': block pairs (one per repeat)
--   prompts       distinct prompts among those pairs (for '(system)': over all categories)
--   repeats       distinct repeats among those pairs
--   aa_speedup    the same statistic for the A/A control, baseline repeat r + 1 against
--                 repeat r (all consecutive repeats): per category the geometric mean
--                 of e2e(r) / e2e(r + 1) over int_requests_paired (comparison 'aa');
--                 '(system)' the geometric mean of block throughput ratios (r + 1 / r).
--                 A description of the baseline's drift between repeats (which the paired
--                 design cancels), not a check. NULL with one repeat
--   aa_pairs      pairs the A/A figure is computed from (block pairs for '(system)')
--   noise_ratio   the calibration check (analytics/fit.py): this category's block figures'
--                 standard deviation about their mean at this level over its other levels'
--                 (pooled); 1 when one variance fits every level, as the intervals assume.
--                 NULL for '(system)' (built from the same requests), with one repeat or one
--                 level
--   noise_p_value  one-sided p-value that this level is noisier than the others, from every
--                 category's residuals together (a block's categories weighted by the inverse
--                 of their covariance; the noise shared by a repeat's levels and by a block's
--                 categories counted); the same for every category of the level
--   noise_check   'noisier' when Holm's step-down over the levels rejects at a family-wise
--                 error rate of 5% and noise_ratio > 1: this level's intervals are too narrow
--                 (its noise is larger than the variance they use); 'fits' otherwise; NULL
--                 without a test. Not a hurdle for the label
--   margin        the run's practical margin delta (manifest.margin, declared before the run)
--   label         analytics/labels.py, from ci_low/ci_high and margin:
--                 'faster'        ci_low > 1
--                 'slower'        ci_high < 1
--                 'equivalent'    neither, and the row's 90% interval (two one-sided tests at
--                                 5%; equivalence_low/equivalence_high) lies inside
--                                 [1 / (1 + margin), 1 + margin]
--                 'inconclusive'  otherwise
--                 NULL when there is no speedup or no interval
--   equivalence_low, equivalence_high  the interval 'equivalent' reads: the 90% interval of
--                 two one-sided tests at 5% each (not adjusted for the family: an
--                 intersection-union test needs no Holm). NULL where ci_low is
--   clears_margin  faster: ci_low > 1 + margin; slower: ci_high < 1 / (1 + margin); else NULL
--   detectable_effect  the half-width of the interval as a share (exp(half) - 1): effects
--                 smaller than about this cannot be told from none by this run
--   repeats_needed  inconclusive rows: the fewest repeats (<= 100; 101: more) whose interval
--                 at this level would be no wider than ln(1 + margin) / 2, with this run's V
--   label_basis   what the label rests on, in words (says when there is no interval)
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
settings as (
    select run_id, margin from int_run_settings
),
intervals as (
    select * from int_speedup_intervals where segment is null
),
arm_rates as (
    -- each arm's rate per group: a category's mean request rate, the level's throughput for '(system)'
    select run_id, category, level, arm, output_tokens_per_s_mean as tokens_per_s,
           'geometric mean of paired e2e ratios' as definition
    from lat
    union all
    select run_id, '(system)', level, arm, output_tokens_per_s,
           'geometric mean of per-repeat level throughput ratios (capacity)'
    from thr
),
groups as (
    select
        run_id, category, level,
        any_value(tokens_per_s) filter (where arm = 'baseline') as baseline_tokens_per_s,
        any_value(tokens_per_s) filter (where arm = 'speculative') as speculative_tokens_per_s,
        any_value(definition) as definition
    from arm_rates
    where arm in ('baseline', 'speculative')
    group by run_id, category, level
),
category_stats as (
    select
        run_id, category, level,
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
    select run_id, level, count(distinct prompt_id) as prompts
    from request_pairs
    where comparison = 'ab'
    group by all
),
system_stats as (
    select
        run_id, '(system)' as category, level,
        exp(avg(log_ratio) filter (where comparison = 'ab')) as speedup,
        count(*) filter (where comparison = 'ab') as pairs,
        level_prompts.prompts,
        count(distinct repeat) filter (where comparison = 'ab') as repeats,
        exp(avg(log_ratio) filter (where comparison = 'aa')) as aa_speedup,
        count(*) filter (where comparison = 'aa') as aa_pairs
    from block_pairs
    left join level_prompts using (run_id, level)
    group by all
),
stats as (
    select * from category_stats
    union all
    select * from system_stats
),
ab as (
    select * from intervals where comparison = 'ab'
),
family as (
    select
        run_id, category, level,
        ci_low, ci_high, ci_level, df, p_value, family_size, label as interval_label, clears_margin,
        detectable_effect, repeats_needed, equivalence_low, equivalence_high
    from ab
    where "interval" = 'family'
),
cis as (
    -- the family interval's columns, with the other kinds' bounds beside them
    select
        keys.*,
        family.* exclude (run_id, category, level),
        measurement.ci_low as pointwise_ci_low, measurement.ci_high as pointwise_ci_high,
        prompts.ci_low as prompts_ci_low, prompts.ci_high as prompts_ci_high,
        fit.noise_ratio, fit.p_value as noise_p_value, fit.label as noise_check
    from (select distinct run_id, category, level from ab) keys
    left join family using (run_id, category, level)
    left join (select * from ab where "interval" = 'measurement') measurement using (run_id, category, level)
    left join (select * from ab where "interval" = 'prompts') prompts using (run_id, category, level)
    left join (select * from ab where "interval" = 'fit') fit using (run_id, category, level)
),
judged as (
    select
        groups.*,
        stats.* exclude (run_id, category, level),
        cis.* exclude (run_id, category, level),
        settings.margin,
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
    left join levels using (run_id, level)
    left join stats using (run_id, category, level)
    left join cis using (run_id, category, level)
    left join settings using (run_id)
),
labelled as (
    select
        *,
        case when excluded_reason is null and ci_low is not null then interval_label end as label,
        case
            when excluded_reason is not null then null
            when ci_low is null and category = '(system)'
                then 'no interval: one repeat; needs --repeats 2 or more'
            when ci_low is null
                then 'no interval: one pair per prompt; needs --repeats 2 or more'
            else printf('%.4g%% family-wise interval (step-down over %d labels) against 1 and the %.3g%% margin',
                        100 * ci_level, family_size, 100 * margin)
        end as label_basis
    from judged
),
measured as (
    -- a group's figures, only where it is not excluded (an excluded group says why instead)
    select * from labelled where excluded_reason is null
),
final as (
    select
        l.run_id, l.category, l.level,
        m.speedup, m.ci_low, m.ci_high, m.ci_level, m.pointwise_ci_low, m.pointwise_ci_high,
        m.df, m.p_value, m.family_size,
        case when m.ci_low is not null then m.equivalence_low end as equivalence_low,
        case when m.ci_low is not null then m.equivalence_high end as equivalence_high,
        m.prompts_ci_low, m.prompts_ci_high,
        l.margin,
        l.label,
        case when l.label is not null then l.clears_margin end as clears_margin,
        case when l.label is not null then l.detectable_effect end as detectable_effect,
        case when l.label = 'inconclusive' then l.repeats_needed end as repeats_needed,
        l.label_basis,
        coalesce(l.pairs, 0) as pairs, coalesce(l.prompts, 0) as prompts, coalesce(l.repeats, 0) as repeats,
        m.aa_speedup,
        coalesce(l.aa_pairs, 0) as aa_pairs,
        m.noise_ratio, m.noise_p_value, m.noise_check,
        case when m.category <> '(system)' then m.speculative_tokens_per_s / m.baseline_tokens_per_s end
            as speedup_mean_of_rates,
        l.baseline_tokens_per_s, l.speculative_tokens_per_s, l.definition, l.excluded_reason
    from labelled l
    left join measured m using (run_id, category, level)
)
select * from final order by run_id, category, level
