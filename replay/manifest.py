"""The run manifest of a replay, built in one place: every field of
``schemas.records.RunManifest`` that a replay fills, from its settings, its
traffic, its arms and its embedded engines (``embedded.py``), so that the run
(``experiment.py``) only writes it and marks it finished.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from specdec.arms import ArmSpec, comparisons, specs_of
from specdec.engines import EMBEDDED, ENGINES, Arm, EmbeddedEngine
from specdec.http.urls import parse_endpoint
from specdec.replay.config import ReplayConfig
from specdec.replay.embedded import engine_names
from specdec.replay.host import host_facts, package_version
from specdec.replay.http.client import CHAT_PATH
from specdec.replay.load.modes import summary as load_summary
from specdec.runfolder import capture_dir
from specdec.schemas.records import ArmConfig, RunManifest, TrafficRow
from specdec.traffic import Traffic
from specdec.traffic.profile import manifest_traffic


def build_manifest(
    cfg: ReplayConfig,
    run_id: str,
    run_dir: Path,
    traffic: Traffic,
    rows: list[TrafficRow],
    engines: dict[str, EmbeddedEngine],
    arms: list[ArmConfig],
) -> RunManifest:
    """The manifest of a run about to start (``finished`` stays False until it ends)."""
    return RunManifest(
        run_id=run_id,
        created_wall=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        specdec_version=package_version(),
        engine=_engine_facts(cfg, engines),
        model=_model(cfg, engines),
        model_source=_model_source(engines),
        dtype=_dtype(cfg, engines),
        engines=(
            {}
            if len(engines) < 2
            else {
                name: {"model": e.model, "dtype": e.dtype_text(), "model_source": e.model_source}
                for name, e in sorted(engines.items())
            }
        ),
        arms=arms,
        arm_difference=arm_difference(arms),
        sampling={
            "endpoint": CHAT_PATH,
            "stream": True,
            "ignore_eos": True,
            "forced_length": "every request is sent with ignore_eos and max_tokens = its row's max_tokens "
            "(a recording's response length), stop strings left out, so both arms do "
            "the same work; the row's messages, top_p, top_k, seed, response_format and "
            "tools are sent as recorded",
            "temperatures": sorted({r.temperature for r in rows}),
            "max_tokens": sorted({r.max_tokens for r in rows}),
        },
        traffic=manifest_traffic(traffic),
        mix=cfg.mix,
        levels=cfg.levels,
        warmup_requests=cfg.warmup_requests,
        host=host_facts(),
        max_error_rate=cfg.max_error_rate,
        margin=cfg.margin,
        capture=_capture(cfg, run_dir, engines, arms),
        timeouts={"connect_s": cfg.connect_timeout_s, "request_s": cfg.request_timeout_s},
        schedule=_schedule(cfg),
        notes=_notes(cfg, arms),
        design="sequential" if cfg.sequential else "fixed",
        max_repeats=cfg.max_repeats,
        budget_minutes=cfg.budget_minutes,
        looks=[] if cfg.sequential else None,  # the run writes each look here as it is taken
    )


def _engine_facts(cfg: ReplayConfig, engines: dict[str, EmbeddedEngine]) -> dict[str, Any]:
    if cfg.external:
        return {"name": "external", "version": None, "adapter": cfg.engine}
    facts = {name: e.facts() for name, e in engines.items()}  # vLLM first (embedded.engine_names)
    return next(iter(facts.values())) if len(facts) == 1 else {"name": "mixed", **facts}


def _model(cfg: ReplayConfig, engines: dict[str, EmbeddedEngine]) -> str:
    if cfg.external:
        return cfg.served_model
    return " + ".join(e.model for _, e in sorted(engines.items()))


def _model_source(engines: dict[str, EmbeddedEngine]) -> dict[str, Any]:
    sources = {name: e.model_source for name, e in sorted(engines.items()) if e.model_source}
    return next(iter(sources.values())) if len(sources) == 1 else sources


def _dtype(cfg: ReplayConfig, engines: dict[str, EmbeddedEngine]) -> str:
    if cfg.external:
        return "unknown"
    if len(engines) == 1:
        return next(iter(engines.values())).dtype_text()
    return "; ".join(f"{name}: {e.dtype_text()}" for name, e in sorted(engines.items()))


def _capture(
    cfg: ReplayConfig, run_dir: Path, engines: dict[str, EmbeddedEngine], arms: list[ArmConfig]
) -> dict[str, Any]:
    """Where the run's per-round rows come from, and which arms have none (and why)."""
    if cfg.external:
        if cfg.capture_dir:
            return {"source": "directory", "path": str(cfg.capture_dir)}
        return {
            "source": "none",
            "reason": "external servers and no --capture-dir: their rounds stay in "
            "their own capture folder, if they run the plugin at all",
        }
    without = {name for name, e in engines.items() if not e.writes_rounds}
    why = "; ".join(dict.fromkeys(engines[name].no_rounds_reason for name in sorted(without)))
    if not any(e.writes_rounds for e in engines.values()):
        return {"source": "none", "reason": why}
    capture: dict[str, Any] = {"source": "embedded", "path": str(capture_dir(run_dir))}
    if without:
        capture["arms_without_rounds"] = [a.name for a in arms if a.engine in without]
        writers = " and ".join(e.label for e in engines.values() if e.writes_rounds)
        capture["reason"] = f"the {writers} arms' rounds; {why}"
    return capture


