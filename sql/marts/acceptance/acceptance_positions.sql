MODEL (name acceptance_positions, kind TABLE, grain (run_id, arm, category, position));
-- Grain: one row per run_id, arm, category and draft position (1 .. the largest k
--   proposed), pooled over the run's levels and repeats, as the acceptance mart.
-- Purpose: where in a draft the target stops agreeing. From the accepted count per
--   verify round (a round is a captured row with tokens_proposed = k > 0; vLLM
--   accepts a prefix, so position i is accepted exactly when tokens_accepted >= i).
--   position            i, from 1 (the first draft token)
--   verify_rounds       rounds of the group (every row of the group has the same count)
--   rounds_reaching     rounds that proposed at least i tokens (k >= i)
--   accepted            rounds with tokens_accepted >= i
--   acceptance_at_position  accepted / verify_rounds: the share of all rounds whose
--                       draft was accepted up to position i. Invariant: summed over the
--                       positions it equals sum(tokens_accepted) / verify_rounds =
--                       acceptance.mean_acceptance_length - 1
--   conditional_acceptance  accepted / (rounds with k >= i that accepted position i - 1):
--                       the chance position i is accepted given that the draft got
--                       that far; NULL when no round got that far
--   first_rejections    rounds whose first rejected position is i (k >= i and
--                       tokens_accepted = i - 1)
--   first_rejection_share  first_rejections / verify_rounds; with all_accepted_share
--                       it sums to 1 over the positions
--   all_accepted_share  rounds that accepted all k of their drafts / verify_rounds
--                       (the same on every row of the group)
--   NULL shares are not applicable (no verify round).
with rounds as (
    select run_id, arm, category, tokens_proposed as k, tokens_accepted as a, cast(sum(rounds) as bigint) as n
    from int_round_counts
    where is_verify_round
    group by all
),
groups as (
    select run_id, arm, category, sum(n) as verify_rounds,
           sum(n) filter (where a = k) as all_accepted, max(k) as max_k
    from rounds group by all
),
positions as (
    select g.run_id, g.arm, g.category, p.position
    from groups g, unnest(range(1, cast(g.max_k as bigint) + 1)) as p(position)
),
counted as (
    select
        p.run_id, p.arm, p.category, p.position,
        coalesce(sum(r.n) filter (where r.k >= p.position), 0) as rounds_reaching,
        coalesce(sum(r.n) filter (where r.a >= p.position), 0) as accepted,
        coalesce(sum(r.n) filter (where r.k >= p.position and r.a >= p.position - 1), 0) as reached_and_prior_accepted,
        coalesce(sum(r.n) filter (where r.k >= p.position and r.a = p.position - 1), 0) as first_rejections
    from positions p
    join rounds r on r.run_id = p.run_id and r.arm = p.arm and r.category = p.category
    group by all
),
final as (
    select
        c.run_id, c.arm, c.category, c.position, g.verify_rounds, c.rounds_reaching, c.accepted,
        c.accepted / g.verify_rounds as acceptance_at_position,
        c.accepted / nullif(c.reached_and_prior_accepted, 0) as conditional_acceptance,
        c.first_rejections,
        c.first_rejections / g.verify_rounds as first_rejection_share,
        coalesce(g.all_accepted, 0) / g.verify_rounds as all_accepted_share
    from counted c
    join groups g on g.run_id = c.run_id and g.arm = c.arm and g.category = c.category
)
select * from final order by run_id, arm, category, position
