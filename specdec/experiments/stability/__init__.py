"""``specdec stability``: send odd inputs, disconnects, a burst, a soak and a
kill-and-restart to one server on purpose, and record what it did about each.

The probes live in ``faults`` (odd inputs), ``load_faults`` (disconnects,
burst), ``soak`` (closed loop with RSS trend) and ``recovery`` (kill and
restart, greedy re-check), the server under test in ``server``, and
``runner`` runs them in order and checks ``/health`` after each (all modules
of this package). This package's root validates the settings,
starts the server, writes one ``StabilityResult`` row per probe into the run
folder (``stability-*.parquet`` parts, consolidated into
``stability.parquet``) with a ``RunManifest`` of kind ``stability``, and
prints the fault -> outcome table. Every loop is bounded in count and time,
and the only targets are the embedded engine or a loopback ``--url``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import itertools
from collections.abc import Callable
from pathlib import Path

from pydantic import Field

from specdec.defaults import MAX_MODEL_LEN, RUNS_DIR, STABLE_DTYPE, STARTUP_TIMEOUT_S
from specdec.engines.vllm import ServerSpec, installed_facts
from specdec.replay.config import ClientOptions
from specdec.replay.host import host_facts, package_version
from specdec.runfolder import claim_run_dir, open_run_dir, server_log, stability_part, write_manifest
from specdec.schemas.records import ArmConfig, RunManifest, StabilityResult
from specdec.schemas.strict import RunName

OUTCOME_RANK = {"skipped": 0, "ok": 1, "degraded": 2, "failed": 3}


class StabilityConfig(ClientOptions):
    """The validated settings of one stability run (what the command builds);
    timeouts and the API key's variable come from ClientOptions (the API key
    is used with --url only)."""

    url: str | None = Field(default=None, description="Loopback endpoint to probe; None: start the embedded vLLM.")
    runs_dir: Path = Field(default=RUNS_DIR, description="Parent folder of run folders.")
    run_id: RunName | None = Field(default=None, description="Run folder name; default: UTC timestamp.")
    concurrency: int = Field(
        default=2, ge=1, le=64, description="Closed-loop concurrency of the soak; the burst sends 4x this at once."
    )
    soak_minutes: float = Field(
        default=2.0, gt=0, le=120, allow_inf_nan=False, description="Length of the soak, minutes."
    )
    rss_interval_s: float = Field(
        default=5.0, gt=0, le=600, allow_inf_nan=False, description="Seconds between RSS samples in the soak."
    )
    probe_timeout_s: float = Field(
        default=300.0,
        gt=0,
        allow_inf_nan=False,
        description="Longest time one probe may take (the soak gets its minutes on top).",
    )
    served_model: str | None = Field(
        default=None, description="Model name to request; default: the first one GET /v1/models lists."
    )
    model: str | None = Field(default=None, description="Embedded: model folder; default: the prepared SmolLM2.")
    dtype: str = Field(default=STABLE_DTYPE, description="Embedded: model dtype (float32 keeps greedy outputs stable).")
    max_model_len: int = Field(
        default=MAX_MODEL_LEN, ge=64, description="Embedded: the server's maximum sequence length."
    )
    startup_timeout_s: float = Field(
        default=STARTUP_TIMEOUT_S,
        gt=0,
        allow_inf_nan=False,
        description="Embedded: longest wait for the server to become healthy.",
    )


def run_stability(cfg: StabilityConfig, echo: Callable[[str], None] = print) -> tuple[Path, list]:
    """Run every probe against the embedded engine (or cfg.url) and write the
    run folder; returns (run folder, StabilityResult rows). The URL is checked
    before anything is created on disk."""
    # heavy: aiohttp and pyarrow (the server, the probes, the Parquet writers), only when a run starts;
    # `specdec --help` imports this module for StabilityConfig's defaults
    from specdec.experiments.stability.runner import probe_all
    from specdec.experiments.stability.server import EmbeddedServer, EndpointServer, require_loopback
    from specdec.replay.writing import writing_run
    from specdec.schemas.arrow import table_from_records, write_parquet_atomic

    endpoint = require_loopback(cfg.url) if cfg.url is not None else None
    settings = cfg.client_settings()
    if endpoint is None:  # the embedded server wants no key: do not send the user's
        settings = dataclasses.replace(settings, api_key=None)
    run_id, run_dir = claim_run_dir(cfg.runs_dir, cfg.run_id)

    model_source: dict = {}
    server: EmbeddedServer | EndpointServer
    if endpoint is None:
        model = cfg.model
        if model is None:
            from specdec.model import prepare_model  # deferred with the rest of the run (as above)

            prepared = prepare_model()
            model, model_source = str(prepared.path), prepared.source
        server = EmbeddedServer(
            ServerSpec(model=model, dtype=cfg.dtype, max_model_len=cfg.max_model_len, max_num_seqs=cfg.concurrency),
            run_dir,
            run_id,
            cfg.startup_timeout_s,
        )
    else:
        model, server = cfg.served_model or "(first of GET /v1/models)", EndpointServer(endpoint)

    open_run_dir(cfg.runs_dir, run_dir)
    manifest = _manifest(cfg, run_id, model, model_source, server, endpoint)
    write_manifest(run_dir, manifest)
    seq = itertools.count()

    def sink(row) -> None:
        write_parquet_atomic(table_from_records(StabilityResult, [row]), stability_part(run_dir, f"{next(seq):03d}"))

    def found(model: str, max_model_len: int | None) -> None:
        if endpoint is not None:  # embedded: keep the model folder, not the served name
            manifest.model = model
        manifest.notes.append(f"max_model_len {max_model_len if max_model_len else 'unknown'}")
        write_manifest(run_dir, manifest)

    rows: list = []
    with writing_run(run_dir, manifest):  # a `kill` cleans up like Ctrl-C: no orphaned vLLM
        try:
            if isinstance(server, EmbeddedServer):  # endpoint is None
                echo(f"starting vLLM (log: {server_log(run_dir, 'baseline')})")
                server.start_blocking()
            assert server.endpoint is not None  # an embedded server's, once started
            echo(f"probing {server.endpoint.display} (concurrency {cfg.concurrency}, soak {cfg.soak_minutes:g} min)")
            rows = asyncio.run(probe_all(cfg, server, run_id, settings, sink, echo, found))
            manifest.finished = True
        finally:
            server.stop()
    return run_dir, rows


def _manifest(cfg: StabilityConfig, run_id: str, model: str, model_source: dict, server, endpoint):
    from specdec.experiments.stability.load_faults import BURST_FACTOR  # heavy: aiohttp, as in run_stability

    embedded = endpoint is None
    arm = ArmConfig(
        name="baseline",
        speculative_config=None,
        server_args=server.server_args if embedded else [],
        endpoint="embedded" if embedded else endpoint.display,
    )
    return RunManifest(
        kind="stability",
        run_id=run_id,
        created_wall=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        specdec_version=package_version(),
        engine=installed_facts() if embedded else {"name": "external", "version": None},
        model=model,
        model_source=model_source,
        dtype=cfg.dtype if embedded else "unknown",
        arms=[arm],
        arm_difference=[],
        sampling={
            "endpoint": "/v1/chat/completions",
            "stream": True,
            "note": "each probe sets its own prompt, max_tokens and sampling on purpose; see stability.parquet",
        },
        traffic={"source": "built-in fault probes (specdec.experiments.stability.faults, soak, recovery)"},
        levels=[cfg.concurrency],
        warmup_requests=0,
        host=host_facts(),
        capture={"source": "embedded", "path": "capture/"}
        if embedded
        else {
            "source": "none",
            "reason": "external endpoint: its engine rows stay where its capture plugin writes them",
        },
        timeouts={"connect": cfg.connect_timeout_s, "request": cfg.request_timeout_s, "probe": cfg.probe_timeout_s},
        notes=[
            f"stability run: soak {cfg.soak_minutes:g} min at concurrency {cfg.concurrency}, "
            f"burst {BURST_FACTOR}x concurrency, RSS sampled every {cfg.rss_interval_s:g} s",
            "greedy reference: 3 fixed prompts sent twice each before any fault (not rows)",
        ],
    )


def fault_table(rows) -> list[dict]:
    """One entry per fault in first-seen order (the same rule as the stability mart):
    outcome = worst over its probes (failed > degraded > ok > skipped)."""
    out: dict[str, dict] = {}
    for r in rows:
        f = out.setdefault(
            r.fault,
            {
                "fault": r.fault,
                "probes": 0,
                "requests_sent": 0,
                "requests_failed": 0,
                "outcome": "skipped",
                "server_healthy_after": True,
                "detail": r.detail,
            },
        )
        f["probes"] += 1
        f["requests_sent"] += r.requests_sent
        f["requests_failed"] += r.requests_failed
        f["server_healthy_after"] &= r.server_healthy_after
        if OUTCOME_RANK[r.outcome] > OUTCOME_RANK[f["outcome"]]:
            f["outcome"], f["detail"] = r.outcome, r.detail
    return list(out.values())


def table_text(rows) -> str:
    lines = [f"{'fault':<22} {'outcome':<9} {'sent':>5} {'failed':>6}  healthy  detail"]
    for f in fault_table(rows):
        lines.append(
            f"{f['fault']:<22} {f['outcome']:<9} {f['requests_sent']:>5} {f['requests_failed']:>6}  "
            f"{'yes' if f['server_healthy_after'] else 'NO':<7}  {f['detail']}"
        )
    return "\n".join(lines)
