MODEL (name stg_compat, kind VIEW, grain (run_id, engine, spec_method, probe));
-- Grain: one row per run_id and cell of a `specdec compat` run (CompatCell): one
--   (engine, speculative method, feature probe).
-- Purpose: the cell record, typed. Nothing is derived here.
--   outcome        works | degrades | broken | refused | not tested | not offered (CompatCell.outcome)
--   *_valid        NULL = not assessed (refused, no output constraint, not exercised);
--                  a reply cut at max_tokens is invalid (false)
--   draft_tokens, accepted_tokens, drafts, plain_*
--                  speculation counter differences around the cell's own requests in the
--                  speculative arm; NULL = the server exports no such counter
--   target_quant, target_bits, draft_quant, draft_bits
--                  quantization cells only (feature 'quantization', llama.cpp); NULL elsewhere
--   speedup, speedup_ci_*, speedup_pairs, repeats, plain_speedup*, speedup_vs_plain*
--                  paired speedups (specdec.experiments.compat.timing); NULL where not timed
--   speed_label, speed_ci_*, speed_df
--                  the cell's speed decided by the verdict's rule (specdec.experiments.compat.speed):
--                  faster | slower | equivalent | 'not measured'; NULL = not judged
--   baseline_/speculative_prefix_cache_hit_rate  multi-turn cells: each arm's hit rate
--   baseline_/speculative_stall_ratio  streamed structured-output and tool cells (specdec/experiments/compat/stall.py)
--   turn, prefix_caching   multi-turn cells only (one per turn, caching 'on' or 'off')
--   sampling_*     sampling-distribution cells only (specdec/experiments/compat/sampling_cells.py)
--   lossless_*     lossless cells only: greedy pairs identical / near-ties / suspect
--                  (specdec/experiments/compat/lossless_cells.py)
--   *_capture_reconciles, capture_detail
--                  the capture's rows against the counters per arm; NULL = not captured
with source as (
    select * from raw_compat
),
final as (
    select
        run_id,
        engine,
        engine_version,
        spec_method,
        feature,
        probe,
        output_constraint,
        identity_expected,
        baseline_accepted,
        speculative_accepted,
        baseline_http_status,
        speculative_http_status,
        baseline_error,
        speculative_error,
        baseline_valid,
        speculative_valid,
        baseline_validity_detail,
        speculative_validity_detail,
        identical,
        first_divergence_char,
        baseline_output_sha256,
        speculative_output_sha256,
        baseline_output_head,
        speculative_output_head,
        baseline_completion_tokens,
        speculative_completion_tokens,
        baseline_e2e_ms,
        speculative_e2e_ms,
        draft_tokens,
        accepted_tokens,
        drafts,
        plain_draft_tokens,
        plain_accepted_tokens,
        plain_drafts,
        prefix_cache_hit_rate,
        baseline_prefix_cache_hit_rate,
        speculative_prefix_cache_hit_rate,
        baseline_stall_ratio,
        speculative_stall_ratio,
        sampling_level,
        sampling_pairs,
        sampling_p_value,
        sampling_mean_difference,
        sampling_min_detectable_shift,
        lossless_identical,
        lossless_near_ties,
        lossless_suspect,
        target_quant,
        target_bits,
        draft_quant,
        draft_bits,
        speedup,
        speedup_ci_low,
        speedup_ci_high,
        speedup_pairs,
        repeats,
        plain_speedup,
        plain_speedup_ci_low,
        plain_speedup_ci_high,
        speedup_vs_plain,
        speedup_vs_plain_ci_low,
        speedup_vs_plain_ci_high,
        speed_label,
        speed_ci_low,
        speed_ci_high,
        speed_df,
        turn,
        prefix_caching,
        baseline_capture_reconciles,
        speculative_capture_reconciles,
        capture_detail,
        outcome,
        detail,
        requests_sent
    from source
)
select * from final
