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

``embedded_as(pair)`` runs ``run_replay``'s embedded path with the pair
standing in for the servers it can serve (a vLLM arm with no speculation or the
pair's ngram): the same manifest, schedule, passes and marts, the servers'
pids for the resource samples; any other arm (llama.cpp's, in a two-engine
run) gets its own server from the real start-up path. A repeat's restart is
the real one for the run's own servers and keeps the pair, unless
``fresh_restart`` asks for fresh ones in its place (test_aa_e2e: the first
repeat on the pair, the second on a server started afresh by the real
restart). At the end the run's rounds are copied from the pair's capture
folder into the run folder, as ``--capture-dir`` does for external servers.
Starting the embedded vLLM servers themselves is tested where it matters
(test_aa_e2e: a fresh server for a repeat; test_stability_e2e: a kill and a
restart). test_sidecar_e2e needs counters since start-up and a capture folder
of its own: it runs first (marker ``first_on_pair``), on the pair still fresh.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from specdec.arms import NGRAM
from specdec.engines.server import start_all
from specdec.engines.vllm import ServerSpec, VllmServer
from specdec.http.urls import parse_endpoint
from specdec.replay import experiment
from specdec.replay.capture_import import import_capture
from specdec.replay.runner import request_id_prefix

#: the plugin's run id on the shared servers; a replay's rows are re-labelled with its own on import
SHARED_RUN_ID = "shared"

#: Threads of a llama-server the engine tests start (tests/conftest.py says why one)
LLAMA_TEST_THREADS = 1


@dataclass(frozen=True)
class ServerPair:
    """Two running vLLM servers of one configuration: no speculation, and ngram."""

    spec: ServerSpec
    baseline: VllmServer
    speculative: VllmServer
    capture_dir: Path

    def server(self, arm: str) -> VllmServer:
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
            VllmServer(spec, None, cap, SHARED_RUN_ID, root / "server-baseline.log"),
            VllmServer(spec, dict(NGRAM["vllm"]), cap, SHARED_RUN_ID, root / "server-speculative.log"),
        ]
        start_all(stack, servers)
        yield ServerPair(spec, servers[0], servers[1], cap)


class _PairAsEmbedded(experiment.EmbeddedServers):
    """The run's real ``experiment.EmbeddedServers``, with the arms the pair can serve served by it.

    An arm of engine vLLM whose speculation is none or the pair's ngram is mapped to the pair's
    baseline or speculative server; any other arm (a llama.cpp arm of a two-engine run) gets its
    own server from the real start-up path, started and stopped as the run would. A classic A/A
    run (no speculation) serves both arms from the pair's baseline, as its one embedded server
    would. A repeat's restart keeps the pair, unless ``fresh_restart`` (the A/A test: what it tests
    is the fresh server before a repeat): then every server of that repeat on is started afresh by
    the real path, and the pair is left alone (it is not the run's to stop)."""

    pair: ServerPair  # set on the subclass made by ``embedded_as``
    fresh_restart: bool = False

    def __init__(self, cfg, engines, arms, run_dir: Path, run_id: str, progress):
        super().__init__(cfg, engines, arms, run_dir, run_id, progress)
        assert not cfg.external, "the pair stands in for embedded servers"
        arm_engines = cfg.arm_engines()
        roles = {None: "baseline", _key(NGRAM["vllm"]): "speculative"}
        self.on_pair: dict[str, str] = {}  # arm -> the pair's server serving it
        for arm in arms:
            if arm_engines[arm.name] != "vllm":
                continue
            spec = engines["vllm"].spec
            assert spec == self.pair.spec, f"the run's server settings {spec} are not the pair's {self.pair.spec}"
            key = _key(arm.speculative_config)
            assert key in roles, f"arm {arm.name}: the pair serves no speculation or ngram, not {key}"
            self.on_pair[arm.name] = roles[key]
        self.shared = True

    def __exit__(self, *exc) -> None:
        # the run's rows on the pair, by its request ids, into the run folder before the recording
        # consolidates it; then the servers this run started are stopped by the real path
        try:
            entry = import_capture(
                self.pair.capture_dir, self.run_dir, self.run_id, request_id_prefix(self.run_id), wait_s=10.0
            )
            self.progress.message(f"shared servers: {entry['rows']} captured rows of this run imported")
        finally:
            super().__exit__(*exc)

    def start(self, repeat: int = 0) -> dict[str, str]:
        if not self.shared:
            return super().start(repeat)
        own = [arm for arm in self.arms if arm.name not in self.on_pair]
        all_arms, self.arms = self.arms, own
        try:
            endpoints = super().start(repeat) if own else {}
        finally:
            self.arms = all_arms
        for name, role in self.on_pair.items():
            endpoints[name] = self.pair.server(role).base_url
        return {arm.name: endpoints[arm.name] for arm in self.arms}

    def restart(self, repeat: int) -> dict[str, str]:
        """The real restart: this run's own servers stopped and started afresh; the pair kept, or
        with ``fresh_restart`` replaced from now on by servers started by the real path."""
        if self.fresh_restart:
            self.shared = False
        return super().restart(repeat)

    def pid_of(self, arm: str) -> int | None:
        if self.shared and arm in self.on_pair:
            return self.pair.server(self.on_pair[arm]).proc.pid
        return super().pid_of(arm)


