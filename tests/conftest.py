"""Shared fixtures. Tests never read ../shared: fixtures live in tests/fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def pytest_collection_modifyitems(config, items):
    """A test marked ``first_on_pair`` runs first (the sidecar's: it needs the session's vLLM pair
    fresh, its counters and capture folder its own); a test marked ``last_on_pair`` runs last (the
    stability test's kill ends the pair's baseline server). Then the engine tests that serve with llama.cpp (marker ``llama_cpp``) run first, the ones that
    use the session's vLLM pair first among them (the two-engine run: it starts the pair, which then
    idles at no CPU cost until the vLLM tests use it), in their collection order otherwise.
    `make test` (tools/make_test.sh) starts the tests that start no engine beside the engine tests
    only once the llama.cpp tests have ended (``LLAMA_CPP_DONE``): llama-server's threads wait for
    one another at every step, so beside that work its tests ran 2-13x slower (2026-12-06: the whole
    replay 136 s against 54, a draft-model check 63 s against 5), while vLLM's were within 10%."""

    def order(item):
        first = item.get_closest_marker("first_on_pair") is not None
        last = item.get_closest_marker("last_on_pair") is not None
        llama = item.get_closest_marker("llama_cpp") is not None
        return (last, not first, not llama, not (llama and "vllm_pair" in getattr(item, "fixturenames", ())))

    items.sort(key=order)
    llama = [item.nodeid for item in items if item.get_closest_marker("llama_cpp") is not None]
    config.stash[_LAST_LLAMA] = llama[-1] if llama else None
    if not llama:
        _llama_cpp_done()


#: a file this session creates once its llama.cpp tests have ended, their fixtures torn down (none
#: selected: at once; at the latest when the session ends): tools/make_test.sh starts the no-engine
#: tests then
LLAMA_CPP_DONE = "SPECDEC_LLAMA_CPP_DONE"
_LAST_LLAMA = pytest.StashKey[str | None]()


def _llama_cpp_done() -> None:
    flag = os.environ.get(LLAMA_CPP_DONE)
    if flag and not Path(flag).exists():
        Path(flag).write_text("done\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    if item.nodeid == item.config.stash.get(_LAST_LLAMA, None):
        _llama_cpp_done()


def pytest_sessionfinish(session, exitstatus):
    _llama_cpp_done()


@pytest.fixture(autouse=True)
def _no_settling_pause_against_fakes(request, monkeypatch):
    """A fake server's counters are final when its reply ends: in a test without engine the replay
    reads /metrics twice with no pause between (``runner.SETTLE_S``, 0.2 s against a real engine,
    whose stats are recorded just after the last chunk); the two reads that must agree still happen.
    Without it, each block's two snapshots slept 0.4 s: 5 of a sequential schedule test's 8 s."""
    if request.node.get_closest_marker("engine") is None:
        monkeypatch.setattr("specdec.replay.runner.SETTLE_S", 0.0)


@pytest.fixture(scope="session")
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def model_dir() -> str:
    """The converted SmolLM2 folder (converted once per machine, then cached)."""
    from specdec.model import prepare_model

    return str(prepare_model().path)


@pytest.fixture(scope="session")
def vllm_pair(tmp_path_factory, model_dir):
    """The session's shared vLLM servers (tests/support/engine_servers.py): baseline
    and ngram, float32 (speculation changes no greedy token), the prefix cache
    emptied by the replay before every block, the replay's max_num_seqs; started
    by the first test that asks, stopped at the end of the session."""
    # deferred, as in model_dir: a run without engine tests never imports the engine code
    from specdec.engines.vllm import ServerSpec
    from tests.support.engine_servers import start_vllm_pair

    spec = ServerSpec(model=model_dir, dtype="float32", prefix_cache="reset")
    with start_vllm_pair(spec, tmp_path_factory.mktemp("vllm-pair")) as pair:
        yield pair
