-- sampling
-- Grain: one row per run_id, category, concurrency level and statistic (sequence_logprob,
--   natural_length) with sampling-mode checks (stg_sample_checks) in either arm.
-- Purpose: at temperature > 0, does speculation leave the output distribution
--   unchanged? Both statistics must have the same distribution in both arms if it
--   does. Computed in Python by specdec.analytics.sampling_test (numpy only) into
--   the table sampling_tests; this view reads it. Method: the two-sample
--   Kolmogorov-Smirnov test with its asymptotic p-value, family alpha 0.05 over the
--   two statistics, Bonferroni-corrected: each statistic is tested at 0.025.
--   category, concurrency  the group tested (baseline vs speculative, same level)
--   statistic        sequence_logprob: sum of the emitted tokens' logprobs under the
--                    target [nats]; natural_length: natural_end_position [tokens], or
--                    max_tokens when the model did not end within max_tokens
--                    (censored at max_tokens, the same in both arms)
--   n_baseline, n_speculative   samples used per arm: successful, and whose prompt and
--                    sample index also succeeded in the other arm
--   failed_baseline, failed_speculative   samples of the arm with success = false
--                    (typed in stg_sample_checks.error_type); left out
--   censored_baseline, censored_speculative   natural_length only: samples with no
--                    end-of-sequence within max_tokens; NULL for sequence_logprob
--   mean_baseline, mean_speculative   mean of the statistic over the samples used
--                    (natural_length: of the censored values, so a lower bound)
--   ks_statistic     D, the largest distance between the arms' empirical CDFs (0..1)
--   p_value          asymptotic two-sided p-value, Q(sqrt(n m / (n + m)) D), Q the
--                    Kolmogorov distribution's survival function (conservative with ties)
--   alpha            the level this row is tested at: 0.05 / 2 = 0.025 (Bonferroni)
--   min_detectable_d the smallest D rejected at alpha: c(alpha) sqrt((n + m) / (n m)),
--                    c(alpha) = sqrt(-ln(alpha / 2) / 2); the smallest effect these
--                    sample sizes can detect, in CDF distance
--   min_detectable_shift   the same in the statistic's units: the shift of the mean a
--                    test at alpha detects with 80% power, (z_(1-alpha/2) + z_0.80)
--                    * pooled sd * sqrt(1/n + 1/m) (normal approximation)
--   verdict          'differs' when p_value < alpha, else 'same distribution (not
--                    rejected at 0.05)'; NULL when excluded
--   excluded_reason  why the test was not made or has no verdict: an arm without
--                    samples at this level, no sample succeeded in both arms, the
--                    end-of-sequence ids unknown (natural_length), or too few samples
--                    (min_detectable_d >= 1: no difference could be rejected); NULL
--                    when the verdict stands
--   method           the method in one line (as above)
with tests as (
    select * from sampling_tests
),
final as (
    select
        run_id,
        category,
        concurrency,
        statistic,
        n_baseline,
        n_speculative,
        failed_baseline,
        failed_speculative,
        censored_baseline,
        censored_speculative,
        mean_baseline,
        mean_speculative,
        ks_statistic,
        p_value,
        alpha,
        min_detectable_d,
        min_detectable_shift,
        verdict,
        excluded_reason,
        method
    from tests
)
select * from final order by run_id, category, concurrency, statistic
