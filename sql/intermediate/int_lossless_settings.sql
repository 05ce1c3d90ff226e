-- int_lossless_settings
-- Grain: one row per run_id (as int_run_settings).
-- Purpose: the constants of the lossless check, defined once.
--   dtype               manifest.dtype ('unknown' if absent; external servers record 'unknown')
--   near_tie_threshold  the baseline top-1 minus top-2 logprob margin below which a greedy
--                       flip is put down to numerics [nats], by dtype:
--                         bfloat16 (and anything else: auto, unknown, external) 0.25
--                         float16 0.03
--                         float32 0.001
--                       Why: vLLM computes the logits in the model dtype. bfloat16 keeps 8
--                       significant bits (2-3 decimal digits): near the top logit of a small
--                       model (|z| 16..32) neighbouring values are 0.125 apart, and a change of
--                       batch shape (the verify step's multi-token forward against a 1-token
--                       decode, or another batch size) moves each logit by about one such step,
--                       so the top-1 minus top-2 margin can move by ~2 x 0.125 = 0.25. float16
--                       has 3 more bits (8x finer: 0.03). float32 logits drift ~1e-5..1e-4 across
--                       batch shapes; 0.001 leaves a 10x allowance. A wrongly accepted draft
--                       token shows a margin of whole nats, far above each threshold. The A/A
--                       floor (lossless: baseline against itself) is the empirical check on them.
--   max_error_rate      int_run_settings.max_error_rate, for the verification pass's own failures
with settings as (
    select run_id, dtype, max_error_rate from int_run_settings
),
final as (
    select
        run_id,
        coalesce(dtype, 'unknown') as dtype,
        cast(case coalesce(dtype, 'unknown') when 'float32' then 0.001 when 'float16' then 0.03 else 0.25 end
             as double) as near_tie_threshold,
        max_error_rate
    from settings
)
select * from final
