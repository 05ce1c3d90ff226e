MODEL (name int_greedy_pairs, kind VIEW, grain (run_id, level, prompt_id, pair_index));
-- Grain: one row per run_id, prompt occurrence and level with a successful
--   lossless-pass request in both arms: the speculative arm's greedy output
--   against the baseline's, same prompt, same level (same batch shape), repeat 0
--   of the lossless pass in each arm (stg_greedy_checks, numbered by int_greedy_checks_numbered).
-- Purpose: the lossless check, classified. A speculative output that differs
--   from the baseline's is either a near-tie that numerics can flip (the speculative
--   arm took the baseline's runner-up where the baseline's top two were close), or suspect.
--   category, level, prompt_id   the pair's prompt (category as the baseline recorded it) and level
--   pair_index                  occurrence of the prompt within (arm, level), from 0, by request_id
--                               (a prompt sent twice per level pairs 1:1 across arms)
--   baseline_request_id, speculative_request_id   the two lossless-pass requests
--   baseline_tokens, speculative_tokens           generated tokens of each
--   identical                   the two token id lists are equal
--   first_divergence_position   0-based position of the first differing token id, or the
--                               shorter length if one list is a prefix of the other;
--                               NULL when identical
--   baseline_token_id, speculative_token_id       the token ids at that position (NULL past an end)
--   speculative_took_runner_up  the speculative token is the baseline's second choice there
--                               (baseline top-2 token id); NULL when not known (past an end, or no
--                               top-2 token id recorded)
--   baseline_margin             baseline top1_logprob - top2_logprob at that position [nats]:
--                               how far the baseline's greedy choice was from a tie. NULL when
--                               the baseline has no token there or returned no second logprob
--   near_tie_threshold          int_lossless_settings.near_tie_threshold [nats]: calibrated from
--                               the run's own A/A flips (the largest baseline-vs-baseline margin),
--                               else the dtype's reasoned value; see there
--   class                       'identical'
--                               | 'near_tie': both hold at the first divergence:
--                                 (1) speculative_took_runner_up: the speculative token is the
--                                     baseline's runner-up (numerics swap the top two; a token the
--                                     baseline did not even rank second is no near-tie), and
--                                 (2) baseline_margin <= near_tie_threshold (1e-6 relative allowed
--                                     for the float32 rounding of the logprobs: the first demo run
--                                     had a flip at margin 0.2500001 against one bfloat16 step of 0.25)
--                               | 'suspect': either fails, or is not known (no margin, no top-2 id,
--                                 or one output is a prefix of the other): nothing explains it
--   baseline_natural_end_position  stg_greedy_checks.natural_end_position of the baseline: the first
--                               position whose greedy token was end-of-sequence (NULL if never, or
--                               ids unknown)
--   after_natural_end           first_divergence_position > baseline_natural_end_position: the texts
--                               differ only past where the baseline would have stopped (a divergence AT
--                               the end position is not after it: one output stops, the other does not).
--                               false when the baseline never ended; NULL when identical or when the
--                               end-of-sequence ids are unknown (external server)
with checks as (
    select * from int_greedy_checks_numbered
),
ok as (
    select * from checks where success and repeat = 0
),
threshold as (
    select run_id, near_tie_threshold from int_lossless_settings
),
joined as (
    select
        b.run_id,
        b.category,
        b.level,
        b.prompt_id,
        b.pair_index,
        b.request_id as baseline_request_id,
        s.request_id as speculative_request_id,
        len(b.token_ids) as baseline_tokens,
        len(s.token_ids) as speculative_tokens,
        b.token_ids = s.token_ids as identical,
        list_position(
            list_transform(range(1, least(len(b.token_ids), len(s.token_ids)) + 1),
                           lambda i: b.token_ids[i] = s.token_ids[i]),
            false) as first_mismatch,  -- 1-based, NULL if none within the shorter length
        b.token_ids as b_ids, s.token_ids as s_ids, b.top1_logprobs as b_top1, b.top2_logprobs as b_top2,
        b.top2_token_ids as b_top2_ids,
        b.natural_end_position as baseline_natural_end_position,
        b.eos_token_ids is not null as eos_known
    from ok b
    join ok s
      on s.run_id = b.run_id and s.prompt_id = b.prompt_id and s.level = b.level
     and s.pair_index = b.pair_index
    where b.arm = 'baseline' and s.arm = 'speculative'
),
positioned as (
    select
        *,
        case when not identical then coalesce(first_mismatch - 1, least(baseline_tokens, speculative_tokens)) end
            as first_divergence_position
    from joined
),
final as (
    select
        positioned.run_id,
        category,
        level,
        prompt_id,
        pair_index,
        baseline_request_id,
        speculative_request_id,
        baseline_tokens,
        speculative_tokens,
        identical,
        first_divergence_position,
        b_ids[first_divergence_position + 1] as baseline_token_id,
        s_ids[first_divergence_position + 1] as speculative_token_id,
        s_ids[first_divergence_position + 1] = b_top2_ids[first_divergence_position + 1]
            as speculative_took_runner_up,
        b_top1[first_divergence_position + 1] - b_top2[first_divergence_position + 1] as baseline_margin,
        threshold.near_tie_threshold,
        case
            when identical then 'identical'
            when s_ids[first_divergence_position + 1] = b_top2_ids[first_divergence_position + 1]
             and b_top1[first_divergence_position + 1] - b_top2[first_divergence_position + 1]
                 <= threshold.near_tie_threshold * (1 + 1e-6) then 'near_tie'
            else 'suspect'
        end as class,
        baseline_natural_end_position,
        case
            when identical or not eos_known then null
            when baseline_natural_end_position is null then false
            else first_divergence_position > baseline_natural_end_position
        end as after_natural_end
    from positioned
    left join threshold on threshold.run_id = positioned.run_id
)
select * from final
