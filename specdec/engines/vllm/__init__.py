"""vLLM, in one place: its adapter (``adapter``: the server's command line, its per-request
stats and counters, ``ServerSpec``) and its server for one arm (``server``: ``VllmServer``)."""

from specdec.engines.vllm.adapter import ServerSpec, Vllm, installed_facts, speculative_args
from specdec.engines.vllm.server import VllmServer

__all__ = ["ServerSpec", "Vllm", "VllmServer", "installed_facts", "speculative_args"]
