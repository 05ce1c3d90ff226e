-- compatibility
-- Grain: one row per run_id, engine, spec_method and probe of a `specdec compat` run:
--   one cell of the compatibility matrix (a feature probed in both arms of one engine pair).
-- Purpose: which features still work with speculation on, with each cell's evidence.
--   engine, engine_version, spec_method   the pair probed (engine 'external': the user's URLs,
--                         spec_method 'declared')
--   feature, probe        the feature family and the probe within it
--   outcome               works | degrades | broken | refused | not offered; the rules are
--                         specdec.replay.compat.classify's (CompatCell.outcome):
--                         not offered  the baseline refused it, or neither arm gave a valid output
--                                      (the field ignored, or not met within max_tokens)
--                         refused      the speculative server refused what the baseline accepted
--                         broken       an arm's output violates the constraint, or greedy outputs differ
--                         degrades     valid and identical, but no draft token with the feature
--                                      while the plain twin had some, or acceptance_ratio < 0.5
--                         works        otherwise
--   outcome_rank          1 works, 2 degrades, 3 broken, 4 refused, 5 not offered (the matrix's order)
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
--                         request: one request per arm, no interval, not a speedup estimate
--                         (the replay's speedup mart is); NULL when either arm refused
--   prefix_cache_hit_rate the multi-turn probe: prefix_cache_hits / prefix_cache_queries of the
--                         speculative arm over the session's turns; NULL elsewhere
--   n                     requests sent for the cell, both arms, plain twins included
--   Quantization cells (feature 'quantization', llama.cpp; NULL on every other row):
--   target_quant, target_bits   the target GGUF's type and bits as stored (Q4_1 4 as shipped,
--                         Q8_0 8, F16 16; the 8- and 16-bit files hold the Q4_1-rounded weights:
--                         specdec.engines.llama_cpp_quant); the manifest's model_source.quantization
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
        run_id,
        engine,
        engine_version,
        spec_method,
        feature,
        probe,
        outcome,
        case outcome
            when 'works' then 1 when 'degrades' then 2 when 'broken' then 3 when 'refused' then 4 else 5
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
        target_quant,
        target_bits,
        draft_quant,
        draft_bits,
        speedup,
        speedup_ci_low,
        speedup_ci_high,
        speedup_pairs,
        requests_sent as n
    from cells
)
select * from final order by run_id, engine, spec_method, outcome_rank, feature, target_bits, draft_bits, probe
