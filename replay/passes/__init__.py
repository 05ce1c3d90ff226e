"""The untimed passes a replay sends after a level's timed blocks, each on its own
requests so that nothing it asks for (logprobs, samples) slows a timed one:

- ``lossless``: the lossless pass, greedy requests with token ids and top-2
  logprobs per position, which classifies a speculative output that differs from
  the baseline's (``sql/intermediate/lossless/int_greedy_pairs.sql``).
- ``sampling``: the sampling pass, repeated samples per prompt at the row's
  temperature for the sampling check (``analytics/sampling_check.py``), and
  ``rescore``, which scores every sample again on one server (teacher forcing).
- ``counters``: the engine's speculation counters read around each pass.

"Verify" in specdec means only the engine's verify step (``verify_ms``, a verify
round); see docs/glossary.md.
"""
