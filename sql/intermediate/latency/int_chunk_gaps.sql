MODEL (name int_chunk_gaps, kind VIEW, grain (run_id, request_id, gap_index));
-- Grain: one row per run_id and gap between consecutive streamed content chunks of a request.
-- Purpose: inter-chunk latency of the successful requests (those of int_requests_measured).
--   With speculation one chunk can carry several tokens, so a chunk gap is not a per-token
--   latency (see tpot_ms for that).
--   chunk_gap_ms = chunk_offsets_ms[i+1] - chunk_offsets_ms[i]   [ms]
--   gap_index     i: 1 for the gap after the request's first chunk, 2 after its second, ...
--   gap_group     the number of the row's (arm, category, level) within its run_id,
--                 1, 2, ... in that order: the latency mart pools the gaps by (run_id,
--                 gap_group), one short string and an integer per row instead of four
--                 columns (one pass: 2.3-2.9 CPU s against 3.3 at 51M gaps,
--                 benchmarks/analytics_scale.py's large-run shape)
with requests as (
    select run_id, request_id, arm, level, repeat, category, chunk_offsets_ms from stg_request_streams
    where success and len(chunk_offsets_ms) > 1
),
groups as (
    select cast(row_number() over (partition by run_id order by arm, category, level) as uinteger)
               as gap_group, *
    from (select distinct run_id, arm, category, level from requests)
),
final as (
    select
        groups.gap_group, run_id, request_id, arm, level, repeat, category,
        -- the two unnests of one select are read in step: element i of each (no lambda per element)
        unnest(list_slice(chunk_offsets_ms, 2, len(chunk_offsets_ms)))
            - unnest(list_slice(chunk_offsets_ms, 1, len(chunk_offsets_ms) - 1)) as chunk_gap_ms,
        unnest(range(1, len(chunk_offsets_ms))) as gap_index
    from requests
    join groups using (run_id, arm, category, level)
)
select * from final
