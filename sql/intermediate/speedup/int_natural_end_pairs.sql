MODEL (name int_natural_end_pairs, kind TABLE, grain (run_id, comparison, level, repeat, prompt_id, pair_index, segment));
-- Grain: one row per run_id, greedy A/B pair and segment. A pair is a row of int_requests_paired
--   with comparison 'ab' (baseline and speculative request for the same prompt, level,
--   repeat and pair_index, both successful, e2e > 0) whose two requests ran at
--   temperature 0. A pair split at the natural end gives two rows ('before_natural_end',
--   'after_natural_end'); a pair whose prompt never ended gives one 'before_natural_end'
--   row; a pair that cannot be split gives one 'unknown' row saying why.
-- Kind TABLE: computed once at build (several marts and the intervals read it).
-- Purpose: with ignore_eos and a fixed length the model often runs past where it would
--   have stopped, into repetitive text that drafts predict well; these are the paired
--   per-segment times speedup_natural_end is computed from (and the rows to resample
--   for its intervals: run_id, comparison, category, level, segment, prompt_id, repeat,
--   log_ratio).
--   natural_end_position  P, from int_natural_ends (the baseline's lossless-pass request for
--                   the prompt at this level, repeat 0): the first output position (0-based)
--                   whose greedy token was end-of-sequence, so the model would have emitted
--                   P tokens [positions 0 .. P-1] and stopped
--   reference_end_ms, treatment_end_ms   time to the natural end of the baseline / speculative
--                   request [ms after send, monotonic]: the arrival offset
--                   (stg_request_streams.chunk_offsets_ms) of the first content chunk whose running
--                   token count (stg_request_streams.chunk_tokens) is >= P, i.e. the chunk that
--                   carries position P - 1. Exact to one chunk: a chunk can carry several
--                   tokens (a verify round's accepted drafts and bonus token, or engine steps
--                   merged while the stream lagged), so tokens after P - 1 that arrive in that
--                   chunk count as before the end. NULL when P is NULL, when no content chunk
--                   reaches P, and on 'unknown' rows
--   segment         'before_natural_end'  reference_ms / treatment_ms = the *_end_ms times
--                                         (send to the natural end: TTFT included); when the
--                                         prompt never ended within max_tokens (P NULL, known
--                                         end-of-sequence ids) the whole request, = e2e_ms
--                   'after_natural_end'   = e2e_ms - *_end_ms (the forced tail, to the end of
--                                         the stream)
--                   'unknown'             the pair is not split; times and ratio NULL
--   unknown_reason  why a pair is 'unknown', in this order (NULL for the other segments):
--                   'no_natural_end'            no successful baseline lossless-pass request for
--                                               the prompt at this level, or end-of-sequence
--                                               ids unknown (external server)
--                   'natural_end_at_start'      P = 0: nothing before the end, so prefill and
--                                               the first token would fall on either side
--                   'natural_end_past_output'   P >= the output tokens of either request: it
--                                               emitted no token after the end (shorter than
--                                               the lossless-pass request; not expected under
--                                               forced length)
--                   'no_chunk_tokens'           either request has no per-chunk token counts
--                                               (the server ignored continuous_usage_stats), or
--                                               they do not align with its chunk offsets
--                   'natural_end_not_in_chunks' no content chunk of either request reaches P
--                                               (the tokens up to P - 1 streamed no text)
--                   'empty_segment'             a segment time <= 0 in either request
--                                               (nothing to divide)
--   never_ended     true: the prompt never ended (the whole request is 'before'); false: the
--                   pair is split at P; NULL for 'unknown'
--   reference_ms, treatment_ms   the segment's time in the baseline / speculative request [ms]
--   ratio           = reference_ms / treatment_ms (> 1: speculation was faster in the segment)
--   log_ratio       = ln(ratio); a geometric mean is exp(avg(log_ratio))
with pairs as (
    select * from int_requests_paired where comparison = 'ab'
),
requests as (
    select run_id, request_id from stg_requests where temperature = 0
),
chunk_lists as (
    select run_id, request_id, chunk_offsets_ms, chunk_tokens from stg_request_streams where temperature = 0
),
ends as (
    select * from int_natural_ends
),
joined as (
    select
        pairs.run_id,
        pairs.comparison,
        pairs.category,
        pairs.level,
        pairs.repeat,
        pairs.prompt_id,
        pairs.pair_index,
        pairs.reference_request_id,
        pairs.treatment_request_id,
        ends.eos_known,
        ends.natural_end_position,
        pairs.reference_e2e_ms,
        pairs.treatment_e2e_ms,
        pairs.reference_output_tokens,
        pairs.treatment_output_tokens
    from pairs
    join requests b on b.run_id = pairs.run_id and b.request_id = pairs.reference_request_id
    join requests s on s.run_id = pairs.run_id and s.request_id = pairs.treatment_request_id
    left join ends
      on ends.run_id = pairs.run_id and ends.level = pairs.level and ends.prompt_id = pairs.prompt_id
),
-- The chunk lists are read only for the requests of pairs that reach the chunk lookup in
-- `classified` (a known natural end inside both outputs), each once per end position.
wanted as (
    select run_id, unnest([reference_request_id, treatment_request_id]) as request_id, natural_end_position
    from joined
    where eos_known and natural_end_position > 0
      and natural_end_position < reference_output_tokens and natural_end_position < treatment_output_tokens
),
chunk_ends as (
    select
        wanted.run_id,
        wanted.request_id,
        wanted.natural_end_position,
        len(c.chunk_tokens) = len(c.chunk_offsets_ms) as chunks_known,
        case when len(c.chunk_tokens) = len(c.chunk_offsets_ms) then c.chunk_offsets_ms[list_position(
            list_transform(c.chunk_tokens, lambda n: n >= wanted.natural_end_position), true)] end as end_ms
    from (select distinct * from wanted) as wanted
    join chunk_lists c on c.run_id = wanted.run_id and c.request_id = wanted.request_id
),
timed as (
    select
        joined.*,
        b.chunks_known and s.chunks_known as chunks_known,
        b.end_ms as reference_end_ms,
        s.end_ms as treatment_end_ms
    from joined
    left join chunk_ends b
      on b.run_id = joined.run_id and b.request_id = joined.reference_request_id
     and b.natural_end_position = joined.natural_end_position
    left join chunk_ends s
      on s.run_id = joined.run_id and s.request_id = joined.treatment_request_id
     and s.natural_end_position = joined.natural_end_position
),
classified as (
    select
        *,
        case
            when eos_known is not true then 'no_natural_end'
            when natural_end_position is null then null
            when natural_end_position = 0 then 'natural_end_at_start'
            when natural_end_position >= reference_output_tokens
              or natural_end_position >= treatment_output_tokens then 'natural_end_past_output'
            when chunks_known is not true then 'no_chunk_tokens'
            when reference_end_ms is null or treatment_end_ms is null then 'natural_end_not_in_chunks'
            when reference_end_ms <= 0 or treatment_end_ms <= 0
              or reference_e2e_ms <= reference_end_ms or treatment_e2e_ms <= treatment_end_ms
                then 'empty_segment'
        end as unknown_reason
    from timed
),
segments as (
    select classified.*, seg.segment
    from classified
    join (values ('before_natural_end'), ('after_natural_end'), ('unknown')) as seg(segment)
      on case
             when classified.unknown_reason is not null then seg.segment = 'unknown'
             when classified.natural_end_position is null then seg.segment = 'before_natural_end'
             else seg.segment <> 'unknown'
         end
),
measured as (
    select
        *,
        case
            when segment = 'unknown' then null
            when natural_end_position is null then reference_e2e_ms
            when segment = 'before_natural_end' then reference_end_ms
            else reference_e2e_ms - reference_end_ms
        end as reference_ms,
        case
            when segment = 'unknown' then null
            when natural_end_position is null then treatment_e2e_ms
            when segment = 'before_natural_end' then treatment_end_ms
            else treatment_e2e_ms - treatment_end_ms
        end as treatment_ms
    from segments
),
final as (
    select
        run_id,
        comparison,
        category,
        level,
        segment,
        prompt_id,
        repeat,
        pair_index,
        natural_end_position,
        unknown_reason,
        case when segment <> 'unknown' then natural_end_position is null end as never_ended,
        case when segment <> 'unknown' then reference_end_ms end as reference_end_ms,
        case when segment <> 'unknown' then treatment_end_ms end as treatment_end_ms,
        reference_ms,
        treatment_ms,
        reference_ms / treatment_ms as ratio,
        ln(reference_ms / treatment_ms) as log_ratio
    from measured
)
select * from final
