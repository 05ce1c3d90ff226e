-- output_equality
-- Grain: one row per category and concurrency level.
-- Purpose: the lossless check for greedy decoding: does speculation change the text?
--   Pairs: the same prompt at the same level in both arms (pair_index matches repeats).
--   pairs            pairs where both requests succeeded and temperature = 0
--   identical        pairs whose output_text is byte-identical
--   identical_share  identical / pairs (NULL when no pairs)
--   Caveat: in bfloat16 the batch shape alone can change greedy outputs; a
--   baseline-vs-baseline noise floor is needed before calling a difference a defect.
with requests as (
    select * from int_requests_measured where temperature = 0
),
pairs as (
    select b.category, b.concurrency, b.output_text = s.output_text as same
    from requests b
    join requests s
      on s.prompt_id = b.prompt_id and s.concurrency = b.concurrency and s.pair_index = b.pair_index
    where b.arm = 'baseline' and s.arm = 'speculative'
),
final as (
    select category, concurrency, count(*) as pairs,
           count(*) filter (where same) as identical,
           count(*) filter (where same) / nullif(count(*), 0) as identical_share
    from pairs
    group by all
)
select * from final order by category, concurrency
