MODEL (name sampling, kind TABLE, grain (run_id, category, level, statistic));
-- Grain: one row per run_id, category, level and statistic (natural_length,
--   rescored_logprob, sequence_logprob) with sampling-mode checks (stg_sample_checks) in
--   either arm.
-- Purpose: at temperature > 0, does speculation leave the output distribution
--   unchanged? Every statistic of the samples must have the same distribution in both
--   arms if it does. Computed in Python by specdec.analytics.sampling_check (numpy only)
--   into the table sampling_tests; this view reads it. Method: a permutation test
--   stratified by prompt, T = the mean over prompts of the within-prompt difference of
--   means (speculative - baseline), arm labels permuted within prompts, 9999 random
--   relabellings with seed 0 (all of them, exact, when there are fewer), two-sided p;
--   family alpha 0.05 over the two statistics that carry the verdict (rescored_logprob,
--   or sequence_logprob where nothing was re-scored, and natural_length),
--   Bonferroni-corrected: each is tested at 0.025.
--   category, level        the group tested (baseline vs speculative, same level)
--   statistic        rescored_logprob: sum of the generated tokens' logprobs as one server
--                    (the reference arm's) scores both arms' samples by teacher forcing
--                    [nats]; sequence_logprob: the sum each arm's own server reported [nats],
--                    a diagnostic beside rescored_logprob (two instruments: no verdict)
--                    unless no sample was re-scored; natural_length: natural_end_position
--                    [tokens], or max_tokens when the model did not end within max_tokens
--                    (censored at max_tokens, the same in both arms)
--   n_baseline, n_speculative   samples used per arm: successful, and whose prompt and
--                    sample index also succeeded in the other arm (rescored_logprob: and
--                    were re-scored in both arms)
--   failed_baseline, failed_speculative   samples of the arm with success = false
--                    (typed in stg_sample_checks.error_type); left out
--   censored_baseline, censored_speculative   natural_length only: samples with no
--                    end-of-sequence within max_tokens; NULL for the logprob statistics
--   mean_baseline, mean_speculative   mean of the statistic over the samples used
--                    (natural_length: of the censored values, so a lower bound)
--   ks_statistic     descriptive: D, the largest distance between the arms' empirical CDFs
--                    of their pooled samples, prompts mixed (0..1); not the test
--   p_value          the permutation test's two-sided p-value: the share of relabellings
--                    with |T*| >= |T| (exact), or (1 + that count) / (1 + 9999) (sampled)
--   alpha            the level this row is tested at: 0.05 / 2 = 0.025 (Bonferroni)
--   min_detectable_d descriptive: the critical KS distance of the pooled samples at alpha,
--                    c(alpha) sqrt((n + m) / (n m)), c(alpha) = sqrt(-ln(alpha / 2) / 2)
--   min_detectable_shift   the shift of T (a per-prompt mean shift, statistic's units) the
--                    test detects with 80% power: (z_(1-alpha/2) + z_0.80) sqrt(sum_p s_p^2
--                    (1/n_p + 1/m_p)) / P, s_p^2 prompt p's pooled variance (normal approx.);
--                    NULL when a prompt has fewer than 3 values
--   verdict          'differs' when p_value < alpha, else 'same distribution (not rejected
--                    at 0.05)'; 'samples not distinct' over either when the samples are not
--                    distinct across seeds (below); NULL when excluded or a diagnostic
--   excluded_reason  why the row has no verdict: an arm without samples at this level, no
--                    sample succeeded in both arms, the end-of-sequence ids unknown
--                    (natural_length), not re-scored or re-scored by more than one server
--                    (rescored_logprob), too few samples (the smallest p-value the
--                    relabellings allow >= alpha), or a diagnostic (sequence_logprob beside
--                    rescored_logprob); NULL when the verdict stands
--   method           the method in one line (as above)
--   instrument       what measured the statistic: the arm whose server re-scored
--                    (rescored_logprob), each arm's own server (sequence_logprob), token
--                    ids (natural_length)
--   prompts          P, the prompts (strata) with samples in both arms
--   mean_difference  T = (1/P) sum_p (mean speculative - mean baseline) at prompt p, in the
--                    statistic's units
--   permutations     relabellings the p-value counts: all of them when permutation_exact,
--                    else 9999 random ones
--   permutation_exact   true when every relabelling was enumerated
--   distinct_share_baseline, distinct_share_speculative   per arm, the mean over prompts
--                    (with >= 2 samples) of distinct generated token sequences / samples
--                    (1: every seed its own sequence; 1/n: all the same); NULL when token
--                    ids were not recorded. The group is 'samples not distinct' when at
--                    some prompt one arm's samples are all one sequence while at least half
--                    of the other arm's are distinct (that arm ignores the seed), or when
--                    every prompt gave one sequence in both arms
--   not_distinct_prompts_baseline, not_distinct_prompts_speculative   prompts (with >= 2
--                    samples) whose samples are all one sequence; NULL when unknown
--   not_rescored_baseline, not_rescored_speculative   successful samples of the arm
--                    without a re-scored sum (stg_sample_checks.not_rescored_reason)
--   reported_minus_rescored_baseline, reported_minus_rescored_speculative   mean over the
--                    arm's samples of (sequence_logprob - rescored_logprob_sum) [nats]: near
--                    0 where the arm reports the target's logprobs of what it emitted;
--                    NULL when no sample has both
--   pass_draft_tokens  draft tokens the speculative arm proposed during its sampling pass at this
--                    level (int_passes_checked.draft_tokens: counter after - before); NULL when not read
--   pass_valid       the speculative arm speculated during its sampling pass (its draft counters
--                    moved: int_passes_checked.speculation_ran); false: they did not (the pass
--                    compared two servers that both decoded without speculation); NULL: not known
--                    (no counter reads: an older run or a server without /metrics). When false in
--                    a run whose treatment arm was configured to speculate (manifest arms), the
--                    row has no verdict and excluded_reason = 'speculation did not run during the
--                    sampling pass (draft counters unchanged)'; an A/A run (no speculation by
--                    design) keeps its verdict
with tests as (
    select * from sampling_tests
),
planned as (
    -- did the run configure its treatment arm to speculate? (a classic run's treatment is 'speculative')
    select m.run_id,
           bool_or(coalesce(json_type(arm -> 'speculative_config'), 'NULL') <> 'NULL') as speculates
    from stg_manifest m, unnest(from_json(m.manifest -> 'arms', '["JSON"]')) t(arm)
    where (arm ->> 'name') = coalesce(m.treatment_arm, 'speculative')
    group by m.run_id
),
checked as (
    select
        tests.* replace (
            case when passes.speculation_ran = false and planned.speculates then null else tests.verdict end
                as verdict,
            case when passes.speculation_ran = false and planned.speculates
                 then 'speculation did not run during the sampling pass (draft counters unchanged)'
                 else tests.excluded_reason end as excluded_reason
        ),
        passes.draft_tokens as pass_draft_tokens,
        passes.speculation_ran as pass_valid
    from tests
    left join int_passes_checked passes
      on passes.run_id = tests.run_id and passes.level = tests.level
     and passes.arm = 'speculative' and passes.pass_kind = 'sampling_pass'
    left join planned on planned.run_id = tests.run_id
),
final as (
    select
        run_id,
        category,
        level,
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
        method,
        instrument,
        prompts,
        mean_difference,
        permutations,
        permutation_exact,
        distinct_share_baseline,
        distinct_share_speculative,
        not_distinct_prompts_baseline,
        not_distinct_prompts_speculative,
        not_rescored_baseline,
        not_rescored_speculative,
        reported_minus_rescored_baseline,
        reported_minus_rescored_speculative,
        pass_draft_tokens,
        pass_valid
    from checked
)
select * from final order by run_id, category, level, statistic
