MODEL (name int_requests_paired, kind TABLE, grain (run_id, comparison, reference_request_id, treatment_request_id));
-- Grain: one row per run_id and pair of successful requests for the same prompt at
--   the same level of that run, in one of two comparisons:
--   comparison = 'ab'       (A/B) reference = baseline, treatment = speculative, same
--                           repeat and pair_index (the A B of one repeat run back to back)
--   comparison = 'aa'       (A/A) reference = baseline repeat r, treatment = baseline repeat
--                           r + 1 (consecutive repeats of the same server, same pair_index):
--                           the A/A control, whose ratio is 1 up to measurement noise
-- Kind TABLE: computed once at build (several marts and the intervals read it).
-- Purpose: the paired rows every per-category speedup, its intervals
--   (analytics/intervals.py) and the A/A noise floor are computed from.
--   repeat              the treatment's repeat (r + 1 for 'aa')
--   reference_e2e_ms, treatment_e2e_ms   end-to-end times of the two requests [ms]
--   reference_output_tokens, treatment_output_tokens   their output lengths (equal
--                       under forced length, ignore_eos; then the e2e ratio is also
--                       the ratio of per-request tokens/s)
--   reference_request_id, treatment_request_id   the two requests (stg_requests.request_id)
--   ratio               = reference_e2e_ms / treatment_e2e_ms  (> 1: the treatment was faster)
--   log_ratio           = ln(ratio); a geometric mean is exp(avg(log_ratio))
--   Pairs with an e2e time <= 0 (nothing to divide) are left out.
with requests as (
    select
        *,
        {'category': category, 'level': level, 'prompt_id': prompt_id, 'pair_index': pair_index}
            as pair_key
    from int_requests_measured
    where e2e_ms > 0
),
final as (
    select
        reference.run_id, comparison, reference.category, reference.level, treatment.repeat,
        reference.prompt_id, reference.pair_index,
        reference.e2e_ms as reference_e2e_ms, treatment.e2e_ms as treatment_e2e_ms,
        reference.output_tokens as reference_output_tokens, treatment.output_tokens as treatment_output_tokens,
        reference.request_id as reference_request_id, treatment.request_id as treatment_request_id,
        reference.e2e_ms / treatment.e2e_ms as ratio,
        ln(reference.e2e_ms / treatment.e2e_ms) as log_ratio
    from paired_rows('requests')
)
select * from final
