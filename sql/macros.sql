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
