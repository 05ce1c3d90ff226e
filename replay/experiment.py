"""One replay run from start to files: run folder, manifest, servers, arms,
and the final consolidation of part files. The folder's layout and every
file name are defined in ``specdec.runfolder``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specdec.engines import Arm, EmbeddedEngine
from specdec.engines.server import ServerProcess, start_all
from specdec.errors import SpecdecError
from specdec.http.urls import parse_endpoint
from specdec.replay.capture_import import import_capture
from specdec.replay.config import DEFAULT_API_KEY_ENV, ReplayConfig
from specdec.replay.embedded import (
    context_per_request,
    draft_preflight,
    embedded_engines,
    model_error,
)
from specdec.replay.http import event_loop
from specdec.replay.load.modes import plans as load_plans
from specdec.replay.load.sequential_loop import Look
from specdec.replay.manifest import arm_config, build_manifest
from specdec.replay.progress import Progress
from specdec.replay.runner import Replayer, level_rows, request_id_prefix
from specdec.replay.writing import writing_run
from specdec.runfolder import (
    claim_run_dir,
    open_run_dir,
    server_log,
    write_manifest,
)
from specdec.schemas.records import ArmConfig, RunManifest
from specdec.traffic import load_traffic
from specdec.traffic.mix import unknown_categories

log = logging.getLogger("specdec.replay")

#: ``look_factory(run_dir, looks)``: a sequential run's look (``load/sequential_loop.Look``),
#: made once the run folder exists; ``looks`` is the run's live list of looks taken so far
#: (the runner appends to it; each entry as the manifest records it).
LookFactory = Callable[[Path, list[dict[str, Any]]], Look]


def _check_inputs(cfg: ReplayConfig, max_model_len: int | None) -> None:
    """Everything that can be checked before anything is created on disk."""
    if max_model_len is not None and cfg.max_tokens is not None and cfg.max_tokens >= max_model_len:
        raise SpecdecError(
            f"--max-tokens {cfg.max_tokens} does not fit the model's context "
            f"(max_model_len {max_model_len}) together with a prompt"
        )
    for name in ("baseline_url", "speculative_url"):
        url = getattr(cfg, name)
        if url:
            parse_endpoint(url, option=f"--{name.replace('_', '-')}")
    if cfg.external:
        for arm in cfg.arms:
            if not getattr(cfg, f"{arm}_url"):
                raise SpecdecError(f"--{arm}-url is required for the {arm} arm with external endpoints")
    elif cfg.capture_dir is not None:
        raise SpecdecError("--capture-dir is for external servers; the embedded engine captures into the run folder")
    if cfg.capture_dir is not None and not cfg.capture_dir.is_dir():
        raise SpecdecError(f"--capture-dir {cfg.capture_dir}: no such folder")
    if cfg.api_key_env != DEFAULT_API_KEY_ENV and not cfg.api_key():
        raise SpecdecError(f"--api-key-env {cfg.api_key_env}: that environment variable is not set or empty")
    error = model_error(cfg)
    if error:
        raise SpecdecError(error)


def run_replay(cfg: ReplayConfig, look_factory: LookFactory | None = None) -> Path:
    """Run one replay from config to files; the run folder. With ``cfg.max_repeats`` (a
    sequential design) ``look_factory`` makes the look taken after each repeat from
    ``cfg.repeats`` on (``runner.Replayer.run``): the replay layer does not know the
    analytics, the command passes them in. Before each look the manifest on disk holds
    every look before it, and each look is written to it as soon as it is taken.
    Without a factory, or in the fixed design, no look is taken."""
    max_model_len = context_per_request(cfg)  # the smallest of the run's engines
    traffic = load_traffic(cfg.traffic, max_model_len=max_model_len)
    unknown = unknown_categories(cfg.mix, traffic.categories) if cfg.mix else None
    if unknown:
        raise SpecdecError(f"--mix: {unknown}")
    _check_inputs(cfg, max_model_len)
    preflight_notes = draft_preflight(cfg)  # a draft whose tokenizer is not the target's stops the run here
    rows = level_rows(traffic, cfg)
    load_plans(cfg, traffic, rows)  # an unfit file for the load mode stops the run here
    run_id, run_dir = claim_run_dir(cfg.runs_dir, cfg.run_id)

    engines = embedded_engines(cfg)  # builds llama-server / prepares the model where the arms need them
    arms = [arm_config(cfg, arm, engines) for arm in cfg.arm_specs()]
    eos_ids = None
    if cfg.lossless_pass or cfg.samples:  # both passes look up natural ends
        eos_ids = next((ids for e in engines.values() if (ids := e.eos_ids()) is not None), None)
    manifest = build_manifest(cfg, run_id, run_dir, traffic, rows, engines, arms)
    manifest.notes.extend(preflight_notes)
    open_run_dir(cfg.runs_dir, run_dir)
    write_manifest(run_dir, manifest)

    with writing_run(run_dir, manifest):  # SIGTERM = Ctrl-C; parts merged, manifest written, however it ends
        with (
            Progress(cfg.progress) as progress,
            EmbeddedServers(cfg, engines, arms, run_dir, run_id, progress) as servers,
        ):
            endpoints = (
                servers.start() if not cfg.external else {arm.name: getattr(cfg, f"{arm.name}_url") for arm in arms}
            )
            if cfg.external:
                for arm in arms:
                    progress.message(f"{arm.name} arm: {arm.endpoint}")
            restart = servers.restart if servers.restarts else None
            runner = Replayer(
                cfg,
                run_id,
                run_dir,
                traffic,
                progress,
                eos_token_ids=eos_ids,
                pid_of=servers.pid_of,
                save_looks=lambda looks: _save_looks(run_dir, manifest, looks),
            )
            look = look_factory(run_dir, runner.looks) if look_factory is not None and cfg.sequential else None
            event_loop.run(runner.run(endpoints, restart=restart, look=look))
            if cfg.capture_dir is not None:
                progress.message(f"importing this run's captured rounds from {cfg.capture_dir}")
                manifest.capture = import_capture(
                    cfg.capture_dir, run_dir, run_id, request_id_prefix(run_id), cfg.capture_wait_s
                )
        manifest.finished = True
    return run_dir


def _save_looks(run_dir: Path, manifest: RunManifest, looks: list[dict[str, Any]]) -> None:
    """A sequential run's looks so far into the manifest on disk (an interrupted run keeps them)."""
    manifest.looks = [dict(entry) for entry in looks]
    write_manifest(run_dir, manifest)


