MODEL (name output_equality, kind TABLE, grain (run_id, category, level));
-- Grain: one row per run_id, category and level with greedy (temperature = 0)
--   requests in either arm.
-- Purpose: timed-pass text identity (no margins): is the output text of the timed
--   greedy requests the same in both arms? The classified lossless check (token
--   ids, first divergence, logprob margin) is the lossless mart; this one only
--   compares the text the timed requests returned, pooled over repeats.
--   Pairs: the same prompt at the same level and repeat in both arms (pair_index
--   matches repeated sends of a prompt within one block).
--   pairs            pairs where both requests succeeded and temperature = 0
--   identical        pairs whose output_text is byte-identical (equal SHA-256 digests,
--                    stg_requests.output_text_sha256)
--   identical_share  identical / pairs (NULL when no pairs)
--   excluded_reason  int_levels_compared.excluded_reason: the level failed in either
--                    arm, or an arm did not run it; pairs, identical and
--                    identical_share are then NULL (no lossless figure from it)
--   Caveat: in bfloat16 the batch shape alone can change greedy outputs; a text
--   difference here is no verdict (the lossless mart classifies each divergence
--   by its logprob margin and sets it beside the baseline's own A/A floor).
with requests as (
    select * from int_requests_measured where temperature = 0
),
groups as (
    select distinct run_id, category, level from stg_requests where temperature = 0
),
levels as (
    select * from int_levels_compared
),
pairs as (
    select b.run_id, b.category, b.level, b.output_text_sha256 = s.output_text_sha256 as same
    from requests b
    join requests s
      on s.run_id = b.run_id and s.prompt_id = b.prompt_id and s.level = b.level
     and s.repeat = b.repeat and s.pair_index = b.pair_index
    where b.arm = 'baseline' and s.arm = 'speculative'
),
counted as (
    select run_id, category, level, count(*) as pairs, count(*) filter (where same) as identical
    from pairs
    group by all
),
final as (
    select
        groups.run_id,
        groups.category,
        groups.level,
        case when levels.excluded_reason is null then coalesce(counted.pairs, 0) end as pairs,
        case when levels.excluded_reason is null then coalesce(counted.identical, 0) end as identical,
        case when levels.excluded_reason is null then counted.identical / nullif(counted.pairs, 0) end
            as identical_share,
        levels.excluded_reason
    from groups
    left join counted using (run_id, category, level)
    left join levels using (run_id, level)
)
select * from final order by run_id, category, level
