"""The engine adapters on captured responses (tests/fixtures/llama_cpp, from a real
llama-server) and on vLLM's response shape; no server runs here."""

from __future__ import annotations

import json

import pytest

from specdec.engines import ENGINES, LlamaCpp, RequestStats, Vllm, engine, request_stats_of
from specdec.engines.base import Arm
from specdec.replay.http.client import StreamResult
from specdec.replay.http.sse import SseParser


@pytest.fixture
def llama_chunk(fixtures):
    return json.loads((fixtures / "llama_cpp" / "final_chunk.json").read_text())


def test_each_engine_is_named_once_and_an_unknown_one_is_refused():
    assert set(ENGINES) == {"vllm", "llama.cpp"}
    assert isinstance(engine("llama.cpp"), LlamaCpp)
    with pytest.raises(ValueError, match="unknown engine 'sglang'"):
        engine("sglang")


def test_llama_cpp_stats_come_from_timings(llama_chunk):
    assert request_stats_of(llama_chunk) == RequestStats("llama.cpp", 128, 93, None)
    assert Vllm().request_stats(llama_chunk) is None  # the shape says whose response it is


def test_a_llama_cpp_request_without_drafts_reads_zero_only_on_a_speculative_server(llama_chunk):
    del llama_chunk["timings"]["draft_n"], llama_chunk["timings"]["draft_n_accepted"]
    e = LlamaCpp()
    assert e.request_stats(llama_chunk) is None
    for speculative, expected in ((True, (0, 0)), (False, (None, None))):
        res = StreamResult(request_id="r1", wall_send_ns=0, success=True)
        e.settle_stats(res, speculative)
        assert (res.spec_num_draft_tokens, res.spec_num_accepted_tokens) == expected
    failed = StreamResult(request_id="r2", wall_send_ns=0, success=False)
    e.settle_stats(failed, True)
    assert failed.spec_num_draft_tokens is None  # a failed request's stats stay unknown


def test_vllm_stats_come_from_the_speculative_metrics_block():
    chunk = {
        "usage": {"completion_tokens": 9},
        "metrics": {
            "speculative_decoding": {"num_spec_steps": 3, "num_draft_tokens": 9, "num_accepted_draft_tokens": 5}
        },
    }
    assert request_stats_of(chunk) == RequestStats("vllm", 9, 5, 3)
    assert LlamaCpp().request_stats(chunk) is None
    chunk["metrics"]["speculative_decoding"]["num_draft_tokens"] = -1  # not a count
    assert request_stats_of(chunk) is None


def test_the_stream_parser_reads_llama_cpp_stats(llama_chunk):
    res = StreamResult(request_id="r1", wall_send_ns=0)
    parser = SseParser(res, [], 0)
    parser.feed(b'data: {"choices":[{"delta":{"content":"1, 2"}}]}\n\n', 1_000_000)
    parser.feed(f"data: {json.dumps(llama_chunk)}\n\ndata: [DONE]\n\n".encode(), 2_000_000)
    parser.finish()
    assert res.error_type is None and res.output_tokens == 128
    assert (res.spec_num_draft_tokens, res.spec_num_accepted_tokens, res.spec_num_steps) == (128, 93, None)


def test_llama_cpp_counters_and_positions(fixtures):
    text = (fixtures / "llama_cpp" / "metrics.txt").read_text()
    e = LlamaCpp()
    counters = e.parse_counters(text)
    assert counters["spec_num_draft_tokens"] == 192 and counters["spec_num_accepted_tokens"] == 95
    assert counters["spec_num_drafts"] == 3 and counters["generation_tokens"] == 192
    from specdec.schemas.records import MetricSnapshot

    assert set(counters) <= set(MetricSnapshot.model_fields)  # the runner writes them as snapshot fields
    assert e.parse_positions(text) == {0: 3, 1: 3, 2: 2, 3: 2}
    # a page without the speculative series (no speculation): None, not 0
    assert e.parse_counters("llamacpp:n_decode_total 5\n")["spec_num_drafts"] is None
    assert Vllm().parse_positions(text) == {}


