"""Engine servers shared by the engine tests (issue 20, item 6).

A vLLM CPU server takes 20-30 s to start here, two at once about 40 s. Engine
tests that only need a running server, not a fresh process, share one pair
per engine configuration for the whole session (``vllm_pair`` in
tests/conftest.py): a baseline server and an ngram speculative one
(``specdec.arms.NGRAM``), started together as the replay starts its arms, with
the capture plugin writing into one capture folder of the session.

What sharing asks of a test:
- read only its own traffic: captured rounds by its own request ids (a
  replay's ``sd.<run_id>.``, so run ids must differ between tests), engine
  counters as differences between two scrapes, never since start-up;
- leave the server as it found it: no kill, no flag of its own (a test that
  needs either keeps its own server and says why in a comment).

``embedded_as(pair)`` runs ``run_replay``'s embedded path on the pair instead
of starting servers: the same manifest, schedule, passes and marts, the
servers' pids for the resource samples; a repeat's restart keeps the servers
(the schedule is the same, the processes are not renewed); at the end the
run's rounds are copied from the pair's capture folder into the run folder,
as ``--capture-dir`` does for external servers. Starting the embedded
servers themselves is tested where it matters (test_aa_e2e: a fresh server
per repeat; test_two_engines_e2e: four servers of two engines at once;
test_stability_e2e: a kill and a restart).
"""

from __future__ import annotations

import contextlib
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from specdec.arms import NGRAM
from specdec.engines.server import LocalServer, ServerSpec, start_all
from specdec.replay import experiment
from specdec.replay.capture_import import import_capture
from specdec.replay.runner import request_id_prefix

#: the plugin's run id on the shared servers; a replay's rows are re-labelled with its own on import
SHARED_RUN_ID = "shared"


@dataclass(frozen=True)
class ServerPair:
    """Two running vLLM servers of one configuration: no speculation, and ngram."""

    spec: ServerSpec
    baseline: LocalServer
    speculative: LocalServer
    capture_dir: Path

    def server(self, arm: str) -> LocalServer:
        return {"baseline": self.baseline, "speculative": self.speculative}[arm]

    def reset_prefix_cache(self, arm: str) -> None:
        """Empty one server's prefix cache (the servers run with VLLM_SERVER_DEV_MODE=1)."""
        req = urllib.request.Request(self.server(arm).base_url + "/reset_prefix_cache", method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 200, r.status


@contextlib.contextmanager
def start_vllm_pair(spec: ServerSpec, root: Path) -> Iterator[ServerPair]:
    """Start both servers at once (``start_all``, as a replay does) under ``root``
    (logs, capture folder); stopped, groups and all, when the block ends."""
    assert spec.prefix_cache == "reset", "the shared servers must serve /reset_prefix_cache (a replay empties it)"
    cap = root / "capture"
    with contextlib.ExitStack() as stack:
        servers = [
            LocalServer(spec, None, cap, SHARED_RUN_ID, root / "server-baseline.log"),
            LocalServer(spec, dict(NGRAM["vllm"]), cap, SHARED_RUN_ID, root / "server-speculative.log"),
        ]
        start_all(stack, servers)
        yield ServerPair(spec, servers[0], servers[1], cap)


class _PairAsEmbedded:
    """Stands in for ``experiment.EmbeddedServers`` (same constructor, same methods)."""

    pair: ServerPair  # set on the subclass made by ``embedded_as``

    def __init__(self, cfg, engines, arms, run_dir: Path, run_id: str, progress):
        assert not cfg.external and cfg.named_arms is None and set(engines) == {"vllm"}, (
            "the pair serves a classic vLLM run"
        )
        spec = engines["vllm"].spec
        assert spec == self.pair.spec, f"the run's server settings {spec} are not the pair's {self.pair.spec}"
        want = {"baseline": None, "speculative": dict(NGRAM["vllm"])}
        for arm in arms:
            assert arm.speculative_config == want[arm.name], (arm.name, arm.speculative_config)
        self.cfg, self.run_dir, self.run_id, self.progress = cfg, run_dir, run_id, progress
        self.restarts = cfg.restart_servers == "repeat" and cfg.repeats > 1

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        # the run's rows, by its request ids, into the run folder before the recording consolidates it
        entry = import_capture(
            self.pair.capture_dir, self.run_dir, self.run_id, request_id_prefix(self.run_id), wait_s=10.0
        )
        self.progress.message(f"shared servers: {entry['rows']} captured rows of this run imported")

    def start(self, repeat: int = 0) -> dict[str, str]:
        return {arm: self.pair.server(arm).base_url for arm in self.cfg.arms}

    def restart(self, repeat: int) -> dict[str, str]:
        return self.start(repeat)

    def pid_of(self, arm: str) -> int | None:
        return self.pair.server(arm).proc.pid


@contextlib.contextmanager
def embedded_as(pair: ServerPair) -> Iterator[None]:
    """Within the block, ``run_replay`` runs its embedded path on ``pair``."""
    stand_in = type("PairAsEmbedded", (_PairAsEmbedded,), {"pair": pair})
    original = experiment.EmbeddedServers
    experiment.EmbeddedServers = stand_in
    try:
        yield
    finally:
        experiment.EmbeddedServers = original
