MODEL (name stg_pass_counters, kind VIEW, grain (run_id, arm, level, pass_kind, position));
-- Grain: one row per run_id, arm, level, untimed pass and position (PassCounters):
--   the engine's cumulative speculation counters read just before (position 'before') and
--   just after ('after') one arm's lossless pass or sampling pass at one level
--   (specdec.replay.passes.counters).
-- Purpose: the reads, typed. Nothing is derived here (int_passes_checked differences them).
-- Columns: as schemas.records.PassCounters.
--   pass_kind        'lossless_pass' (greedy, top-2 logprobs: stg_greedy_checks) |
--                    'sampling_pass' (seeded: stg_sample_checks)
--   spec_num_*, generation_tokens   cumulative counters as read; NULL = the server does not
--                    export that counter (all four NULL: it has no /metrics page)
--   run_id, arm: the analysis run and the role in it (by_role, sql/macros.sql; a classic
--   run's own); arm_name: the arm's own name; source_run_id: the run folder's id.
-- every field of the record, in its order: the raw view casts each to the record's type, and
-- tests/analytics/test_sql_models.py holds the columns to the record's fields
select * from by_role('raw_pass_counters')
