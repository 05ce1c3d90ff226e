MODEL (name speedup_weighted, kind TABLE, grain (run_id, level, category));
-- Grain: one row per run_id and level with category '(weighted)' (the overall
--   figure for the service's mix), plus one row per run_id, category and level (the
--   category's part in it), for every level of int_levels_compared and every category that
--   has requests in the run or a share in the run's weights (each run weighs by its own
--   manifest).
-- Purpose: "how much faster is my service with this mix": the overall speedup weighted
--   by the service's category shares, next to the unweighted figure of the run's own
--   mix, with each category's contribution.
-- Weights w_c, in this order (weights_source says which):
--   'given (--mix)'            manifest.mix (specdec-replay --mix): the shares the user gave
--   'traffic file shares'      manifest.traffic.category_shares: the traffic file's rows per
--                              category / its rows
--   'traffic file row counts'  manifest.traffic.categories as row counts (manifests written
--                              before category_shares), divided by their sum
--   A category with requests in the run but no share has w_c = 0. No weights at all:
--   weights_source, share and every weighted figure are NULL and excluded_reason says so.
-- Per category c and level (category rows), over the category's pairs of
--   int_requests_paired (comparison 'ab': same prompt, level, repeat and pair_index,
--   both successful), repeats pooled:
--   baseline_e2e_ms_mean, speculative_e2e_ms_mean  Tb_c, Ts_c: mean e2e of the pairs [ms]
--   speedup          Tb_c / Ts_c: the ratio of mean times (the category's time-share-correct speedup)
--   speedup_geomean  exp(avg(log_ratio)): geometric mean of the paired ratios (as in the speedup mart)
--   share            w_c as given or recorded
--   share_used       w_c / covered_share: the weight the category has in the weighted figures
--                    (= w_c when no category is missing and the shares sum to 1); 0 with no share
--   run_share        the category's pairs / the level's pairs: the weight the unweighted figure gives it
--   baseline_time_share  w_c Tb_c / sum_c w_c Tb_c: the category's share of the mix's baseline time
--   saved_fraction   w_c (Tb_c - Ts_c) / sum_c w_c Tb_c: the share of the mix's baseline time this
--                    category saves (its contribution); summed over the categories it is
--                    1 - 1 / speedup_covered. Negative when the category got slower
--   sums over c are over the categories with a figure and w_c > 0
-- Overall ('(weighted)' rows):
--   speedup          sum_c w_c Tb_c / sum_c w_c Ts_c: the ratio of the mix's weighted mean e2e
--                    times, baseline over speculative. This is the figure that answers the
--                    question: a request drawn from the mix takes this many times less time on
--                    average, and at a fixed concurrency (closed loop, throughput = concurrency /
--                    mean e2e) the service completes this many times more requests per second.
--                    Equivalently 1 / speedup = sum_c baseline_time_share_c / speedup_c: a
--                    category weighs by its share of the baseline time, not only of requests.
--                    NULL when a category with w_c > 0 has no figure (excluded_reason names it):
--                    the shares are never silently renormalised
--   speedup_geomean  exp(sum_c share_used_c ln speedup_geomean_c): the weighted geometric mean of
--                    the per-category figures, the same statistic as speedup_unweighted, so the
--                    two differ by the weights only; NULL like speedup
--   speedup_unweighted  exp(avg(log_ratio)) over every pair of the level, categories pooled:
--                    each pair weighs the same (the run's own mix, run_share)
--   speedup_covered  speedup over the categories that have a figure, their shares renormalised
--                    to sum 1; equals speedup when none is missing, and is given (with a note)
--                    when some are, so a reader still has a figure and knows what it covers
--   covered_share    sum of w_c over the categories with a figure (the part of the mix measured)
--   share            sum of w_c over every category (1 within 0.001)
--   baseline_e2e_ms_mean, speculative_e2e_ms_mean  sum_c share_used_c Tb_c, sum_c share_used_c Ts_c:
--                    the mix's mean e2e times [ms] (over the covered categories)
--   saved_fraction   1 - 1 / speedup_covered: the share of the mix's baseline time saved
--   pairs, prompts   over every category of the level
--   share_used, run_share, baseline_time_share  NULL
-- Caveats: the per-category times were measured in the run's own mix at that concurrency;
--   re-weighting assumes a category's times do not depend on what it is batched with. To
--   measure a mix itself, replay a file re-weighted with `specdec traffic mix`.
--   ci_low, ci_high  '(weighted)' rows only: the 95% measurement interval of speedup, computed
--                    by analytics/intervals.py as the speedup mart's: per repeat the block figure
--                    ln(sum_c share_used_c Tb_c,r / sum_c share_used_c Ts_c,r) (repeats in which
--                    every weighted category has a pair), t interval over those repeats with
--                    the variance components of that series and Satterthwaite df (pointwise); NULL with fewer than 2 such repeats, or when
--                    speedup is NULL
--   definition       which figure the row's speedup is, in words
--   note             what to know about the row: a category with no share contributes nothing;
--                    a category with a share but no figure is left out of speedup_covered
--   excluded_reason  why speedup is NULL: the level's reason (int_levels_compared: a failed
--                    level or an arm that did not run it); 'no category shares ...'; per
--                    category 'no request of this category at this level' or 'no prompt
--                    succeeded in both arms (no pair)'; on '(weighted)' rows
--                    'no figure for <category> (share w): <its reason>; ...'. NULL when computed.
with settings as (
    select run_id, manifest from stg_manifest where manifest is not null
),
sources as (
    -- where a run's weights can come from, first found first: the --mix given to the run,
    -- the traffic file's category shares, its row counts per category
    select run_id, 1 as precedence, 'given (--mix)' as weights_source, manifest -> 'mix' as shares
    from settings
    union all
    select run_id, 2, 'traffic file shares', manifest -> 'traffic' -> 'category_shares' from settings
    union all
    select run_id, 3, 'traffic file row counts', manifest -> 'traffic' -> 'categories' from settings
),
entries as (
    select run_id, precedence, weights_source, e.key as category, e.value as share
    from sources,
         unnest(map_entries(json_transform(
             case when json_type(shares) = 'OBJECT' then shares end, '"MAP(VARCHAR, DOUBLE)"'))) as t(e)
),
weights as (
    -- the first source with an entry; row counts become shares
    select
        run_id,
        category,
        case when precedence = 3 then share / sum(share) over (partition by run_id, precedence) else share end
            as share,
        weights_source
    from entries
    qualify precedence = min(precedence) over (partition by run_id)
),
levels as (
    select * from int_levels_compared
),
weights_set as (
    select runs.run_id, any_value(w.weights_source) as weights_source, sum(w.share) as share_total
    from (select distinct run_id from levels) runs
    left join weights w using (run_id)
    group by runs.run_id
),
pairs as (
    select * from int_requests_paired where comparison = 'ab'
),
requested as (
    select distinct run_id, category, level from stg_requests
),
categories as (
    select run_id, category from weights
    union
    select run_id, category from requested
),
per_category as (
    select
        run_id, category, level,
        count(*) as pairs,
        count(distinct prompt_id) as prompts,
        avg(reference_e2e_ms) as baseline_e2e_ms_mean,
        avg(treatment_e2e_ms) as speculative_e2e_ms_mean,
        exp(avg(log_ratio)) as speedup_geomean
    from pairs
    group by all
),
per_level as (
    select
        run_id, level,
        count(*) as pairs,
        count(distinct prompt_id) as prompts,
        exp(avg(log_ratio)) as speedup_unweighted
    from pairs
    group by all
),
category_rows as (
    select
        l.run_id,
        c.category,
        l.level,
        ws.weights_source,
        case when ws.weights_source is not null then coalesce(w.share, 0) end as share,
        pc.pairs,
        pc.prompts,
        pc.pairs / pl.pairs as run_share,
        pc.baseline_e2e_ms_mean,
        pc.speculative_e2e_ms_mean,
        pc.speedup_geomean,
        coalesce(
            l.excluded_reason,
            case
                when r.category is null then 'no request of this category at this level'
                when pc.pairs is null then 'no prompt succeeded in both arms (no pair)'
            end
        ) as excluded_reason
    from categories c
    join levels l on l.run_id = c.run_id
    join weights_set ws on ws.run_id = l.run_id
    left join weights w on w.run_id = c.run_id and w.category = c.category
    left join per_category pc
      on pc.run_id = l.run_id and pc.category = c.category and pc.level = l.level
    left join per_level pl on pl.run_id = l.run_id and pl.level = l.level
    left join requested r on r.run_id = l.run_id and r.category = c.category and r.level = l.level
),
level_sums as (
    select
        run_id,
        level,
        sum(share) filter (where excluded_reason is null and share > 0) as covered_share,
        sum(share * baseline_e2e_ms_mean) filter (where excluded_reason is null and share > 0) as weighted_baseline,
        sum(share * speculative_e2e_ms_mean) filter (where excluded_reason is null and share > 0) as weighted_speculative,
        sum(share * ln(speedup_geomean)) filter (where excluded_reason is null and share > 0) as weighted_log,
        string_agg(printf('%s (share %.3f): %s', category, share, excluded_reason), '; ' order by category)
            filter (where excluded_reason is not null and share > 0) as missing
    from category_rows
    group by all
),
weighted_rows as (
    select
        l.run_id,
        '(weighted)' as category,
        l.level,
        ws.weights_source,
        ws.share_total as share,
        cast(null as double) as share_used,
        cast(null as double) as run_share,
        coalesce(pl.pairs, 0) as pairs,
        coalesce(pl.prompts, 0) as prompts,
        s.weighted_baseline / s.covered_share as baseline_e2e_ms_mean,
        s.weighted_speculative / s.covered_share as speculative_e2e_ms_mean,
        case when s.missing is null then s.weighted_baseline / s.weighted_speculative end as speedup,
        case when s.missing is null then exp(s.weighted_log / s.covered_share) end as speedup_geomean,
        case when l.excluded_reason is null then pl.speedup_unweighted end as speedup_unweighted,
        s.weighted_baseline / s.weighted_speculative as speedup_covered,
        s.covered_share,
        cast(null as double) as baseline_time_share,
        1 - s.weighted_speculative / s.weighted_baseline as saved_fraction,
        'ratio of the weighted mean e2e times, baseline / speculative (weights: '
            || coalesce(ws.weights_source, 'none') || ')' as definition,
        case when s.missing is not null and s.covered_share > 0
             then printf('speedup_covered renormalises the shares of the categories with a figure '
                         '(covered share %.3f of %.3f)', s.covered_share, ws.share_total)
        end as note,
        coalesce(
            l.excluded_reason,
            case
                when ws.weights_source is null
                    then 'no category shares: the manifest records neither --mix nor the traffic''s category shares'
                when s.missing is not null then 'no figure for ' || s.missing
                when s.covered_share is null then 'no category with a share has a figure'
            end
        ) as excluded_reason
    from levels l
    join weights_set ws on ws.run_id = l.run_id
    left join level_sums s on s.run_id = l.run_id and s.level = l.level
    left join per_level pl on pl.run_id = l.run_id and pl.level = l.level
),
contribution_rows as (
    select
        c.run_id,
        c.category,
        c.level,
        c.weights_source,
        c.share,
        case when c.excluded_reason is null and c.share is not null
             then coalesce(c.share / s.covered_share, 0) end as share_used,
        c.run_share,
        coalesce(c.pairs, 0) as pairs,
        coalesce(c.prompts, 0) as prompts,
        c.baseline_e2e_ms_mean,
        c.speculative_e2e_ms_mean,
        c.baseline_e2e_ms_mean / c.speculative_e2e_ms_mean as speedup,
        c.speedup_geomean,
        cast(null as double) as speedup_unweighted,
        cast(null as double) as speedup_covered,
        cast(null as double) as covered_share,
        c.share * c.baseline_e2e_ms_mean / s.weighted_baseline as baseline_time_share,
        c.share * (c.baseline_e2e_ms_mean - c.speculative_e2e_ms_mean) / s.weighted_baseline as saved_fraction,
        'ratio of the mean e2e times of the category''s pairs, baseline / speculative' as definition,
        case
            when c.weights_source is null then null
            when c.share = 0 then 'no share in the mix: contributes nothing'
            when c.excluded_reason is not null
                then 'has a share but no figure: the weighted speedup is NULL, speedup_covered leaves it out'
        end as note,
        c.excluded_reason
    from category_rows c
    left join level_sums s on s.run_id = c.run_id and s.level = c.level
),
all_rows as (
    select * from weighted_rows
    union all by name
    select * from contribution_rows
),
weighted_intervals as (
    select run_id, level, ci_low, ci_high
    from int_speedup_intervals
    where category = '(weighted)' and comparison = 'ab' and "interval" = 'measurement'
),
final as (
    select
        a.run_id,
        a.category,
        a.level,
        a.weights_source,
        a.share,
        case when a.excluded_reason is null then a.share_used end as share_used,
        case when a.excluded_reason is null then a.run_share end as run_share,
        a.pairs,
        a.prompts,
        case when a.excluded_reason is null or a.speedup_covered is not null then a.baseline_e2e_ms_mean end
            as baseline_e2e_ms_mean,
        case when a.excluded_reason is null or a.speedup_covered is not null then a.speculative_e2e_ms_mean end
            as speculative_e2e_ms_mean,
        case when a.excluded_reason is null then a.speedup end as speedup,
        case when a.excluded_reason is null and a.category = '(weighted)' then i.ci_low end as ci_low,
        case when a.excluded_reason is null and a.category = '(weighted)' then i.ci_high end as ci_high,
        case when a.excluded_reason is null then a.speedup_geomean end as speedup_geomean,
        a.speedup_unweighted,
        a.speedup_covered,
        a.covered_share,
        case when a.excluded_reason is null then a.baseline_time_share end as baseline_time_share,
        case when a.excluded_reason is null or a.speedup_covered is not null then a.saved_fraction end
            as saved_fraction,
        a.definition,
        a.note,
        a.excluded_reason
    from all_rows a
    left join weighted_intervals i on i.run_id = a.run_id and i.level = a.level
)
select * from final order by run_id, level, category
