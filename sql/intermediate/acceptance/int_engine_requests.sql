MODEL (name int_engine_requests, kind TABLE, grain (run_id, engine_request_id));
-- Grain: one row per run_id and engine request id of the captured rounds (stg_rounds):
--   run_id is the analysis run of the replayed request (stg_requests: a request of a
--   reference arm that two comparisons share has a row in each), the rounds' own run id
--   for the others; source_run_id is the rounds' run id (the run folder's), which the
--   models over stg_rounds and int_round_groups join on (with engine_key).
-- Kind TABLE: computed once at build: the models over the rounds (tens of
--   millions of rows, a few hundred thousand engine request ids) look each row's request
--   up here instead of parsing its id and joining the requests once per row. The engine
--   request ids are read from stg_rounds (one column, grouped: at 50 million rounds 0.6 s),
--   not from int_round_groups, which holds their integer keys only.
-- Purpose: the replayed request behind each engine request id, and what the models over
--   its rounds need of it.
--   engine_key      id_key(engine_request_id) (sql/macros.sql): the integer the models over
--                   the rounds group and join an engine request's rounds by, with source_run_id
--   request_id      request_id_of(engine_request_id) (sql/macros.sql): the client request id
--   request_key     id_key(request_id) of a replayed request, with run_id: the integer
--                   int_round_counts carries instead of the request id (the same for every
--                   engine request id of the request); NULL when not replayed. A mart joins
--                   the counted rounds to its requests by id_key(request_id), not through
--                   this table
--   (Two engine request ids of one run with the same engine_key, or two request ids of one
--   run in stg_requests with the same id_key, stop the build: an error names both. Every
--   request of stg_requests is checked, rounds captured or not, so a join by the key never
--   gives one request's rounds to another.)
--   replayed        true when that request is one of the run's replayed requests
--                   (stg_requests, same run_id): its rounds are the attributed ones
--                   (int_rounds_attributed); false for warm-up requests and any other
--                   traffic the engine served under the run id
--   arm, level, repeat, category, prompt_id, prompt_tokens, temperature
--                   of the replayed request (stg_requests); NULL when not replayed
--   natural_end_context   for a speculative greedy (temperature 0) request whose prompt has
--                   a natural end at its level (int_natural_ends, end-of-sequence ids known):
--                   natural_end_position + prompt_tokens - 1, the context_len from which a
--                   verify round lies after the natural end (its first drafted position,
--                   context_len - prompt_tokens + 1, is >= natural_end_position); NULL otherwise
--   natural_end_segment   for the other speculative greedy requests, the segment every one of
--                   their rounds falls in: 'unknown' (no successful baseline lossless-pass
--                   request for the prompt at this level, end-of-sequence ids unknown, or no
--                   prompt_tokens) or 'before_natural_end' (the prompt never ended within
--                   max_tokens); NULL when natural_end_context applies, and for every other
--                   request (acceptance_natural_end uses both)
with engine as (
    select distinct run_id, engine_request_id from stg_rounds
),
parsed as (
    select run_id, engine_request_id, id_key(engine_request_id) as engine_key,
           request_id_of(engine_request_id) as request_id
    from engine
),
requests as (
    select run_id, source_run_id, request_id, arm, level, repeat, category, prompt_id, prompt_tokens,
           temperature
    from stg_requests
),
ends as (
    select * from int_natural_ends
),
joined as (
    select
        coalesce(requests.run_id, parsed.run_id) as run_id,
        parsed.run_id as source_run_id,
        parsed.engine_request_id,
        parsed.engine_key,
        parsed.request_id,
        id_key(requests.request_id) as request_key,
        requests.request_id is not null as replayed,
        requests.arm,
        requests.level,
        requests.repeat,
        requests.category,
        requests.prompt_id,
        requests.prompt_tokens,
        requests.temperature,
        requests.arm = 'speculative' and requests.temperature = 0 as greedy_speculative,
        ends.eos_known,
        ends.natural_end_position
    from parsed
    left join requests on requests.source_run_id = parsed.run_id and requests.request_id = parsed.request_id
    left join ends
      on ends.run_id = requests.run_id and ends.level = requests.level
     and ends.prompt_id = requests.prompt_id
),
requests_keyed as (
    select distinct run_id, request_id, id_key(request_id) as request_key from stg_requests
),
engine_clashing as (
    select run_id, engine_key from parsed group by all having count(*) > 1
),
request_clashing as (
    select run_id, request_key from requests_keyed group by all having count(*) > 1
),
clashes as (
    select 'run ' || p.run_id || ': engine request ids ' || min(p.engine_request_id) || ' and '
           || max(p.engine_request_id) as ids
    from parsed p
    semi join engine_clashing c on c.run_id = p.run_id and c.engine_key = p.engine_key
    group by p.run_id, p.engine_key
    union all
    select 'run ' || r.run_id || ': request ids ' || min(r.request_id) || ' and ' || max(r.request_id)
    from requests_keyed r
    semi join request_clashing c on c.run_id = r.run_id and c.request_key = r.request_key
    group by r.run_id, r.request_key
),
checked as (
    select count(*) as clashes, min(ids) as ids from clashes
),
final as (
    select
        run_id, source_run_id, engine_request_id,
        case when checked.clashes = 0 then engine_key
             else error(checked.ids || ' have the same id_key (a 64-bit hash, sql/macros.sql): the models '
                        || 'over the rounds cannot tell them apart') end as engine_key,
        request_id, request_key, replayed, arm, level, repeat, category, prompt_id,
        prompt_tokens, temperature,
        case when greedy_speculative and eos_known and prompt_tokens is not null
             then natural_end_position + prompt_tokens - 1 end as natural_end_context,
        case
            when not greedy_speculative then null
            when eos_known is not true or prompt_tokens is null then 'unknown'
            when natural_end_position is null then 'before_natural_end'
        end as natural_end_segment
    from joined
    cross join checked
)
select * from final
