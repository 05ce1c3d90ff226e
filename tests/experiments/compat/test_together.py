"""``--engine both`` with the two embedded engines side by side (specdec/experiments/compat/together.py):
the llama.cpp engine's work runs in a thread while vLLM's runs, the cells and the manifest
keep the engines' order, the manifest says the engines ran together, and a failure on
either side ends the run the way one engine after the other did. The embedded pairs are
fake servers here (tests/support/compat_server.py); nothing is started."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field

import pyarrow.parquet as pq
import pytest

from specdec.experiments.compat import run, together
from specdec.experiments.compat.cells import Pair
from specdec.http.urls import parse_endpoint
from specdec.runfolder import read_manifest
from tests.support.compat_server import CompatFake, threaded_pair


@dataclass
class Starts:
    threads: dict[str, str] = field(default_factory=dict)  # engine -> the thread its pair started in
    meet: bool = True  # the starts wait for each other (only possible side by side)
    further: list = field(default_factory=list)  # (engine, speculation) of each further pair started


@pytest.fixture
def embedded(monkeypatch):
    """Both engines' "embedded" pairs as fake servers. With ``meet`` the starts meet at a
    barrier: side by side they both get there; one after the other the first start would
    give up after 10 s and break it."""
    starts = Starts()
    barrier = threading.Barrier(2, timeout=10)
    with contextlib.ExitStack() as fakes:
        urls = {
            e: fakes.enter_context(threaded_pair(CompatFake(False), CompatFake(True))) for e in ("vllm", "llama.cpp")
        }

        def start(engine, run_dir, run_id, timeout_s, stack, echo, speculation=None):
            starts.threads[engine] = threading.current_thread().name
            if starts.meet and speculation is None:
                barrier.wait()
            b, s = (parse_endpoint(u) for u in urls[engine])
            if speculation is not None:  # a further pair (--draft-pair): as _start_embedded names it
                method = speculation["type"]
                starts.further.append((engine, speculation))
                pair = Pair(engine, "fake", method, b, s, id_tag=f"{engine}-{method}")
                return pair, {
                    "baseline_server_args": [],
                    "speculative_server_args": ["-md", speculation["draft_model"]],
                }
            return Pair(engine, "fake", "ngram", b, s), {"baseline_server_args": [], "speculative_server_args": []}

        monkeypatch.setattr(run, "_start_embedded", start)
        yield starts


def _cfg(tmp_path, **kw):
    return run.CompatConfig(
        engine="both", quantization=False, probes=["stream"], repeats=2, runs_dir=tmp_path, run_id="r1", **kw
    )


def test_the_llama_cpp_engine_runs_beside_vllm(tmp_path, embedded):
    run_dir, cells = run.run_compat(_cfg(tmp_path, together=True), echo=lambda _: None)
    assert embedded.threads["vllm"] == threading.main_thread().name
    assert embedded.threads["llama.cpp"].startswith("specdec-compat-beside")
    # whichever engine finished first, the cells and the parquet keep the engines' order
    assert [(c.engine, c.probe) for c in cells] == [("vllm", "stream"), ("llama.cpp", "stream")]
    rows = pq.read_table(run_dir / "compat.parquet").to_pylist()
    assert [r["engine"] for r in rows] == ["vllm", "llama.cpp"]
    assert all(c.speedup_pairs == 2 for c in cells)
    manifest = read_manifest(run_dir)
    assert manifest.finished and run.TOGETHER_NOTE in manifest.notes
    assert manifest.engines["vllm"]["probed_beside"] == "llama.cpp"
    assert manifest.engines["llama.cpp"]["probed_beside"] == "vllm"
    assert [e["probe"] for e in manifest.traffic["probes"]["llama.cpp"]] == ["stream"]


def test_the_draft_pair_probes_llama_cpps_features_with_its_own_gguf_as_draft(tmp_path, embedded):
    """--draft-pair (issue 43, item 3): an engine that can draft with the target's own file (llama.cpp)
    gets a second pair after its ngram pair, with every probe; vLLM has none and gets one pair. The
    further pair's cells say their method, its requests have ids of their own, and the manifest keeps
    its servers beside the first pair's."""
    embedded.meet = False
    run_dir, cells = run.run_compat(_cfg(tmp_path, draft_pair=True), echo=lambda _: None)
    assert [(c.engine, c.spec_method, c.probe) for c in cells] == [
        ("vllm", "ngram", "stream"),
        ("llama.cpp", "ngram", "stream"),
        ("llama.cpp", "draft-simple", "stream"),
    ]
    ((engine, speculation),) = embedded.further
    assert engine == "llama.cpp" and speculation["draft_model"].endswith(".gguf")
    manifest = read_manifest(run_dir)
    (more,) = manifest.engines["llama.cpp"]["more_pairs"]
    assert more["spec_method"] == "draft-simple" and more["speculative_server_args"][0] == "-md"
    ids = [
        i
        for entry in manifest.traffic["probes"]["llama.cpp"]
        for cell in entry["cells"].values()
        for i in cell["speculative"]["request_ids"]
    ]
    assert any(".llama_cpp-draft-simple.stream." in i for i in ids) and any(".llama_cpp.stream." in i for i in ids)
    assert len(ids) == len(set(ids))
    assert run.CompatConfig().draft_pair is False  # off by default: the run's time


def test_one_engine_after_the_other_is_the_default(tmp_path, embedded):
    embedded.meet = False
    assert run.CompatConfig().together is False
    run_dir, cells = run.run_compat(_cfg(tmp_path), echo=lambda _: None)
    assert set(embedded.threads.values()) == {threading.main_thread().name}
    assert [c.engine for c in cells] == ["vllm", "llama.cpp"]
    manifest = read_manifest(run_dir)
    assert run.TOGETHER_NOTE not in manifest.notes and "probed_beside" not in manifest.engines["vllm"]


def test_a_failure_of_vllm_stops_the_engine_beside_it_before_its_next_cell():
    done: list[int] = []
    started = threading.Event()

    def main(checkpoint):
        assert started.wait(10)
        raise RuntimeError("vLLM did not start")

    def beside(checkpoint):
        for i in range(1000):
            checkpoint()
            started.set()
            done.append(i)
            threading.Event().wait(0.01)

    with pytest.raises(RuntimeError, match="vLLM did not start"):
        together.side_by_side(main, beside)
    n = len(done)
    assert 0 < n < 1000  # it stopped early, and side_by_side returned only after it had
    threading.Event().wait(0.05)
    assert len(done) == n


def test_a_failure_beside_is_raised_once_vllm_is_done():
    finished = []

    def main(checkpoint):
        threading.Event().wait(0.2)
        finished.append("vllm")

    def beside(checkpoint):
        raise RuntimeError("llama-server did not start")

    with pytest.raises(RuntimeError, match="llama-server did not start"):
        together.side_by_side(main, beside)
    assert finished == ["vllm"]


def test_the_engine_that_runs_alone_never_stops_early():
    together.never()  # no exception
    stop = together.Stop()
    stop.checkpoint()
    stop.set()
    with pytest.raises(together.Stopped):
        stop.checkpoint()
