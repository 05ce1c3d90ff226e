MODEL (name lossless, kind TABLE, grain (run_id, category, level));
-- Grain: one row per run_id, category and level that has lossless-pass
--   checks or greedy (temperature = 0) timed baseline requests.
-- Purpose: is speculation lossless for greedy decoding, judged against the noise
--   floor of the baseline against itself at the same level?
--   Speculative vs baseline (the lossless pass, int_greedy_pairs: token ids, repeat 0):
--   dtype            int_lossless_settings.dtype: manifest.dtype of the run (sets the fallback
--                    of near_tie_threshold)
--   checks           lossless-pass requests of the category at this level, both arms, repeat 0
--   checks_failed    of those, success = false (typed in stg_greedy_checks.error_type)
--   pairs            prompt occurrences with a successful check in both arms
--   identical        pairs whose token id lists are equal
--   near_tie         non-identical pairs where, at the first divergence, the speculative token
--                    is the baseline's runner-up (its top-2 token) AND baseline_margin <=
--                    near_tie_threshold: numerics swapping the baseline's top two
--   suspect          every other non-identical pair: a speculative token the baseline did not
--                    rank second (whatever the margin), a larger margin, or nothing known to
--                    explain it (pairs = identical + near_tie + suspect); every one is listed
--                    in lossless_divergences
--   identity_share   identical / pairs (NULL when pairs = 0)
--   near_tie_threshold  int_lossless_settings.near_tie_threshold [nats]: the dtype's reasoned
--                    value, or the run's largest baseline-vs-baseline margin at a greedy flip of
--                    the lossless pass (A/A, across levels and passes) where that is larger; see
--                    its header
--   near_tie_threshold_source   'aa_divergences' (the run's A/A flips widened it above the dtype's
--                    value) | 'dtype_floor' (its A/A flips were all within the dtype's value) |
--                    'dtype_default' (the run has none: the reasoned value for the dtype)
--   near_tie_threshold_divergences   the run's A/A flips (int_lossless_settings.aa_divergences: the
--                    threshold is the largest of their margins with 'aa_divergences'); 0 with
--                    'dtype_default'
--   pass_draft_tokens   draft tokens the speculative arm proposed during its lossless pass at this
--                    level (int_passes_checked.draft_tokens: counter after - before); NULL when
--                    the counters were not read around the pass or are not exported
--   pass_valid       the speculative arm speculated during its lossless pass at this level (its
--                    draft counters moved: int_passes_checked.speculation_ran). false: they did
--                    not, so the pass compared two servers that both decoded without drafts
--                    and shows nothing about speculation: the pass is invalid and its pairs are
--                    not counted (excluded_reason). NULL: not known (no counter reads around
--                    the pass: a run recorded before they existed, or no /metrics page); the
--                    figures then stand as before
--   excluded_reason  why pairs .. identity_share are NULL: 'no lossless pass at this level',
--                    '<arm> arm has no lossless checks at this level', '<arm>
--                    lossless pass failed (error rate r > max m)' (the pass's failed-request
--                    share over all categories of the level, against manifest.max_error_rate),
--                    or 'speculation did not run during the lossless pass (draft counters
--                    unchanged)' (pass_valid = false); NULL when the figures stand
--   A/A floor (the TIMED baseline requests, int_baseline_text_pairs: output_text, successful only):
--   repeats          timed baseline repeats of the level holding greedy requests of the category
--                    (NULL when there are none)
--   aa_pairs         baseline repeat r vs r + 1, same level and prompt occurrence; NULL when
--                    repeats < 2 (not applicable with one repeat)
--   aa_identical     of those, byte-identical output_text
--   aa_identity_share   aa_identical / aa_pairs (NULL when aa_pairs is NULL or 0)
--   cross_level_pairs   baseline repeat 0 at this level vs repeat 0 at the lowest level, same
--                    prompt occurrence; NULL at the lowest level itself (nothing to compare)
--   cross_level_identical   of those, byte-identical output_text
--   cross_level_identity_share   cross_level_identical / cross_level_pairs (NULL when NULL or 0)
--   Reading: identity_share near aa_identity_share / cross_level_identity_share says the
--   differences are the engine's own numerics; suspect > 0 is the figure to look at.
with checks as (
    select * from stg_greedy_checks where repeat = 0
),
pairs as (
    select * from int_greedy_pairs
),
text_pairs as (
    select * from int_baseline_text_pairs
),
timed as (
    select * from stg_requests where arm = 'baseline' and temperature = 0
),
settings as (
    select * from int_lossless_settings
),
passes as (
    select run_id, level, draft_tokens, speculation_ran
    from int_passes_checked
    where arm = 'speculative' and pass_kind = 'lossless_pass'
),
groups as (
    select distinct run_id, category, level from checks
    union
    select distinct run_id, category, level from timed
),
lowest as (
    select run_id, min(level) as lowest_level from timed group by run_id
),
arm_health as (
    select run_id, arm, level, count(*) filter (where not success) / count(*) as error_rate
    from checks
    group by all
),
level_health as (
    select
        levels.run_id,
        levels.level,
        case
            when b.arm is null and s.arm is null then 'no lossless pass at this level'
            when b.arm is null then 'baseline arm has no lossless checks at this level'
            when s.arm is null then 'speculative arm has no lossless checks at this level'
            when b.error_rate > settings.max_error_rate then
                printf('baseline lossless pass failed (error rate %.3f > max %.3f)',
                       b.error_rate, settings.max_error_rate)
            when s.error_rate > settings.max_error_rate then
                printf('speculative lossless pass failed (error rate %.3f > max %.3f)',
                       s.error_rate, settings.max_error_rate)
            when not passes.speculation_ran then
                'speculation did not run during the lossless pass (draft counters unchanged)'
        end as excluded_reason,
        passes.draft_tokens as pass_draft_tokens,
        passes.speculation_ran as pass_valid
    from (select distinct run_id, level from groups) levels
    left join settings on settings.run_id = levels.run_id
    left join passes on passes.run_id = levels.run_id and passes.level = levels.level
    left join arm_health b on b.run_id = levels.run_id and b.level = levels.level and b.arm = 'baseline'
    left join arm_health s
      on s.run_id = levels.run_id and s.level = levels.level and s.arm = 'speculative'
),
check_counts as (
    select run_id, category, level, count(*) as checks, count(*) filter (where not success) as checks_failed
    from checks
    group by all
),
pair_counts as (
    select
        run_id, category, level,
        count(*) as pairs,
        count(*) filter (where class = 'identical') as identical,
        count(*) filter (where class = 'near_tie') as near_tie,
        count(*) filter (where class = 'suspect') as suspect
    from pairs
    group by all
),
repeat_counts as (
    select run_id, category, level, count(distinct repeat) as repeats
    from timed
    group by all
),
aa as (
    select
        run_id, category, level,
        count(*) filter (where comparison = 'repeat') as aa_pairs,
        count(*) filter (where comparison = 'repeat' and identical) as aa_identical,
        count(*) filter (where comparison = 'cross_level') as cross_level_pairs,
        count(*) filter (where comparison = 'cross_level' and identical) as cross_level_identical
    from text_pairs
    group by all
),
joined as (
    select
        g.run_id,
        g.category,
        g.level,
        settings.dtype,
        coalesce(c.checks, 0) as checks,
        coalesce(c.checks_failed, 0) as checks_failed,
        h.excluded_reason,
        coalesce(p.pairs, 0) as pairs_found,
        coalesce(p.identical, 0) as identical_found,
        coalesce(p.near_tie, 0) as near_tie_found,
        coalesce(p.suspect, 0) as suspect_found,
        settings.near_tie_threshold,
        settings.near_tie_threshold_source,
        settings.aa_divergences as near_tie_threshold_divergences,
        h.pass_draft_tokens,
        h.pass_valid,
        r.repeats,
        g.level = lowest.lowest_level or lowest.lowest_level is null or r.repeats is null
            as is_lowest,
        coalesce(aa.aa_pairs, 0) as aa_found,
        coalesce(aa.aa_identical, 0) as aa_identical_found,
        coalesce(aa.cross_level_pairs, 0) as cross_found,
        coalesce(aa.cross_level_identical, 0) as cross_identical_found
    from groups g
    left join settings using (run_id)
    left join lowest using (run_id)
    left join level_health h using (run_id, level)
    left join check_counts c using (run_id, category, level)
    left join pair_counts p using (run_id, category, level)
    left join repeat_counts r using (run_id, category, level)
    left join aa using (run_id, category, level)
),
final as (
    select
        run_id,
        category,
        level,
        dtype,
        checks,
        checks_failed,
        case when excluded_reason is null then pairs_found end as pairs,
        case when excluded_reason is null then identical_found end as identical,
        case when excluded_reason is null then near_tie_found end as near_tie,
        case when excluded_reason is null then suspect_found end as suspect,
        case when excluded_reason is null then identical_found / nullif(pairs_found, 0) end as identity_share,
        near_tie_threshold,
        near_tie_threshold_source,
        near_tie_threshold_divergences,
        pass_draft_tokens,
        pass_valid,
        excluded_reason,
        repeats,
        case when repeats >= 2 then aa_found end as aa_pairs,
        case when repeats >= 2 then aa_identical_found end as aa_identical,
        case when repeats >= 2 then aa_identical_found / nullif(aa_found, 0) end as aa_identity_share,
        case when not is_lowest then cross_found end as cross_level_pairs,
        case when not is_lowest then cross_identical_found end as cross_level_identical,
        case when not is_lowest then cross_identical_found / nullif(cross_found, 0) end
            as cross_level_identity_share
    from joined
)
select * from final order by run_id, category, level
