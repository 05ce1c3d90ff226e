MODEL (name int_greedy_checks_numbered, kind VIEW, grain (run_id, request_id));
-- Grain: one row per run_id and request of the lossless pass (stg_greedy_checks), as there.
-- Purpose: the lossless pass's checks, each with the occurrence of its prompt within its arm,
--   level and repeat, so that the models pairing checks (int_greedy_pairs: speculative against
--   baseline; int_baseline_greedy_pairs: baseline against itself) match a prompt sent twice
--   occurrence by occurrence.
--   pair_index   occurrence of the prompt within (arm, level, repeat), from 0, by request_id
select
    *,
    row_number() over (partition by run_id, arm, level, repeat, prompt_id order by request_id) - 1
        as pair_index
from stg_greedy_checks