def test_llama_cpp_speculation_flags_are_the_only_difference_between_arms(tmp_path):
    e = LlamaCpp(binary=tmp_path / "llama-server")
    base = e.server_command(Arm("baseline", None), model="m.gguf", port=1)
    ngram = e.server_command(Arm("ngram", {"type": "ngram-mod", "n_max": 16}), model="m.gguf", port=1)
    draft = e.server_command(Arm("draft", {"type": "draft-simple", "draft_model": "d.gguf"}), model="m.gguf", port=1)
    # ngram-mod's lengths have flags of their own: the draft-model flags would leave it at 64 (issue 43)
    assert ngram[: len(base)] == base and ngram[len(base) :] == [
        "--spec-type",
        "ngram-mod",
        "--spec-ngram-mod-n-max",
        "16",
    ]
    assert draft[len(base) :] == ["-md", "d.gguf", "--spec-type", "draft-simple"]
    sized = {"type": "draft-simple", "draft_model": "d.gguf", "n_max": 3, "n_min": 1}
    assert e.speculation_args(Arm("d", sized))[-4:] == ["--spec-draft-n-max", "3", "--spec-draft-n-min", "1"]
    mod = {"type": "ngram-mod", "n_match": 8, "n_min": 0}
    assert e.speculation_args(Arm("m", mod))[2:] == ["--spec-ngram-mod-n-min", "0", "--spec-ngram-mod-n-match", "8"]
    with pytest.raises(ValueError, match="unknown setting.*n_match"):  # not dropped unseen
        e.speculation_args(Arm("bad", {**sized, "n_match": 8}))
    with pytest.raises(ValueError, match="n_max must be a whole number"):
        e.speculation_args(Arm("bad", {"type": "ngram-mod", "n_max": -1}))
    assert "--metrics" in base
    with pytest.raises(ValueError, match="draft-simple needs draft_model"):
        e.speculation_args(Arm("bad", {"type": "draft-simple"}))
    with pytest.raises(ValueError, match="'eagle' is not one of"):
        e.speculation_args(Arm("bad", {"type": "eagle"}))


def test_the_vllm_server_command_is_the_one_it_always_was(tmp_path):
    """VllmServer builds its command through the adapter: the same arguments as
    before the adapter (common arguments, then the speculative ones)."""
    import sys

    from specdec.engines.vllm import ServerSpec, VllmServer, speculative_args

    cfg = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
    spec = ServerSpec(model="/m", max_num_seqs=8)
    srv = VllmServer(spec, cfg, tmp_path / "capture", "run", tmp_path / "server.log")
    assert srv.cmd == [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--host",
        "127.0.0.1",
        "--port",
        str(srv.port),
        *spec.common_args(),
        *speculative_args(cfg),
    ]
    assert Vllm().speculation_args(Arm("baseline", None)) == []


def test_servers_alive_together_get_a_core_each_unless_there_are_too_few(tmp_path, monkeypatch):
    """separate_cores: one distinct allowed core per vLLM server, in order; vLLM's 'auto' (None)
    when fewer cores are allowed than servers or OMP_NUM_THREADS asks for more threads; the
    value reaches the server's environment as VLLM_CPU_OMP_THREADS_BIND."""
    import os

    from specdec.engines import server
    from specdec.engines.vllm import ServerSpec, VllmServer

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {3, 1, 7})
    assert server.separate_cores(2) == ["1", "3"]
    assert server.separate_cores(4) == [None] * 4
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert server.separate_cores(2) == [None, None]
    spec = ServerSpec(model="/m")
    bound = VllmServer(spec, None, tmp_path / "c", "run", tmp_path / "a.log", cpu_bind="3")
    auto = VllmServer(spec, None, tmp_path / "c", "run", tmp_path / "b.log")
    assert bound.extra_env["VLLM_CPU_OMP_THREADS_BIND"] == "3"
    assert "VLLM_CPU_OMP_THREADS_BIND" not in auto.extra_env


