MODEL (name int_baseline_greedy_pairs, kind VIEW, grain (run_id, prompt_id, pair_index, level, repeat, other_level, other_repeat));
-- Grain: one row per run_id and two successful baseline checks of the lossless pass
--   (stg_greedy_checks, arm = 'baseline') for the same prompt occurrence at two different
--   (level, repeat): every such pair, the lower (level, repeat) first. The pass runs
--   once per level (repeat 0), so today these are the level-to-level pairs; a run with several
--   passes per level adds the repeat-to-repeat ones.
-- Purpose: the A/A divergences with logprobs, from which int_lossless_settings calibrates the
--   near-tie margin: the baseline against itself, with no speculation, at another batch shape
--   (or another pass), shows how far from a tie a greedy choice can be and still flip on
--   numerics alone.
--   category, prompt_id         the prompt (category as the first check recorded it)
--   pair_index                  occurrence of the prompt within (level, repeat), from 0, by request_id
--   level, repeat               the first check's level and pass
--   other_level, other_repeat   the second check's
--   identical                   the two token id lists are equal
--   first_divergence_position   0-based position of the first differing token id, or the shorter
--                               length if one list is a prefix of the other; NULL when identical
--   flipped                     both checks have a token at first_divergence_position (a real
--                               flip, not a length difference); NULL when identical
--   token_id, other_token_id    the token ids there (NULL past an end)
--   margin, other_margin        each check's top1_logprob - top2_logprob there [nats]; NULL past
--                               an end or without a second logprob
--   runner_up_flip              each check's token there is the other's runner-up (top-2 token id):
--                               the two runs swapped their top two; NULL when not known
--   aa_margin                   greatest(margin, other_margin) [nats] for a flip, NULL otherwise:
--                               in A/A either run could be the reference, so a near-tie threshold
--                               must reach this margin for the flip to count as numerics with
--                               either one as the baseline. NULL when neither margin is known
with checks as (
    select * from int_greedy_checks_numbered
),
ok as (
    select * from checks where success and arm = 'baseline'
),
joined as (
    select
        a.run_id,
        a.category,
        a.prompt_id,
        a.pair_index,
        a.level,
        a.repeat,
        b.level as other_level,
        b.repeat as other_repeat,
        a.token_ids = b.token_ids as identical,
        list_position(
            list_transform(range(1, least(len(a.token_ids), len(b.token_ids)) + 1),
                           lambda i: a.token_ids[i] = b.token_ids[i]),
            false) as first_mismatch,  -- 1-based, NULL if none within the shorter length
        least(len(a.token_ids), len(b.token_ids)) as shorter,
        a.token_ids as a_ids, b.token_ids as b_ids,
        a.top1_logprobs as a_top1, a.top2_logprobs as a_top2, a.top2_token_ids as a_top2_ids,
        b.top1_logprobs as b_top1, b.top2_logprobs as b_top2, b.top2_token_ids as b_top2_ids
    from ok a
    join ok b
      on b.run_id = a.run_id and b.prompt_id = a.prompt_id and b.pair_index = a.pair_index
     and (a.level, a.repeat) < (b.level, b.repeat)
),
positioned as (
    select
        *,
        case when not identical then coalesce(first_mismatch - 1, shorter) end as first_divergence_position
    from joined
),
at_divergence as (
    select
        *,
        first_divergence_position + 1 as p,  -- 1-based list index
        a_top1[first_divergence_position + 1] - a_top2[first_divergence_position + 1] as margin_a,
        b_top1[first_divergence_position + 1] - b_top2[first_divergence_position + 1] as margin_b
    from positioned
),
final as (
    select
        run_id,
        category,
        prompt_id,
        pair_index,
        level,
        repeat,
        other_level,
        other_repeat,
        identical,
        first_divergence_position,
        case when not identical then first_divergence_position < shorter end as flipped,
        a_ids[p] as token_id,
        b_ids[p] as other_token_id,
        margin_a as margin,
        margin_b as other_margin,
        b_ids[p] = a_top2_ids[p] and a_ids[p] = b_top2_ids[p] as runner_up_flip,
        case when not identical and first_divergence_position < shorter then greatest(margin_a, margin_b) end
            as aa_margin
    from at_divergence
)
select * from final
