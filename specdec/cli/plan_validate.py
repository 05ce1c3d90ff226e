"""``specdec plan RUN --validate``: replay the plan's settings and compare.

The replay measures the system the plan is about. A run recorded on the embedded engine: a
``--sweep-k`` run of the planned run's traffic at the plan's levels, with k0 and every k the
deployed policy uses plus one rejected k (``analytics.plan.validate.validation_ks``), on the
embedded engine of the planned run (the prepared model). A run recorded against external servers
(its manifest's engine is ``external``): the classic pair against the servers named by
``--baseline-url`` and ``--speculative-url`` (their speculation as the planned run declared it,
its capture folder for their rounds); without both URLs it is refused by name, before anything
starts, never replayed on the embedded engine instead (``validation_target``). Either way with the
planned run's own design as its manifest records it (``replay_design``: repeats, 2 or more;
the forced output length; dtype; warm-up; lossless pass and sampling; server restarts; prefix
cache; timeouts; error rate and margin), so the replay measures the workload the plan was
predicted for. Its database is built, and ``plan_validation`` compares each measured
cell with its prediction. ``--validate-with RUN2`` compares with a run made already (a sweep of
the same traffic and levels) instead of replaying; a k the replay would have run that such a
run lacks is named (``ks_planned_not_measured``) and the plan does not pass. A validation run in
which no request succeeded is ``not validated``, with the reason (``outcome``, ``reason``). This module
orchestrates replay and analytics, which may not import each other; only the CLI layer sees
both.
"""

from __future__ import annotations

from pathlib import Path
from typing import get_args

from specdec.analytics.plan.validate import measured_speedups, outcome, request_health, validation, validation_ks
from specdec.cli.sweep import sweep_arms
from specdec.engines import DEFAULT_ENGINE, ENGINES, EngineName
from specdec.errors import SpecdecError
from specdec.runfolder import read_manifest

__all__ = [
    "Endpoints",
    "replay_design",
    "replay_validation",
    "validate_against",
    "validation_config",
    "validation_target",
]

#: --baseline-url and --speculative-url of a validation against external servers (None, None: embedded)
Endpoints = tuple[str | None, str | None]


def _engine_named(name: object) -> EngineName:
    """The engine a plan or manifest names; the default engine where it names none that specdec
    runs (an older plan, an external server of unknown kind)."""
    return next((n for n in get_args(EngineName) if n == name), DEFAULT_ENGINE)


def _recorded_external(manifest) -> bool:
    return str((manifest.engine or {}).get("name")) == "external"


def validation_target(run_dir: Path, urls: Endpoints = (None, None)) -> Endpoints:
    """The servers a validation of ``run_dir``'s plan replays: the given URLs for a run recorded
    against external servers (both required), none for an embedded run (URLs refused). Checked
    before planning, so a refusal starts nothing."""
    manifest = read_manifest(run_dir)
    given = [u for u in urls if u]
    if not _recorded_external(manifest):
        if given:
            raise SpecdecError(
                f"{run_dir} was recorded on the embedded engine: --validate replays that engine; "
                "--baseline-url/--speculative-url are for a run recorded against external servers"
            )
        return (None, None)
    if len(given) != 2:
        recorded = ", ".join(f"{a.name} at {a.endpoint}" for a in manifest.arms) or "no arms"
        raise SpecdecError(
            f"{run_dir} was recorded against external servers ({recorded}): --validate replays the servers "
            "the plan is about and needs --baseline-url and --speculative-url (the servers to measure, "
            "the speculative one running the plan's setting); it does not fall back to the embedded engine"
        )
    return urls


def validation_config(plan: dict, run_dir: Path, runs_dir: Path, urls: Endpoints = (None, None)):
    """The ReplayConfig of the validation replay (not started)."""
    from specdec.replay.config import ReplayConfig  # heavy: the replay's config and its imports

    urls = validation_target(run_dir, urls)
    manifest = read_manifest(run_dir)
    if urls != (None, None):
        return _external_config(plan, manifest, runs_dir, urls)
    ks = validation_ks(plan)
    if not ks:
        raise SpecdecError("the plan turns speculation off everywhere and has no other k: nothing to replay")
    treatment = next((a for a in manifest.arms if a.speculative_config is not None), None)
    engine = (treatment.engine if treatment and treatment.engine else None) or _engine_named(plan["engine"])
    spec = dict(treatment.speculative_config) if treatment and treatment.speculative_config else None
    traffic = Path(str(manifest.traffic.get("path", "")))
    if not traffic.is_file():
        raise SpecdecError(f"the planned run's traffic file {traffic} is not there to replay")
    return ReplayConfig(
        traffic=traffic,
        runs_dir=runs_dir,
        levels=list(plan["levels"]),
        named_arms=sweep_arms(engine, [0, *ks], spec),
        **replay_design(manifest),
    )