def test_the_llama_cpp_settings_of_a_replay_are_checked_before_anything_runs(tmp_path):
    """--engine llama.cpp: vLLM's default speculative config becomes ngram-mod, the
    lossless pass stays on (its own endpoint, issue 43) and the prefix-cache reset becomes no prompt cache; a
    speculative config llama.cpp cannot start, or a draft GGUF that is not there, is
    refused by the settings themselves, naming the option (before a run folder exists)."""
    from pydantic import ValidationError

    from specdec.replay.config import ReplayConfig

    cfg = ReplayConfig(traffic=tmp_path / "t.jsonl", engine="llama.cpp")
    assert (cfg.speculative_config, cfg.lossless_pass, cfg.prefix_cache) == ({"type": "ngram-mod"}, True, "off")
    with pytest.raises(ValidationError, match="--spec-config for --engine llama.cpp: .*'eagle' is not one of"):
        ReplayConfig(traffic=tmp_path / "t.jsonl", engine="llama.cpp", speculative_config={"type": "eagle"})
    with pytest.raises(ValidationError, match="draft_model .*nope.gguf: no such GGUF file"):
        ReplayConfig(
            traffic=tmp_path / "t.jsonl",
            engine="llama.cpp",
            speculative_config={"type": "draft-simple", "draft_model": str(tmp_path / "nope.gguf")},
        )
    (tmp_path / "d.gguf").write_bytes(b"GGUF")
    ok = ReplayConfig(
        traffic=tmp_path / "t.jsonl",
        engine="llama.cpp",
        speculative_config={"type": "draft-simple", "draft_model": str(tmp_path / "d.gguf")},
    )
    assert ok.speculative_config["type"] == "draft-simple"
    assert ReplayConfig(traffic=tmp_path / "t.jsonl").prefix_cache == "reset"  # vLLM's unchanged


def test_snapshots_carry_the_per_position_counter_of_either_engine(fixtures):
    vllm_text = (fixtures / "vllm_metrics_spec.prom").read_text()
    snap = Vllm().parse_snapshot(vllm_text)
    assert snap["accepted_per_position"] == [3.0, 2.0, 1.0, 1.0] and snap["spec_num_drafts"] == 4.0
    llama = LlamaCpp().parse_snapshot((fixtures / "llama_cpp" / "metrics.txt").read_text())
    assert llama["accepted_per_position"] == [3.0, 3.0, 2.0, 2.0]
    from specdec.schemas.records import MetricSnapshot

    assert set(snap) <= set(MetricSnapshot.model_fields)  # the runner writes them as snapshot fields
    # a server without the series: None (not an empty list, not zeros)
    assert Vllm().parse_snapshot("vllm:generation_tokens_total 3.0\n")["accepted_per_position"] is None
    from specdec.engines.base import positions_list

    assert positions_list({0: 2.0, 2: 1.0}) == [2.0, 0.0, 1.0]  # a gap is a position not yet counted


def test_every_adapter_answers_what_generic_code_asks():
    """Generic code asks the adapter (issue 44, item 3); the config's type names every engine."""
    import typing

    from specdec.engines import ENGINE_NAMES, ENGINES, EngineName

    assert set(typing.get_args(EngineName)) == set(ENGINE_NAMES) and ENGINE_NAMES[0] == "vllm"
    for e in ENGINES.values():
        assert e.label and e.model_kind in ("folder", "gguf"), e.name
        assert e.method_of(e.ngram) and e.method_of(None) is None, e.name
        swept = e.with_draft_length(e.ngram, 3)
        assert swept[e.draft_length_key] == 3 and e.ngram.get(e.draft_length_key) != 3, e.name
        e.check_speculation(e.ngram)  # the engine's own default passes its own check
    assert [e.name for e in ENGINES.values() if e.writes_rounds] == ["vllm"]  # the capture plugin's engine
    with pytest.raises(ValueError, match="not one of"):
        ENGINES["llama.cpp"].check_speculation({"type": "eagle"})
    assert ENGINES["llama.cpp"].with_draft_length({"type": "ngram-mod", "n_min": 2}, 4) == {
        "type": "ngram-mod",
        "n_min": 2,
        "n_max": 4,
    }


