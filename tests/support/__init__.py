"""Helpers shared by test modules (a test module never imports another, nor a conftest).

Runs and rows built by hand: ``synthetic_run`` (the analytics tests' run),
``lossless_run``, ``sampling_mart``, ``capture_rows``; reading them back:
``duck`` (a query's rows as dicts), ``prometheus``.
Servers: ``engine_servers`` (the real vLLM servers the engine tests share),
``fake_server`` and ``fake_sampler`` (fake vLLM), ``proxy_stub``; scripts the
lifecycle tests start: ``server_owner``, ``stubborn_server``, ``replay_owner``,
``fake_llama_server``. ``vllm_wheels``: the released vLLM sources the contract
tests read.
"""
