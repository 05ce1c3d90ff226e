"""``run``'s embedded pairs, without starting a server: what the llama.cpp pair is
started with (one thread per server, as the quantization cells)."""

from __future__ import annotations

import contextlib

from specdec.engines import server
from specdec.engines.llama_cpp import LlamaCpp
from specdec.engines.llama_cpp.embedded import PROBE_THREADS
from specdec.experiments.compat import run


def test_the_embedded_llama_cpp_pair_runs_one_thread_per_server(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(server, "start_all", lambda stack, servers: started.extend(servers))
    monkeypatch.setattr(LlamaCpp, "executable", lambda self: ["/opt/llama-server"])
    with contextlib.ExitStack() as stack:
        pair, args = run._start_embedded("llama.cpp", tmp_path, "r1", 10.0, stack, lambda _: None)
    assert PROBE_THREADS == 1
    assert [s.cmd[s.cmd.index("-t") + 1] for s in started] == ["1", "1"]
    # the manifest's record of each arm says the same, and only the speculative arm speculates
    assert args["baseline_server_args"][args["baseline_server_args"].index("-t") + 1] == "1"
    assert "ngram-mod" in " ".join(args["speculative_server_args"])
    assert "ngram-mod" not in " ".join(args["baseline_server_args"])
    assert pair.engine == "llama.cpp" and pair.counters == LlamaCpp.counters
    # ngram-mod set to draft on a 32-token probe, with its own flags (its defaults draft nothing there)
    spec = " ".join(args["speculative_server_args"])
    assert "--spec-ngram-mod-n-match 4" in spec and "--spec-ngram-mod-n-max 4" in spec and "--spec-draft" not in spec


def test_the_llama_cpp_draft_pair_drafts_with_the_targets_own_gguf(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(server, "start_all", lambda stack, servers: started.extend(servers))
    monkeypatch.setattr(LlamaCpp, "executable", lambda self: ["/opt/llama-server"])
    draft = LlamaCpp().self_draft_speculation("/m/target.gguf")
    with contextlib.ExitStack() as stack:
        pair, args = run._start_embedded("llama.cpp", tmp_path, "r1", 10.0, stack, lambda _: None, draft)
    spec = args["speculative_server_args"]
    assert (
        spec[spec.index("-md") + 1] == "/m/target.gguf"
        and "draft-simple" in spec
        and "-md" not in args["baseline_server_args"]
    )
    assert pair.spec_method == "draft-simple" and pair.id_tag == "llama.cpp-draft-simple"
    assert [s.log_path.name for s in started] == [
        "server-llamacpp-draft-simple-baseline.log",
        "server-llamacpp-draft-simple-speculative.log",
    ]
    from specdec.engines.vllm import Vllm

    assert Vllm().self_draft_speculation("/m") is None  # vLLM drafts with a model of its own (--draft-model)


def test_the_embedded_vllm_pair_puts_each_servers_worker_on_its_own_core(tmp_path, monkeypatch):
    """vLLM's 'auto' binding would put both workers on one core (engines/server.separate_cores):
    the compat pair binds the baseline's to the first allowed core, the ngram arm's to the second,
    and the manifest's record of each arm says which."""
    import os

    started = []
    monkeypatch.setattr(server, "start_all", lambda stack, servers: started.extend(servers))
    from specdec import model
    from specdec.engines.vllm import embedded as vllm_embedded

    monkeypatch.setattr(model, "prepare_model", lambda: type("P", (), {"path": "/m"})())
    monkeypatch.setattr(vllm_embedded, "installed_facts", lambda: {"version": "0.32.0"})
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0, 1})
    with contextlib.ExitStack() as stack:
        pair, args = run._start_embedded("vllm", tmp_path, "r1", 10.0, stack, lambda _: None)
    assert [s.extra_env["VLLM_CPU_OMP_THREADS_BIND"] for s in started] == ["0", "1"]
    assert (args["baseline_cpu_bind"], args["speculative_cpu_bind"]) == ("0", "1")
    assert "--speculative-config" in args["speculative_server_args"]
    assert "--speculative-config" not in args["baseline_server_args"]
    assert pair.engine == "vllm" and pair.spec_method == "ngram"


def test_the_default_repeats_give_every_cell_an_interval():
    """2 pairs are the fewest with a t interval (1 df); the default must not drop below it."""
    assert run.CompatConfig().repeats == run.DEFAULT_REPEATS == 2