def _order(cfg: ReplayConfig) -> str:
    """The block order in words (``replay/load/schedule.py``)."""
    restarts = cfg.restart_servers == "repeat" and not cfg.external and cfg.repeats > 1
    if cfg.sequential:
        servers = "fresh embedded servers before every repeat after the first" if restarts else "all servers up"
        return (
            f"sequential, repeat-major ({servers}): every open level per repeat with the arms counterbalanced "
            f"by repeat and level (A B, B A, ...); a look after repeat {cfg.repeats} and after every one "
            f"after it, up to {cfg.max_repeats}, closes the decided levels (manifest looks)"
        )
    if restarts:
        return (
            "repeat-major: fresh embedded servers before every repeat after the first, then every "
            "level with the arms counterbalanced by repeat and level (A B, B A, ...)"
        )
    return "per level, repeats with the arms counterbalanced (A B, B A, A B, ...), all servers up"


def _schedule(cfg: ReplayConfig) -> dict[str, Any]:
    return {
        "repeats": cfg.repeats,
        "load": load_summary(cfg),
        "order": _order(cfg),
        "restart_servers": cfg.restart_servers if not cfg.external else "never (external servers)",
        "lossless_pass": cfg.lossless_pass,
        "lossless_pass_note": "greedy lossless pass per arm after each level, with token ids and top-2 "
        "logprobs, apart from the timed requests so logprobs cannot perturb timing",
        "samples": cfg.samples,
        "samples_note": "rows with temperature > 0: each prompt once per seed of derive_seeds(0, samples), "
        "the same seeds in every arm, logprobs on, after each level",
        "prefix_cache": cfg.prefix_cache,
        "prefix_cache_note": {
            "reset": "POST /reset_prefix_cache before every block (embedded servers run "
            "with VLLM_SERVER_DEV_MODE=1); the before-snapshot says if it worked",
            "off": "embedded servers run with "
            + " or ".join(f"{ENGINES[n].prefix_cache_off_flag} ({EMBEDDED[n].label})" for n in engine_names(cfg)),
            "keep": "nothing done: a block may be faster because an earlier one warmed the cache",
        }[cfg.prefix_cache],
    }


def _notes(cfg: ReplayConfig, arms: list[ArmConfig]) -> list[str]:
    notes = [
        note for name in engine_names(cfg) for note in EMBEDDED[name].notes(cfg.prefix_cache)
    ]  # external servers too
    if cfg.speculative_config is None and cfg.named_arms is None:
        notes.append(
            "A/A run: --spec-config null, both arms are the same embedded server (or the two given URLs); "
            "no speedup should be labelled faster or slower."
        )
    if cfg.named_arms is not None:
        notes.append(
            f"Named arms: {'; '.join(comparison_note(arms))}. Each comparison is analysed as its own run "
            "<run_id>/<arm> (specdec.arms)."
        )
    if cfg.external:
        notes.append(
            "External servers: the speculative setting is as declared by the user (--spec-config), not verified."
        )
    return notes


def arm_config(cfg: ReplayConfig, arm: ArmSpec, engines: dict[str, EmbeddedEngine]) -> ArmConfig:
    """An arm as the manifest records it; an embedded one's ``server_args`` are its engine
    adapter's (``specdec/engines``), the settings its server starts with."""
    spec_cfg = None if arm.speculation is None else dict(arm.speculation)
    named = {"engine": arm.engine, "reference": arm.reference} if cfg.named_arms is not None else {}
    if cfg.external:
        ep = parse_endpoint(getattr(cfg, f"{arm.name}_url"))
        return ArmConfig(
            name=arm.name,
            speculative_config=spec_cfg,
            server_args=[],
            endpoint=ep.display,
            speculative_config_source="declared" if spec_cfg else "none",
            **named,
        )
    return ArmConfig(
        name=arm.name,
        speculative_config=spec_cfg,
        server_args=engines[arm.engine].server_args(Arm(arm.name, spec_cfg)),
        endpoint="embedded",
        speculative_config_source="launched" if spec_cfg else "none",
        **named,
    )


def _comparison_pairs(arms: list[ArmConfig]) -> list[tuple[ArmConfig, ArmConfig]]:
    """(reference, treatment) per comparison of the arms (specdec.arms); the first two arms
    when none is (an A/A run)."""
    by_name = {a.name: a for a in arms}
    pairs = [(by_name[c.reference], by_name[c.treatment]) for c in comparisons(specs_of(arms))]
    return pairs or ([(arms[0], arms[1])] if len(arms) >= 2 else [])


def comparison_note(arms: list[ArmConfig]) -> list[str]:
    return [f"{t.name} against {r.name}" for r, t in _comparison_pairs(arms)]


def arm_difference(arms: list[ArmConfig]) -> list[str]:
    """Arguments that appear in one arm's server command but not in its reference's: per
    comparison (prefixed 'treatment vs reference: ' when the run has named arms)."""
    out = []
    for ref, arm in _comparison_pairs(arms):
        a, b = set(_pairs(ref.server_args)), set(_pairs(arm.server_args))
        diff = sorted(" ".join(p) for p in a ^ b)
        classic = {ref.name, arm.name} <= {"baseline", "speculative"}
        out += diff if classic else [f"{arm.name} vs {ref.name}: {d}" for d in diff]
    return out


def _pairs(args: list[str]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    i = 0
    while i < len(args):
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            out.append((args[i], args[i + 1]))
            i += 2
        else:
            out.append((args[i],))
            i += 1
    return out