def test_a_vllm_servers_sockets_are_its_own_and_go_with_it(monkeypatch):
    """vLLM puts its ZeroMQ ``ipc://`` sockets in VLLM_RPC_BASE_PATH (the temporary folder by
    default) and leaves them there when stopped: VllmServer gives each server a folder of its own
    and removes it, sockets and all, once the server is stopped; one the user set is kept."""
    import contextlib
    import os
    import shutil
    import sys
    import tempfile
    from pathlib import Path

    from specdec.engines.server import start_all
    from specdec.engines.vllm import ServerSpec, VllmServer

    # a stand-in for vLLM: binds a Unix socket where vLLM would, then answers /health
    serve = (
        "import http.server, os, socket, sys, uuid\n"
        "s = socket.socket(socket.AF_UNIX); s.bind(os.path.join(os.environ['VLLM_RPC_BASE_PATH'], str(uuid.uuid4())))\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self): self.send_response(200); self.end_headers()\n"
        "    def log_message(self, *a): pass\n"
        "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n"
    )

    def started(log: Path) -> VllmServer:
        srv = VllmServer(ServerSpec(model="/m"), None, log.parent, "run", log, startup_timeout_s=30)
        srv.cmd = [sys.executable, "-c", serve, str(srv.port)]
        return srv

    # a short temporary folder: a Unix socket's path holds at most 107 bytes (pytest's tmp_path is long)
    short = Path(tempfile.mkdtemp(prefix="sd-", dir="/tmp"))
    try:
        (short / "tmp").mkdir()
        monkeypatch.delenv("VLLM_RPC_BASE_PATH", raising=False)
        monkeypatch.setenv("TMPDIR", str(short / "tmp"))
        monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
        srv = started(short / "a.log")
        with contextlib.ExitStack() as stack:
            start_all(stack, [srv])
            folder = srv.extra_env["VLLM_RPC_BASE_PATH"]
            assert Path(folder).parent == short / "tmp"
            assert len(os.listdir(folder)) == 1  # the stand-in's socket file
        assert not os.path.exists(folder) and os.listdir(short / "tmp") == []
        assert "VLLM_RPC_BASE_PATH" not in srv.extra_env

        (short / "mine").mkdir()
        monkeypatch.setenv("VLLM_RPC_BASE_PATH", str(short / "mine"))
        with contextlib.ExitStack() as stack:
            start_all(stack, [started(short / "b.log")])
        assert len(os.listdir(short / "mine")) == 1  # the user's folder: kept, with what was left there
    finally:
        shutil.rmtree(short, ignore_errors=True)


def test_where_a_socket_path_would_not_fit_vllm_keeps_its_own_place(monkeypatch, tmp_path):
    """A temporary folder so long that a socket in a folder of the server's own would pass the
    107 bytes of a Unix socket path: VLLM_RPC_BASE_PATH is not set (vLLM's default, where its
    paths are shorter by the folder's name), and the folder made to try is gone."""
    import tempfile

    from specdec.engines.vllm import ServerSpec, VllmServer

    deep = tmp_path / ("d" * 60)
    deep.mkdir()
    monkeypatch.delenv("VLLM_RPC_BASE_PATH", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    srv = VllmServer(ServerSpec(model="/m"), None, tmp_path / "c", "run", tmp_path / "s.log")
    launched = []
    monkeypatch.setattr("specdec.engines.server.ServerProcess.launch", lambda self: launched.append(self))
    srv.launch()
    assert launched == [srv] and "VLLM_RPC_BASE_PATH" not in srv.extra_env
    assert list(deep.iterdir()) == []
