MODEL (name int_baseline_text_pairs, kind VIEW, grain (run_id, comparison, prompt_id, pair_index, level, repeat, other_level, other_repeat));
-- Grain: one row per run_id and comparison of two successful greedy (temperature = 0)
--   TIMED baseline requests of that run for the same prompt occurrence (stg_requests):
--   comparison = 'repeat'       repeat r vs repeat r + 1 at the same level
--                'cross_level'  repeat 0 at this level vs repeat 0 at the run's lowest level
--                               (rows only for levels above the lowest)
-- Purpose: the A/A floor of the lossless check. The baseline against itself shows how
--   often greedy text changes with no speculation at all: from run to run at one batch
--   shape (repeat), and with the batch shape (cross_level). The timed text is used, as
--   the baseline sent it under load; it carries no logprobs, so this is identity only.
--   category, level, prompt_id  of the compared requests (level: the higher
--                               level for cross_level)
--   pair_index                  occurrence of the prompt within (level, repeat), from 0, by request_id
--   repeat                      the first request's repeat (r; 0 for cross_level)
--   other_repeat                the second request's repeat (r + 1; 0 for cross_level)
--   other_level                 the second request's level (= level for repeat;
--                               the lowest level for cross_level)
--   identical                   output_text byte-identical (equal SHA-256 digests,
--                               stg_requests.output_text_sha256)
with requests as (
    select
        *,
        row_number() over (partition by run_id, level, repeat, prompt_id order by request_id) - 1
            as pair_index
    from stg_requests
    where arm = 'baseline' and temperature = 0
),
ok as (
    select * from requests where success
),
lowest as (
    select run_id, min(level) as level from requests group by run_id
),
final as (
    select
        a.run_id,
        case when b.level = a.level then 'repeat' else 'cross_level' end as comparison,
        a.category, a.level, a.prompt_id, a.pair_index,
        a.repeat, b.repeat as other_repeat, b.level as other_level,
        a.output_text_sha256 = b.output_text_sha256 as identical
    from ok a
    join lowest on lowest.run_id = a.run_id
    join ok b
      on b.run_id = a.run_id and b.prompt_id = a.prompt_id and b.pair_index = a.pair_index
     and (
            -- repeat: the next repeat at the same level
            (b.level = a.level and b.repeat = a.repeat + 1)
            -- cross_level: repeat 0 here against repeat 0 at the lowest level
            or (a.repeat = 0 and b.repeat = 0 and a.level > lowest.level
                and b.level = lowest.level)
         )
)
select * from final
