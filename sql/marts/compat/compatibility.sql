MODEL (name compatibility, kind TABLE, grain (run_id, engine, spec_method, probe));
-- Grain: one row per run_id, engine, spec_method and probe of a `specdec compat` run:
--   one cell of the compatibility matrix (a feature probed in both arms of one engine pair).
-- Purpose: which features still work with speculation on, with each cell's evidence.
--   engine, engine_version, spec_method   the pair probed (engine 'external': the user's URLs,
--                         spec_method 'declared')
--   feature, probe        the feature family and the probe within it
--   outcome               works | degrades | broken | refused | not tested | not offered; the rules are
--                         specdec.experiments.compat.classify's (CompatCell.outcome):
--                         not offered  the baseline refused it, or neither arm gave a valid output
--                                      (the field ignored, or not met within max_tokens)
--                         refused      the speculative server refused what the baseline accepted
--                         broken       an arm's output violates the constraint, or greedy outputs differ
--                         degrades     valid and identical, but no draft token with the feature
--                                      while the plain twin had some, acceptance_ratio < 0.5, or
--                                      speedup_vs_plain_ci_high < 1 / 1.10 (the gain falls by 10% or more)
--                         not tested   valid and identical, but nothing shows that speculation ran:
--                                      no draft token with the feature nor on the plain twin (the
--                                      probe could not make the engine draft), or no counters read
--                         broken also: the capture reconciles with the counters in one arm only
--                         works        otherwise: valid, identical, and the speculative arm drafted
--                                      in the cell (draft_tokens > 0); never a cell with no draft
--   outcome_rank          1 works, 2 degrades, 3 broken, 4 refused, 5 not tested, 6 not offered
--                         (the matrix's order, OUTCOMES)
--   detail                why, one sentence (a refusal's error escaped on one line)
--   baseline_accepted, speculative_accepted, baseline_valid, speculative_valid, identical
--                         the flags of the evidence (NULL valid: not assessed; NULL identical:
--                         refused, or a sampled probe)
--   speculative_error     the speculative server's error body, verbatim; NULL when accepted
--   acceptance_rate       acceptance_rate(accepted_tokens, draft_tokens) with the feature
--                         [fraction 0..1; macros.sql]; NULL when nothing was drafted or the
--                         server exports no counter
--   plain_acceptance_rate the same on the plain twin (same messages, no feature)
--   acceptance_ratio      acceptance_rate / plain_acceptance_rate; NULL when either is NULL
--                         or the plain rate is 0
--   mean_acceptance_length, plain_mean_acceptance_length
--                         mean_acceptance_length(accepted_tokens, drafts) [tokens per verify
--                         round; macros.sql], with the feature and on the plain twin
--   draft_tokens          draft tokens proposed around the feature request(s) (counter difference)
--   e2e_ratio_one_request baseline_e2e_ms / speculative_e2e_ms of the cell's first feature
--                         request alone; NULL when either arm refused (the speedup below is the estimate)
--   speedup, speedup_ci_low, speedup_ci_high, speedup_pairs
--                         feature probes: geometric mean over the cell's request pairs (each request
--                         body sent once per arm per repeat, the arms' order alternated) of baseline
--                         e2e_ms / speculative e2e_ms, with the 95% Student t interval of the mean log
--                         ratio (pairs - 1 df), mapped back with exp; one pair of server processes:
--                         request-to-request noise only, pointwise (not adjusted across cells); the
--                         report labels it by analytics/labels.py's rule (margin 0.05)
--   repeats               times each of the cell's requests was sent per arm
--   plain_speedup, plain_speedup_ci_low, plain_speedup_ci_high
--                         the same on the plain twin (one pair per repeat)
--   speedup_vs_plain, speedup_vs_plain_ci_low, speedup_vs_plain_ci_high
--                         speedup with the feature / on the plain twin: exp of the mean over repeats
--                         of (mean log ratio of the repeat's feature pairs - its twin pair's), 95% t
--                         interval over the repeats; NULL without a twin
--   turn, prefix_caching  multi-turn cells: one row per turn of the 3-turn session, with prefix
--                         caching 'on' (one cache_salt per session) or 'off' (a cache_salt per turn,
--                         cache_prompt false); NULL elsewhere
--   prefix_cache_hit_rate multi-turn cells: prefix_cache_hits / prefix_cache_queries of the
--                         speculative arm around the turn's requests (all repeats); NULL elsewhere
--                         or when the engine does not export them
--   baseline_prefix_cache_hit_rate, speculative_prefix_cache_hit_rate
--                         each arm's hit rate around the turn's requests, side by side
--   baseline_stall_ratio, speculative_stall_ratio
--                         streamed structured-output and tool cells: the largest tail gap over the
--                         median gap of a reply, per arm (specdec/experiments/compat/stall.py); NULL elsewhere
--   sampling_level, sampling_pairs, sampling_p_value, sampling_mean_difference,
--   sampling_min_detectable_shift
--                         sampling-distribution cells (probe sampling_distribution.c<level>): the
--                         level sampled at, the pairs of re-scored samples, the permutation test's
--                         p, the mean re-scored log-probability difference and the shift it finds
--                         with 80% power (specdec/experiments/compat/sampling_cells.py); NULL elsewhere
--   lossless_identical, lossless_near_ties, lossless_suspect
--                         lossless cells (probe lossless_greedy.c<level>): greedy pairs (token ids and
--                         top-2 logprobs, each engine's protocol) identical, near-ties (the baseline's
--                         runner-up within the dtype's margin) and suspect (specdec/experiments/compat/lossless_cells.py)
--   speed_label, speed_ci_low, speed_ci_high, speed_df
--                         the cell's speed by the verdict's rule over the pair's pooled noise:
--                         faster | slower | equivalent (with the family-wise interval) | 'not measured'
--   baseline_capture_reconciles, speculative_capture_reconciles
--                         the capture's rows of the cell's own requests against the counters around
--                         them (speculative: verify rounds, drafted, accepted; baseline: nothing
--                         drafted, tokens emitted = generation tokens); NULL = not captured (no
--                         capture plugin: llama.cpp, a user's pair) or no counter to compare
--   capture_detail        the figures compared, per arm; NULL when not captured
--   n                     requests sent for the cell, both arms, plain twins included
--   Quantization cells (feature 'quantization', llama.cpp; NULL on every other row):
--   target_quant, target_bits   the target GGUF's type and bits as stored (Q4_1 4 as shipped,
--                         Q8_0 8, F16 16; the 8- and 16-bit files hold the Q4_1-rounded weights:
--                         specdec.engines.llama_cpp.quant); the manifest's model_source.quantization
--                         has each file's sha256
--   draft_quant, draft_bits     the draft GGUF's (spec_method draft-simple); NULL for ngram-mod
--   plain_acceptance_rate, acceptance_ratio, plain_mean_acceptance_length
--                         on a quantization cell: the same method's cell on the shipped Q4_1
--                         target (the reference), same prompts, instead of a plain twin
--   speedup               geometric mean over the cell's request pairs of baseline e2e_ms /
--                         speculative e2e_ms, baseline = the same target without speculation
--                         (same prompt, greedy, forced length; arms alternated pair by pair)
--   speedup_ci_low, speedup_ci_high  95% Student t interval of the mean log ratio over the pairs
--                         (pairs - 1 df), mapped back with exp: request-to-request noise within one
--                         pair of server processes, pointwise (not adjusted across cells)
--   speedup_pairs         pairs the speedup is computed from
with cells as (
    select * from stg_compat
),
final as (
    select
        run_id, engine, engine_version, spec_method, feature, probe,
        outcome,
        case outcome
            when 'works' then 1 when 'degrades' then 2 when 'broken' then 3 when 'refused' then 4
            when 'not tested' then 5 else 6
        end as outcome_rank,
        detail,
        baseline_accepted,
        speculative_accepted,
        baseline_valid,
        speculative_valid,
        identical,
        speculative_error,
        acceptance_rate(accepted_tokens, draft_tokens) as acceptance_rate,
        acceptance_rate(plain_accepted_tokens, plain_draft_tokens) as plain_acceptance_rate,
        acceptance_rate(accepted_tokens, draft_tokens)
            / nullif(acceptance_rate(plain_accepted_tokens, plain_draft_tokens), 0) as acceptance_ratio,
        mean_acceptance_length(accepted_tokens, drafts) as mean_acceptance_length,
        mean_acceptance_length(plain_accepted_tokens, plain_drafts) as plain_mean_acceptance_length,
        draft_tokens,
        baseline_e2e_ms / nullif(speculative_e2e_ms, 0) as e2e_ratio_one_request,
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
        turn,
        prefix_caching,
        baseline_capture_reconciles,
        speculative_capture_reconciles,
        capture_detail,
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
        requests_sent as n
    from cells
)
select * from final order by run_id, engine, spec_method, outcome_rank, feature, target_bits, draft_bits, prefix_caching, turn, probe
