"""The vLLM plugin that records one row per request per speculative round
(entry point ``vllm.general_plugins`` -> ``hooks.register``): ``hooks`` (the
scheduler and model-runner hooks, run inside the engine), ``v2`` (draft and
verify time from CUDA events in Model Runner V2), ``targets`` (which vLLM
versions and classes the hooks patch) and ``reconcile`` (a start-up check that
the hooks are live). Rows go through ``specdec.capture.writer``."""
