"""Shared fixtures. Tests never read ../shared: fixtures live in tests/fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def pytest_collection_modifyitems(config, items):
    """A test marked ``first_on_pair`` runs first (the sidecar's: it needs the session's vLLM pair
    fresh, its counters and capture folder its own); a test marked ``last_on_pair`` runs last (the
    stability test's kill ends the pair's baseline server); the others in their collection order."""

    def order(item):
        first = item.get_closest_marker("first_on_pair") is not None
        last = item.get_closest_marker("last_on_pair") is not None
        return (last, not first)

    items.sort(key=order)


@pytest.fixture(autouse=True, scope="session")
def _llama_server_on_one_thread():
    """A run's llama-server computes on one thread in the tests (``SERVE_THREADS``; two in the
    product): `make test` runs the tests without engine beside the engine tests, and two threads of
    one llama-server wait for each other at every step of the graph, so a step stalls whenever either
    is descheduled (beside that work, 2026-12-06: a whole replay 136 s against 54 alone, a
    draft-model check 63 s against 5). One thread has no one to wait for."""
    from specdec.engines.llama_cpp import embedded
    from tests.support.engine_servers import LLAMA_TEST_THREADS

    saved = embedded.SERVE_THREADS
    embedded.SERVE_THREADS = LLAMA_TEST_THREADS
    yield
    embedded.SERVE_THREADS = saved


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
