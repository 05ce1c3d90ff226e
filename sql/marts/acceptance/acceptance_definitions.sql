MODEL (name acceptance_definitions, kind TABLE, grain (run_id, arm, category));
-- Grain: one row per run_id, arm and category, plus category '(all)' per run_id and arm,
--   over the captured rounds of the run's replayed requests (int_rounds_attributed), all
--   levels and repeats.
-- Purpose: the same rounds under each definition the field uses, side by side, so a
--   number quoted from another tool can be compared like for like
--   (../shared/reference/metric-definitions.md; the sources named per column).
--   Notation per verify round: k = tokens_proposed > 0, a = tokens_accepted; a decode
--   step with k = 0 is not a verify round. The ratios use the acceptance macros of
--   sql/macros.sql (mean_acceptance_length, acceptance_rate, tokens_per_round), which
--   define the formulas once; the arguments below say what each definition pools.
--   verify_rounds, requests   rounds with k > 0; requests with at least one such round
--   decode_steps_no_draft     decode steps with k = 0 (counted in specbench only)
--   rounds_all_rejected       verify rounds with a = 0
--   vllm_mean_acceptance_length   mean_acceptance_length(sum(a), verify_rounds) = 1 + sum(a) /
--                             verify_rounds, pooled (vLLM; AIPerf's
--                             "token-weighted acceptance length" is the same formula)
--   vllm_draft_acceptance_rate    acceptance_rate(sum(a), sum(k)), pooled (vLLM; llama.cpp's acceptance
--                             rate, accepted / drafts actually tested, is the same here
--                             because k counts the drafts the target verified)
--   aiperf_acceptance_length_per_request  per request the mean of (a + 1) over its verify
--                             rounds (mean_acceptance_length(sum(a), verify_rounds) of the
--                             request), then the mean over requests (a macro average: every
--                             request weighs the same, however many rounds it had)
--   acceptance_rate_per_request   per request acceptance_rate(sum(a), sum(k)), then the mean
--                             over requests
--   aiperf_accepted_per_verified  sum(a + 1) / sum(k + 1) = acceptance_rate(sum(a) + verify_rounds,
--                             sum(k) + verify_rounds), pooled over verify rounds
--   specbench_mean_accepted_tokens  mean tokens emitted per decode step, every decode step
--                             of the arm's requests included (k = 0 steps emit 1): 1.00 for
--                             plain decoding (Spec-Bench's "mean accepted tokens")
--   sglang_accept_length      tokens_per_round(sum of the requests' output tokens,
--                             verify_rounds) (SGLang's
--                             tests; the numerator counts the token of the prefill step too)
--   macro_over_categories_length  '(all)' rows only: the mean over categories of
--                             vllm_mean_acceptance_length (AIPerf speed-bench's "overall"),
--                             beside the pooled figure of the same row
--   Every ratio is NULL when its denominator is 0 (e.g. the baseline arm: no verify round).
--   The rounds are read counted (int_round_counts): a group of n rounds with k proposed, a
--   accepted and e emitted in all counts n times, so every sum below is weighted by n.
with rounds as (
    select run_id, arm, category, request_key, phase, tokens_proposed as k, tokens_accepted as a,
           tokens_emitted as emitted, rounds as n, is_verify_round
    from int_round_counts
),
per_request as (
    select run_id, arm, category, request_key,
           coalesce(sum(n) filter (where is_verify_round), 0) as verify_rounds,
           coalesce(sum(a * n) filter (where is_verify_round), 0) as accepted,
           coalesce(sum(k * n) filter (where is_verify_round), 0) as proposed,
           coalesce(sum(n) filter (where phase = 'decode' and not is_verify_round), 0) as decode_no_draft,
           coalesce(sum(n) filter (where is_verify_round and a = 0), 0) as all_rejected,
           sum(emitted) filter (where phase = 'decode') as decode_emitted,
           sum(n) filter (where phase = 'decode') as decode_steps
    from rounds group by all
),
request_figures as (
    select *,
           mean_acceptance_length(accepted, verify_rounds) as mean_length,  -- mean of (a + 1) over its rounds
           acceptance_rate(accepted, proposed) as rate
    from per_request
),
outputs as (
    select run_id, arm, category, id_key(request_id) as request_key, output_tokens from stg_requests where success
),
grouped as (
    select r.run_id, r.arm, grouping(r.category) = 1 as is_all, coalesce(r.category, '(all)') as category,
        cast(sum(r.verify_rounds) as bigint) as verify_rounds,
        count(*) filter (where r.verify_rounds > 0) as requests,
        cast(sum(r.decode_no_draft) as bigint) as decode_steps_no_draft,
        cast(sum(r.all_rejected) as bigint) as rounds_all_rejected,
        mean_acceptance_length(sum(r.accepted), sum(r.verify_rounds)) as vllm_mean_acceptance_length,
        acceptance_rate(sum(r.accepted), sum(r.proposed)) as vllm_draft_acceptance_rate,
        acceptance_rate(sum(r.accepted) + sum(r.verify_rounds), sum(r.proposed) + sum(r.verify_rounds))
            as aiperf_accepted_per_verified,
        sum(r.decode_emitted) / sum(r.decode_steps) as specbench_mean_accepted_tokens,
        avg(r.mean_length) filter (where r.verify_rounds > 0) as aiperf_acceptance_length_per_request,
        avg(r.rate) filter (where r.verify_rounds > 0) as acceptance_rate_per_request
    from request_figures r
    group by grouping sets ((r.run_id, r.arm, r.category), (r.run_id, r.arm))
),
sglang as (
    select p.run_id, p.arm, coalesce(p.category, '(all)') as category,
           tokens_per_round(sum(o.output_tokens) filter (where p.verify_rounds > 0), sum(p.verify_rounds))
               as sglang_accept_length
    from per_request p join outputs o using (run_id, arm, category, request_key)
    group by grouping sets ((p.run_id, p.arm, p.category), (p.run_id, p.arm))
),
macro as (
    select run_id, arm, avg(vllm_mean_acceptance_length) as macro_over_categories_length
    from grouped where not is_all group by run_id, arm
),
final as (
    select g.run_id, g.arm, g.category, g.verify_rounds, g.requests, g.decode_steps_no_draft, g.rounds_all_rejected,
           g.vllm_mean_acceptance_length, g.vllm_draft_acceptance_rate,
           g.aiperf_acceptance_length_per_request, g.acceptance_rate_per_request,
           g.aiperf_accepted_per_verified, g.specbench_mean_accepted_tokens, s.sglang_accept_length,
           case when g.is_all then c.macro_over_categories_length end as macro_over_categories_length
    from grouped g
    left join sglang s on s.run_id = g.run_id and s.arm = g.arm and s.category = g.category
    left join macro c on c.run_id = g.run_id and c.arm = g.arm
)
select * from final order by run_id, arm, category = '(all)', category
