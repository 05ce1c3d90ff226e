MODEL (name speedup_natural_end, kind TABLE, grain (run_id, category, level, segment, unknown_reason));
-- Grain: one row per run_id, category, level and segment of the greedy
--   (temperature 0) A/B pairs, pooled over repeats; the 'unknown' segment has one row per
--   unknown_reason.
-- Purpose: with ignore_eos and a fixed length the model often runs past where it would
--   have stopped, into repetitive text that drafts predict well; this splits the paired
--   speedup at that point, so the forced tail cannot flatter the figure (the same split as
--   acceptance_natural_end, in time instead of accepted tokens).
--   Pairs, segments, the natural end P and the time to it per request are defined in
--   int_natural_end_pairs: the split point is the arrival of the first content chunk whose
--   running token count (stg_request_streams.chunk_tokens, the server's per-chunk usage) reaches
--   P, exact to one chunk (a chunk can carry several tokens under speculation).
--   segment          'before_natural_end'  send to the natural end (TTFT included); a pair
--                                          whose prompt never ended within max_tokens counts
--                                          here whole (see pairs_never_ended)
--                    'after_natural_end'   the natural end to the end of the stream
--                    'unknown'             pairs that are not split, one row per
--                                          unknown_reason (int_natural_end_pairs lists them:
--                                          no_natural_end, natural_end_at_start,
--                                          natural_end_past_output, no_chunk_tokens,
--                                          natural_end_not_in_chunks, empty_segment)
--   unknown_reason   why those pairs are not split; NULL for the two split segments
--   speedup          geometric mean over the segment's pairs of baseline time / speculative
--                    time in the segment = exp(avg(log_ratio)) (> 1: speculation faster);
--                    NULL for 'unknown', and when the level is excluded (excluded_reason)
--   pairs            pairs in the row (for 'unknown': pairs with that reason)
--   prompts          distinct prompts among them
--   repeats          distinct repeats among them
--   pairs_never_ended  pairs counted whole in 'before_natural_end' because the prompt never
--                    ended within max_tokens (0 in the other rows)
--   baseline_ms_mean, speculative_ms_mean  arithmetic mean over the pairs of the segment's
--                    time in each arm [ms]; NULL for 'unknown'
--   excluded_reason  int_levels_compared.excluded_reason: the level failed in either arm or
--                    an arm did not run it, so no speedup is computed from it; else NULL
--   ci_low, ci_high  the family-wise interval of the segment's speedup, as speedup's
--                    ci_low/ci_high: per repeat the mean log ratio of the segment's pairs (its
--                    block figure), t interval over repeats with the variance components of the
--                    category's segment series and Satterthwaite df, at the step-down level among
--                    the run's segment rows (analytics/intervals.py, int_speedup_intervals 'family'
--                    rows with this segment); NULL for 'unknown', with one repeat, or when the
--                    level is excluded
--   ci_level         the confidence level of ci_low/ci_high
--   label            as in speedup (analytics/labels.py): 'faster' (ci_low > 1), 'slower'
--                    (ci_high < 1), 'equivalent' (inside the run's margin), 'inconclusive';
--                    NULL without an interval
with segments as (
    select * from int_natural_end_pairs
),
levels as (
    select * from int_levels_compared
),
intervals as (
    select * from int_speedup_intervals
    where segment is not null and comparison = 'ab' and "interval" = 'family'
),
stats as (
    select
        run_id, category, level, segment,
        unknown_reason,
        exp(avg(log_ratio)) as geometric_mean_ratio,
        count(*) as pairs,
        count(distinct prompt_id) as prompts,
        count(distinct repeat) as repeats,
        count(*) filter (where never_ended) as pairs_never_ended,
        avg(reference_ms) as baseline_ms_mean,
        avg(treatment_ms) as speculative_ms_mean
    from segments
    group by all
),
joined as (
    select
        stats.*,
        levels.excluded_reason,
        intervals.ci_low,
        intervals.ci_high,
        intervals.ci_level,
        intervals.label
    from stats
    left join levels using (run_id, level)
    left join intervals
      on intervals.run_id = stats.run_id and intervals.category = stats.category
     and intervals.level = stats.level and intervals.segment = stats.segment
     and levels.excluded_reason is null and stats.segment <> 'unknown'
),
final as (
    select
        run_id, category, level, segment,
        unknown_reason,
        case when excluded_reason is null then geometric_mean_ratio end as speedup,
        ci_low,
        ci_high,
        ci_level,
        label,
        pairs,
        prompts,
        repeats,
        pairs_never_ended,
        baseline_ms_mean,
        speculative_ms_mean,
        excluded_reason
    from joined
)
select * from final order by run_id, category, level, segment, unknown_reason
