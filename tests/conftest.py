"""Shared fixtures. Tests never read ../shared: fixtures live in tests/fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


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


# Engine tests on two workers (`make test`: pytest -m engine -n 2 --dist loadgroup). vLLM's
# CPU worker computes on one core (its automatic binding takes one logical CPU and leaves the
# other to the API server), so one engine test at a time left a core mostly idle. Each xdist
# worker binds the vLLM servers its tests start to its own core, and the tests are grouped so
# that a module's servers live on one worker: every test that uses the session's shared pair
# in one group (one pair per session, as before), every other engine module in a group of
# its own (its module-scoped servers start once). Without xdist nothing changes.
def pytest_configure(config):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        cores = sorted(os.sched_getaffinity(0))
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = str(cores[int(worker.removeprefix("gw")) % len(cores)])


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("engine") is None:
            continue
        group = "vllm_pair" if "vllm_pair" in getattr(item, "fixturenames", ()) else item.module.__name__
        item.add_marker(pytest.mark.xdist_group(group))