class EmbeddedServers:
    """The embedded servers of a run: one per arm, each of its arm's engine (one
    for both in a classic A/A run: the baseline measured against itself; two processes would add their
    own difference, up to 5% seen here, to the noise). With
    ``--restart-servers repeat`` they are stopped and started afresh before
    each repeat after the first (``restart``), all stopped before any starts,
    so no more than one server per arm is ever up. External servers: nothing."""

    def __init__(
        self,
        cfg: ReplayConfig,
        engines: dict[str, EmbeddedEngine],
        arms: list[ArmConfig],
        run_dir: Path,
        run_id: str,
        progress: Progress,
    ):
        self.cfg, self.engines, self.arms, self.run_dir, self.run_id = cfg, engines, arms, run_dir, run_id
        self.progress = progress
        self.restarts = not cfg.external and cfg.restart_servers == "repeat" and cfg.repeats > 1
        self._stack = contextlib.ExitStack()
        self._servers: dict[str, ServerProcess] = {}  # arm -> the server started for it (shared in A/A)

    def __enter__(self) -> EmbeddedServers:
        return self

    def __exit__(self, *exc) -> None:
        self._stack.__exit__(*exc)  # each server's stop knows whether the run is being interrupted

    def start(self, repeat: int = 0) -> dict[str, str]:
        """Start every arm's server at once (``server.start_all``) and wait for all."""
        endpoints: dict[str, str] = {}
        engines = self.cfg.arm_engines()
        launched: list = []
        for arm in self.arms:
            if self.cfg.speculative_config is None and self.cfg.named_arms is None and endpoints:
                endpoints[arm.name] = next(iter(endpoints.values()))
                self._servers[arm.name] = next(iter(self._servers.values()))
                continue
            log = server_log(self.run_dir, arm.name)
            when = f" for repeat {repeat}" if repeat else ""
            engine = self.engines[engines[arm.name]]
            self.progress.message(f"starting {engine.label} for the {arm.name} arm{when} (log: {log})")
            srv = engine.server(
                Arm(arm.name, arm.speculative_config), log, self.run_dir, self.run_id, self.cfg.startup_timeout_s
            )
            endpoints[arm.name] = srv.base_url
            self._servers[arm.name] = srv
            launched.append(srv)
        start_all(self._stack, launched)
        return endpoints

    def pid_of(self, arm: str) -> int | None:
        """PID of the server process now serving ``arm`` (None: none started by specdec)."""
        srv = self._servers.get(arm)
        return srv.proc.pid if srv is not None and srv.proc is not None else None

    def restart(self, repeat: int) -> dict[str, str]:
        """Stop every server, then start fresh ones; their new endpoints."""
        self._stack.close()
        self._stack = contextlib.ExitStack()
        self._servers = {}
        return self.start(repeat)