def _external_config(plan: dict, manifest, runs_dir: Path, urls: Endpoints):
    """The classic pair against the given servers, as the planned run declared them: their engine
    adapter, the speculative arm's declared setting, the capture folder their plugin writes to."""
    from specdec.replay.config import ReplayConfig  # heavy: the replay's config and its imports

    treatment = next((a for a in manifest.arms if a.speculative_config is not None), None)
    capture = manifest.capture or {}
    traffic = Path(str(manifest.traffic.get("path", "")))
    if not traffic.is_file():
        raise SpecdecError(f"the planned run's traffic file {traffic} is not there to replay")
    design = replay_design(manifest)
    for embedded_only in ("restart_servers", "dtype"):  # 'never (external servers)', 'unknown'
        design.pop(embedded_only, None)
    return ReplayConfig(
        traffic=traffic,
        runs_dir=runs_dir,
        levels=list(plan["levels"]),
        engine=_engine_named((manifest.engine or {}).get("adapter")),
        speculative_config=dict(treatment.speculative_config) if treatment else None,
        baseline_url=urls[0],
        speculative_url=urls[1],
        served_model=manifest.model,
        capture_dir=Path(capture["path"]) if capture.get("source") == "directory" else None,
        **design,
    )


def replay_design(manifest) -> dict:
    """The ReplayConfig settings of the planned run that its manifest records. The forced output
    length: the one max_tokens every request was sent with (an override or every row's own, the
    same requests either way); with several, each row's own (no override)."""
    schedule = manifest.schedule or {}
    sent = (manifest.sampling or {}).get("max_tokens") or []
    design = {
        "repeats": max(2, int(schedule.get("repeats", 2))),
        "max_tokens": int(sent[0]) if len(sent) == 1 else None,
        "dtype": manifest.dtype,
        "warmup_requests": manifest.warmup_requests,
        "max_error_rate": manifest.max_error_rate,
        "margin": manifest.margin,
        "connect_timeout_s": manifest.timeouts.get("connect_s"),
        "request_timeout_s": manifest.timeouts.get("request_s"),
    }
    for key in ("lossless_pass", "samples", "restart_servers", "prefix_cache"):
        design[key] = schedule.get(key)
    return {k: v for k, v in design.items() if v is not None}


def replay_validation(plan: dict, run_dir: Path, runs_dir: Path, urls: Endpoints = (None, None)) -> Path:
    """Run the validation replay (the external servers given, else the embedded engine); its run folder."""
    from specdec.model import bundled_model  # heavy: model preparation
    from specdec.replay.experiment import run_replay  # heavy: aiohttp, the engines

    cfg = validation_config(plan, run_dir, runs_dir, urls)
    if cfg.external:
        return run_replay(cfg)
    kinds = {ENGINES[a.engine].model_kind for a in cfg.arm_specs()}
    # one engine, or engines that serve one kind of file: that file; else the model folder
    model = str(bundled_model(kinds.pop() if len(kinds) == 1 else "folder"))
    return run_replay(cfg.model_copy(update={"model": model}))


def validate_against(plan: dict, validation_run: Path) -> dict:
    """plan_validation from a validation run folder (built here)."""
    import duckdb  # heavy: only when validating

    from specdec.analytics.build import build

    db = build(Path(validation_run))
    con = duckdb.connect(str(db), read_only=True)
    try:
        out = validation(plan, measured_speedups(con))
        health = request_health(con)
    finally:
        con.close()
    out["validation_run"] = str(validation_run)
    # the k whose cells were compared; a run made already (--validate-with) may lack some k the
    # plan deploys, and those are named, not counted as validated
    out["ks_validated"] = sorted({r["k"] for r in out["cells"]})
    out["ks_planned_not_measured"] = [k for k in validation_ks(plan) if k not in out["ks_validated"]]
    out["passed"] = out["passed"] and not out["ks_planned_not_measured"]
    out["requests"] = health
    out["outcome"], out["reason"] = outcome(out, health)
    return out
