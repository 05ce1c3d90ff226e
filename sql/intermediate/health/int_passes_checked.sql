MODEL (name int_passes_checked, kind VIEW, grain (run_id, arm, level, pass_kind));
-- Grain: one row per run_id, arm, level and untimed pass (pass_kind) with a
--   counter read before or after it (stg_pass_counters).
-- Purpose: did the arm speculate while the pass ran? A speculative server that proposed no
--   draft during a pass answers like the baseline, so its pass tests nothing: the marts
--   that compare a pass's outputs mark such a pass invalid.
--   pass_kind          'lossless_pass' | 'sampling_pass' (as stg_pass_counters)
--   drafts             spec_num_drafts after - before: drafts proposed during the pass;
--                      NULL when either read is missing or the counter is not exported
--   draft_tokens       spec_num_draft_tokens after - before (draft tokens proposed); NULL likewise
--   accepted_tokens    spec_num_accepted_tokens after - before; NULL likewise
--   generation_tokens  generation_tokens after - before: tokens the server generated during the
--                      pass; NULL likewise
--   metrics_read       both reads found a /metrics page (generation_tokens exported in both)
--   speculation_ran    true: drafts > 0 or draft_tokens > 0 (the drafter proposed during the
--                      pass); false: both reads found a /metrics page and the draft counters did
--                      not move, or are not exported at all (a server that does not speculate);
--                      NULL: not known (a read missing: a run recorded before these reads
--                      existed, an interrupted pass; or a server without /metrics)
with reads as (
    select * from stg_pass_counters
),
paired as (
    select
        run_id, arm, level, pass_kind,
        count(*) filter (where position = 'before') = 1 and count(*) filter (where position = 'after') = 1
            as both_read,
        max(spec_num_drafts) filter (where position = 'after')
            - max(spec_num_drafts) filter (where position = 'before') as drafts,
        max(spec_num_draft_tokens) filter (where position = 'after')
            - max(spec_num_draft_tokens) filter (where position = 'before') as draft_tokens,
        max(spec_num_accepted_tokens) filter (where position = 'after')
            - max(spec_num_accepted_tokens) filter (where position = 'before') as accepted_tokens,
        max(generation_tokens) filter (where position = 'after')
            - max(generation_tokens) filter (where position = 'before') as generation_tokens
    from reads
    group by all
),
final as (
    select
        run_id,
        arm,
        level,
        pass_kind,
        case when both_read then drafts end as drafts,
        case when both_read then draft_tokens end as draft_tokens,
        case when both_read then accepted_tokens end as accepted_tokens,
        case when both_read then generation_tokens end as generation_tokens,
        both_read and generation_tokens is not null as metrics_read,
        case
            when not both_read then null
            when coalesce(drafts, 0) > 0 or coalesce(draft_tokens, 0) > 0 then true
            when generation_tokens is not null then false
        end as speculation_ran
    from paired
)
select * from final
