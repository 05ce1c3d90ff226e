MODEL (name int_blocks_paired, kind VIEW, grain (run_id, comparison, concurrency, repeat));
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
    select * from int_blocks_measured where output_tokens_per_s > 0
),
speculative_pairs as (
    select b.run_id, 'ab' as comparison, b.concurrency, s.repeat,
           b.output_tokens_per_s as reference_tokens_per_s, s.output_tokens_per_s as treatment_tokens_per_s
    from measured_blocks b
    join measured_blocks s on s.run_id = b.run_id and s.concurrency = b.concurrency and s.repeat = b.repeat
    where b.arm = 'baseline' and s.arm = 'speculative'
),
aa_pairs as (
    select b.run_id, 'aa' as comparison, b.concurrency, l.repeat,
           b.output_tokens_per_s as reference_tokens_per_s, l.output_tokens_per_s as treatment_tokens_per_s
    from measured_blocks b
    join measured_blocks l on l.run_id = b.run_id and l.concurrency = b.concurrency and l.repeat = b.repeat + 1
    where b.arm = 'baseline' and l.arm = 'baseline'
),
pairs as (
    select * from speculative_pairs
    union all
    select * from aa_pairs
),
final as (
    select
        *,
        treatment_tokens_per_s / reference_tokens_per_s as ratio,
        ln(treatment_tokens_per_s / reference_tokens_per_s) as log_ratio
    from pairs
)
select * from final
