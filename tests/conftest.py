"""Shared fixtures. Tests never read ../shared: fixtures live in tests/fixtures."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def pytest_collection_modifyitems(config, items):
    """The engine tests that serve with llama.cpp (marker ``llama_cpp``) run after the others, in
    their collection order otherwise. `make test` runs the tests that start no engine beside the
    engine tests (tools/make_test.sh); llama-server's threads wait for one another at every step,
    so beside that work its tests ran 2-13x slower (2026-12-06: the whole replay 136 s against 54,
    a draft-model check 63 s against 5), while vLLM's were within 10%. By the time they run here,
    the work beside them has ended."""
    items.sort(key=lambda item: item.get_closest_marker("llama_cpp") is not None)


#: a file whose existence says the work beside the engine tests has ended (tools/make_test.sh sets it)
WAIT_FOR = "SPECDEC_LLAMA_CPP_WAITS_FOR"
_waited: list[float] = []


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before the first llama.cpp test (its fixtures included), wait until the file named by
    ``SPECDEC_LLAMA_CPP_WAITS_FOR`` exists: `make test` runs the no-engine tests beside the engine
    tests, and llama-server's threads beside that work spin at every step (2-13x slower,
    pytest_collection_modifyitems); the no-engine tests, given both cores, end sooner. At most 30
    minutes; the wait is printed with the durations."""
    flag = os.environ.get(WAIT_FOR)
    if not flag or _waited or item.get_closest_marker("llama_cpp") is None:
        return
    t0 = time.monotonic()
    while not Path(flag).exists() and time.monotonic() - t0 < 1800:
        time.sleep(0.5)
    _waited.append(time.monotonic() - t0)


def pytest_terminal_summary(terminalreporter):
    if _waited:
        terminalreporter.write_line(
            f"waited {_waited[0]:.1f} s before the llama.cpp tests for the work beside them to end ({WAIT_FOR})"
        )


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
    from specdec.engines.server import ServerSpec
    from tests.support.engine_servers import start_vllm_pair

    spec = ServerSpec(model=model_dir, dtype="float32", prefix_cache="reset")
    with start_vllm_pair(spec, tmp_path_factory.mktemp("vllm-pair")) as pair:
        yield pair
