MODEL (name int_blocks_paired, kind VIEW, grain (run_id, comparison, level, repeat));
-- Grain: one row per run_id and pair of blocks at the same level (see int_blocks_measured),
--   both with a throughput, in one of two comparisons:
--   comparison = 'ab'       reference = baseline block of repeat r, treatment = the
--                           speculative block of the same repeat (run right after it)
--   comparison = 'aa'       reference = baseline block of repeat r, treatment = the
--                           baseline block of repeat r + 1 (the A/A control)
-- Purpose: the rows the '(system)' speedup, its interval over repeats
--   (analytics/intervals.py) and its A/A noise floor are computed from.
--   repeat          the treatment's repeat (r + 1 for 'aa')
--   reference_tokens_per_s, treatment_tokens_per_s   the blocks' output_tokens_per_s
--   ratio           = treatment_tokens_per_s / reference_tokens_per_s  (> 1: treatment faster)
--   log_ratio       = ln(ratio); the '(system)' speedup is exp(avg(log_ratio)) over repeats
with measured_blocks as (
    select *, level as pair_key from int_blocks_measured where output_tokens_per_s > 0
),
final as (
    select
        reference.run_id, comparison, reference.level, treatment.repeat,
        reference.output_tokens_per_s as reference_tokens_per_s,
        treatment.output_tokens_per_s as treatment_tokens_per_s,
        treatment.output_tokens_per_s / reference.output_tokens_per_s as ratio,
        ln(treatment.output_tokens_per_s / reference.output_tokens_per_s) as log_ratio
    from paired_rows('measured_blocks')
)
select * from final
