MODEL (name throughput, kind TABLE, grain (run_id, arm, level));
-- Grain: one row per run_id, arm and level that has requests (all
--   categories and repeats of the run together).
-- Purpose: system throughput of a level (capacity), from the client's clock,
--   over successful requests only; failed requests are counted beside it. Each
--   repeat's block is timed on its own (int_blocks_measured), so no interval
--   spans the other arm's block; the level figure pools the blocks.
--   repeats              blocks (repeats) of the level with requests
--   requests_ok          successful requests of the level, all repeats
--   requests_failed      requests of the level with success = false (see level_health)
--   output_tokens        sum(output_tokens) over successful requests
--   level_seconds        = sum over the level's blocks of block_seconds, where
--                          block_seconds = (max wall_end_ns - min wall_send_ns) / 1e9
--                          over one block's successful requests; NULL when none succeeded
--   output_tokens_per_s  = output_tokens / level_seconds   [tokens/s, whole server]
--   requests_per_s       = requests_ok / level_seconds
--   output_tokens_per_s_min, output_tokens_per_s_max
--                        lowest and highest output_tokens_per_s of one block (one repeat)
--   The per-second figures are NULL when no request of the level succeeded.
with final as (
    select
        run_id, arm, level,
        count(*) as repeats,
        sum(requests_ok) as requests_ok,
        sum(requests_failed) as requests_failed,
        sum(output_tokens) as output_tokens,
        sum(block_seconds) as level_seconds,
        sum(output_tokens) / nullif(sum(block_seconds), 0) as output_tokens_per_s,
        sum(requests_ok) / nullif(sum(block_seconds), 0) as requests_per_s,
        min(output_tokens_per_s) as output_tokens_per_s_min,
        max(output_tokens_per_s) as output_tokens_per_s_max
    from int_blocks_measured
    group by run_id, arm, level
)
select * from final order by run_id, arm, level
