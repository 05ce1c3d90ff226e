-- macros
-- Grain: none (functions, not relations). A scalar macro here is an expression over
--   its arguments: its grain is the caller's (the caller passes sums over its own group,
--   so every ratio below is pooled over that group unless the caller averages it).
-- Purpose: expressions several models share, each defined once here; `specdec analytics
--   build` creates them before the models (they are kept in the database, so a notebook
--   can call them too).
--   request_id_of(engine_request_id)  the client request id (X-Request-Id) inside vLLM's
--                     engine request id "chatcmpl-<X-Request-Id>-<8 hex>" (or "cmpl-..."
--                     for the completions endpoint); NULL when the id has another shape.
--                     stg_rounds applies it to every captured row; int_engine_requests
--                     once per distinct engine request id (tens of millions of rows hold a
--                     few hundred thousand ids)
--   id_key(id)       a 64-bit integer for an id string (DuckDB's hash of it): the models over
--                     the rounds group and join the rounds of an engine request, and of a
--                     request, by (run id, this integer) instead of by the id's string (at 50
--                     million rounds, 3.3 million groups: 426 MiB in memory with the strings,
--                     271 with the integer; issue 21). int_engine_requests stops the build with
--                     an error naming both ids if two ids of one run share a key (for a run of
--                     a million ids, a chance of about 1 in 37 million)
--   by_role(raw_table)  the rows of a raw relation that has run_id and arm, seen by role
--                     (specdec/arms.py): run_id becomes the analysis run (<run_id>/<arm> of
--                     each comparison a run of named arms makes; a classic run's own id),
--                     arm the role in it (baseline: the reference, speculative: the
--                     treatment); arm_name keeps the arm's own name and source_run_id the
--                     run folder's id. A row of a reference arm that two comparisons share
--                     is in both. Rows of runs raw_arm_roles does not name are unchanged.
--   role_keys()      the four key columns by_role puts first (run_id, arm, arm_name,
--                     source_run_id), as a list: a staging model over by_role that picks
--                     its columns selects them as columns(role_keys()), in by_role's order,
--                     instead of writing them out (specdec/arms.py's STAGING_ADDED is tested
--                     against it); the others take by_role's columns as they come (select *)
--   paired_rows(rows_table)  the two paired comparisons of a relation with run_id, arm,
--                     repeat and pair_key (what else must match: the prompt occurrence, or
--                     the level): one row per comparison, reference and treatment (each the
--                     whole row, a struct). 'ab' pairs a baseline row of repeat r with the
--                     speculative row of the same repeat; 'aa' (the A/A control) with the
--                     baseline's own row of repeat r + 1. int_requests_paired and
--                     int_blocks_paired pair through it, so the rule is written once
--   The acceptance formulas. A verify round is an engine step that checked drafted
--   tokens (k = tokens_proposed > 0); a = tokens_accepted of it. Each ratio is NULL (not
--   applicable) when its denominator is 0, never 0 or infinity.
--   mean_acceptance_length(tokens_accepted, verify_rounds)
--                     = 1 + tokens_accepted / verify_rounds  [tokens per verify round]
--                     the per-round definition: tokens one verify round yields, the
--                     bonus token included (vLLM's "mean acceptance length"; AIPerf's
--                     token-weighted acceptance length); 1.0 when nothing is accepted
--   acceptance_rate(tokens_accepted, tokens_proposed)
--                     = tokens_accepted / tokens_proposed  [fraction, 0..1]
--                     the per-token definition: the share of drafted tokens the target
--                     accepted (vLLM's "draft acceptance rate"; llama.cpp's acceptance
--                     rate). Counting the bonus token as proposed and accepted,
--                     acceptance_rate(a + verify_rounds, k + verify_rounds) is AIPerf's
--                     accepted per verified token
--   tokens_per_round(tokens_emitted, verify_rounds)
--                     = tokens_emitted / verify_rounds  [tokens per verify round]
--                     tokens the engine emitted per verify round (the bonus token
--                     included): the output one target forward yields, as counted by
--                     the engine's emitted tokens rather than from a + 1
create or replace macro request_id_of(engine_request_id) as
    nullif(regexp_extract(engine_request_id, '^(?:chatcmpl-|cmpl-)?(.+)-[0-9a-f]{8}$', 1), '');

create or replace macro id_key(id) as
    hash(id);

create or replace macro by_role(raw_table) as table
    select coalesce(roles.analysis_run_id, source.run_id) as run_id,
           coalesce(roles.role, source.arm) as arm,
           source.arm as arm_name,
           source.run_id as source_run_id,
           source.* exclude (run_id, arm)
    from query_table(raw_table) source
    left join raw_arm_roles roles on roles.run_id = source.run_id and roles.arm = source.arm;

create or replace macro role_keys() as
    ['run_id', 'arm', 'arm_name', 'source_run_id'];

create or replace macro paired_rows(rows_table) as table
    select c.comparison, reference, treatment
    from query_table(rows_table) reference
    cross join (values ('ab', 'speculative', 0), ('aa', 'baseline', 1)) as c(comparison, treatment_arm, repeat_offset)
    join query_table(rows_table) treatment
      on treatment.run_id = reference.run_id and treatment.pair_key = reference.pair_key
     and treatment.arm = c.treatment_arm and treatment.repeat = reference.repeat + c.repeat_offset
    where reference.arm = 'baseline';

create or replace macro mean_acceptance_length(tokens_accepted, verify_rounds) as
    1 + tokens_accepted / nullif(verify_rounds, 0);

create or replace macro acceptance_rate(tokens_accepted, tokens_proposed) as
    tokens_accepted / nullif(tokens_proposed, 0);

create or replace macro tokens_per_round(tokens_emitted, verify_rounds) as
    tokens_emitted / nullif(verify_rounds, 0);