def _key(speculative_config: dict | None) -> str | None:
    return None if speculative_config is None else json.dumps(speculative_config, sort_keys=True)


@contextlib.contextmanager
def embedded_as(pair: ServerPair, fresh_restart: bool = False) -> Iterator[None]:
    """Within the block, ``run_replay``'s embedded servers are ``pair`` wherever it can serve an
    arm (``_PairAsEmbedded``); ``fresh_restart``: a repeat's restart starts fresh servers."""
    stand_in = type("PairAsEmbedded", (_PairAsEmbedded,), {"pair": pair, "fresh_restart": fresh_restart})
    with mock.patch.object(experiment, "EmbeddedServers", stand_in):
        yield


@contextlib.contextmanager
def stability_on(pair: ServerPair) -> Iterator[None]:
    """Within the block, ``run_stability``'s embedded server starts as ``pair``'s baseline server,
    already serving (the start-up path is the one its kill-and-restart then runs for real: the
    same ``EmbeddedServer.start_blocking``, a fresh vLLM process). The run's server settings must
    be the pair's but for ``max_num_seqs``: the pair's (32) replaces the run's, in its manifest too,
    and the restart starts the pair's settings afresh. The kill is real: the pair's baseline is
    gone afterwards, so a test that uses this runs last on the pair (marker ``last_on_pair``)."""
    from specdec.experiments.stability import server as stability_server

    original = stability_server.EmbeddedServer

    class PairBaselineFirst(original):  # type: ignore[misc, valid-type]
        def __init__(self, spec, run_dir: Path, run_id: str, startup_timeout_s: float):
            mine = dataclasses.replace(spec, max_num_seqs=pair.spec.max_num_seqs)
            assert mine == pair.spec, f"the run's server settings {spec} are not the pair's {pair.spec}"
            super().__init__(pair.spec, run_dir, run_id, startup_timeout_s)

        def start_blocking(self) -> None:
            if self.starts:  # the restart: the real path, a fresh process
                super().start_blocking()
                return
            assert pair.baseline.proc is not None and pair.baseline.proc.poll() is None, "the pair's baseline is gone"
            self._srv, self.starts = pair.baseline, 1
            self.endpoint = parse_endpoint(pair.baseline.base_url)

        def stop(self) -> None:
            if self._srv is pair.baseline:  # never killed (the run ended early): the pair's to stop
                self._srv = None
            super().stop()

    with mock.patch.object(stability_server, "EmbeddedServer", PairBaselineFirst):
        yield
