-- macros
-- Grain: none (functions, not relations).
-- Purpose: expressions several models share, each defined once here; `specdec analytics
--   build` creates them before the models (they are kept in the database, so a notebook
--   can call them too).
--   request_id_of(engine_request_id)  the client request id (X-Request-Id) inside vLLM's
--                     engine request id "chatcmpl-<X-Request-Id>-<8 hex>" (or "cmpl-..."
--                     for the completions endpoint); NULL when the id has another shape.
--                     stg_rounds applies it to every captured row; int_engine_requests
--                     once per distinct engine request id (tens of millions of rows hold a
--                     few hundred thousand ids)
create or replace macro request_id_of(engine_request_id) as
    nullif(regexp_extract(engine_request_id, '^(?:chatcmpl-|cmpl-)?(.+)-[0-9a-f]{8}$', 1), '');
--   by_role(raw_table)  the rows of a raw relation that has run_id and arm, seen by role
--                     (specdec/arms.py): run_id becomes the analysis run (<run_id>/<arm> of
--                     each comparison a run of named arms makes; a classic run's own id),
--                     arm the role in it (baseline: the reference, speculative: the
--                     treatment); arm_name keeps the arm's own name and source_run_id the
--                     run folder's id. A row of a reference arm that two comparisons share
--                     is in both. Rows of runs raw_arm_roles does not name are unchanged.
create or replace macro by_role(raw_table) as table
    select coalesce(roles.analysis_run_id, source.run_id) as run_id,
           coalesce(roles.role, source.arm) as arm,
           source.arm as arm_name,
           source.run_id as source_run_id,
           source.* exclude (run_id, arm)
    from query_table(raw_table) source
    left join raw_arm_roles roles on roles.run_id = source.run_id and roles.arm = source.arm;
