"""specdec-replay: re-issue a traffic mix against an OpenAI-compatible server
in two arms (baseline, speculative) at stepped closed-loop concurrency."""
