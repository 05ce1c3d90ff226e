MODEL (name int_lossless_settings, kind VIEW, grain (run_id));
-- Grain: one row per run_id (as int_run_settings).
-- Purpose: the constants of the lossless check, defined once.
--   dtype               manifest.dtype ('unknown' if absent; external servers record 'unknown')
--   dtype_threshold     the reasoned near-tie margin for the dtype [nats], the fallback of
--                       near_tie_threshold when the run has no A/A divergence to calibrate from:
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
--                       token shows a margin of whole nats, far above each threshold.
--   aa_divergences      A/A flips of the run with a known margin: pairs of baseline checks of the
--                       lossless pass (int_baseline_greedy_pairs, every two levels or passes of
--                       the same prompt occurrence) that diverge at a position where both have a
--                       token and at least one has a second logprob
--   aa_max_margin       the largest aa_margin over those flips [nats]: the widest margin at which
--                       the baseline's greedy choice flipped with no speculation at all, on this
--                       machine, dtype and model (NULL when aa_divergences = 0)
--   near_tie_threshold  the baseline top-1 minus top-2 logprob margin up to which a greedy flip of
--                       the speculative arm is put down to numerics [nats]: the larger of
--                       dtype_threshold and aa_max_margin. The run's A/A flips can widen it (the
--                       largest observed, no allowance added), never narrow it below the dtype's
--                       value: a handful of flips is a low estimate of the largest one numerics
--                       allow, and a margin of one rounding step can flip whatever the run saw
--                       (2026-12-06, vLLM CPU bfloat16, 36 prompt-pool prompts at c1 and c4: 2 A/A
--                       flips, largest 0.125, took the threshold to 0.125, and 4 of the 6 pairs it
--                       called suspect took the baseline's runner-up at a margin of exactly 0.25,
--                       one bfloat16 step). A wrongly accepted draft token shows whole nats
--   near_tie_threshold_source   'aa_divergences' (A/A flips above dtype_threshold widened it) |
--                       'dtype_floor' (the run's A/A flips were all within dtype_threshold) |
--                       'dtype_default' (no A/A flip in the run: the reasoned dtype_threshold)
--   max_error_rate      int_run_settings.max_error_rate, for the lossless pass's own failures
with settings as (
    select run_id, dtype, max_error_rate from int_run_settings
),
aa as (
    select run_id, count(*) as aa_divergences, max(aa_margin) as aa_max_margin
    from int_baseline_greedy_pairs
    where aa_margin is not null
    group by run_id
),
final as (
    select
        settings.run_id,
        coalesce(settings.dtype, 'unknown') as dtype,
        cast(case coalesce(settings.dtype, 'unknown') when 'float32' then 0.001 when 'float16' then 0.03 else 0.25 end
             as double) as dtype_threshold,
        coalesce(aa.aa_divergences, 0) as aa_divergences,
        aa.aa_max_margin,
        greatest(coalesce(aa.aa_max_margin, dtype_threshold), dtype_threshold) as near_tie_threshold,
        case
            when aa.aa_max_margin is null then 'dtype_default'
            when aa.aa_max_margin > dtype_threshold then 'aa_divergences'
            else 'dtype_floor'
        end as near_tie_threshold_source,
        settings.max_error_rate
    from settings
    left join aa on aa.run_id = settings.run_id
)
select * from final
