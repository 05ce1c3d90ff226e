"""One replay run from start to files: run folder, manifest, servers, arms,
and the final consolidation of part files. The folder's layout and every
file name are defined in ``specdec.runfolder``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from pathlib import Path

from specdec.arms import ArmSpec, comparisons, specs_of
from specdec.engines import Arm, LlamaCpp, Vllm
from specdec.engines.llama_build import LLAMA_CPP_PYTHON, build_llama_server, cached_llama_server
from specdec.engines.server import LlamaServer, LocalServer, ServerSpec, start_all
from specdec.engines.urls import parse_endpoint
from specdec.errors import SpecdecError
from specdec.model import GGUF_DIST, find_gguf, prepare_model
from specdec.replay import event_loop
from specdec.replay.capture_import import import_capture
from specdec.replay.client import CHAT_PATH
from specdec.replay.config import DEFAULT_API_KEY_ENV, ReplayConfig
from specdec.replay.host import engine_facts, host_facts, package_version
from specdec.replay.load import plans as load_plans
from specdec.replay.load import summary as load_summary
from specdec.replay.passes.lossless import eos_ids_for_model
from specdec.replay.progress import Progress
from specdec.replay.recording import recording
from specdec.replay.runner import Replayer, level_rows, request_id_prefix
from specdec.replay.traffic import load_traffic
from specdec.replay.traffic_mix import unknown_categories
from specdec.replay.traffic_profile import manifest_traffic
from specdec.runfolder import (
    capture_dir,
    claim_run_dir,
    open_run_dir,
    server_log,
    write_manifest,
)
from specdec.schemas.records import ArmConfig, RunManifest

log = logging.getLogger("specdec.replay")


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
    if not cfg.external and cfg.model is not None:
        engines = set(cfg.arm_engines().values())
        if len(engines) > 1:
            raise SpecdecError(
                f"--model {cfg.model}: the arms run {' and '.join(sorted(engines))}, which serve "
                "different files (a model folder, a GGUF); leave --model out to serve the "
                "prepared SmolLM2 on each"
            )
        if engines == {"llama.cpp"} and not Path(cfg.model).is_file():
            raise SpecdecError(f"--model {cfg.model}: no such GGUF file (llama.cpp serves a .gguf file)")
        if engines == {"vllm"} and not Path(cfg.model).is_dir():
            raise SpecdecError(f"--model {cfg.model}: no such model folder")


def run_replay(cfg: ReplayConfig) -> Path:
    max_model_len = None if cfg.external else ServerSpec.max_model_len
    traffic = load_traffic(cfg.traffic, max_model_len=max_model_len)
    unknown = unknown_categories(cfg.mix, traffic.categories) if cfg.mix else None
    if unknown:
        raise SpecdecError(f"--mix: {unknown}")
    _check_inputs(cfg, max_model_len)
    load_plans(cfg, traffic, level_rows(traffic, cfg))  # an unfit file for the load mode stops the run here
    run_id, run_dir = claim_run_dir(cfg.runs_dir, cfg.run_id)

    engines = set(cfg.arm_engines().values())
    model_sources: dict[str, dict] = {}
    models: dict[str, str] = {}  # engine -> what its servers serve
    llama = spec = None
    if cfg.external:
        models[cfg.engine] = cfg.served_model
    if not cfg.external and "llama.cpp" in engines:
        gguf = cfg.model or str(find_gguf())
        models["llama.cpp"] = gguf
        model_sources["llama.cpp"] = {
            "package": GGUF_DIST,
            "file": Path(gguf).name,
            "note": "served as shipped, no conversion",
        }
        # one slot per request in flight; -c is the whole context, shared by the slots
        slots = max(cfg.levels)
        llama = LlamaCpp(
            build_llama_server().path,
            threads=2,
            context=LLAMA_SLOT_CONTEXT * slots,
            slots=slots,
            prompt_cache=cfg.prefix_cache == "keep",
        )
    if not cfg.external and "vllm" in engines:
        folder = cfg.model
        if folder is None:
            prepared = prepare_model()
            folder = str(prepared.path)
            model_sources["vllm"] = prepared.source
        models["vllm"] = folder
        spec = ServerSpec(
            model=folder,
            dtype=cfg.dtype,
            max_num_seqs=max(cfg.max_num_seqs, max(cfg.levels)),
            prefix_cache=cfg.prefix_cache,
        )
    model = " + ".join(models[e] for e in sorted(models)) if len(models) > 1 else next(iter(models.values()))
    model_source = (
        next(iter(model_sources.values()))
        if len(model_sources) == 1
        else {e: src for e, src in sorted(model_sources.items())}
    )

    arms = [_arm_config(cfg, arm, spec, llama, models) for arm in cfg.arm_specs()]
    eos_ids = None
    if spec is not None and (cfg.lossless_pass or cfg.samples):  # both passes look up natural ends
        eos_ids = eos_ids_for_model(spec.model)
    rows = level_rows(traffic, cfg)
    no_plugin = (
        "llama.cpp has no capture plugin: no per-round rows; the per-request draft stats (timings) and "
        "the engine's counters are recorded"
    )
    if llama is not None and spec is None:
        capture = {"source": "none", "reason": no_plugin}
    elif cfg.external:
        capture = (
            {"source": "directory", "path": str(cfg.capture_dir)}
            if cfg.capture_dir
            else {
                "source": "none",
                "reason": "external servers and no --capture-dir: their rounds stay in "
                "their own capture folder, if they run the plugin at all",
            }
        )
    else:
        capture = {"source": "embedded", "path": str(capture_dir(run_dir))}
        if llama is not None:
            capture["arms_without_rounds"] = [a.name for a in arms if a.engine == "llama.cpp"]
            capture["reason"] = f"the vLLM arms' rounds; {no_plugin}"
    facts = {}
    if cfg.external:
        facts = {"name": "external", "version": None, "adapter": cfg.engine}
    else:
        if spec is not None:
            facts["vllm"] = engine_facts()
        if llama is not None:
            facts["llama.cpp"] = llama_facts(llama)
        facts = next(iter(facts.values())) if len(facts) == 1 else {"name": "mixed", **facts}
    dtype = {"vllm": cfg.dtype, "llama.cpp": f"GGUF as shipped ({Path(models.get('llama.cpp', '')).name})"}
    per_engine = (
        {}
        if cfg.external or len(models) < 2
        else {
            e: {"model": models[e], "dtype": dtype[e], "model_source": model_sources.get(e, {})} for e in sorted(models)
        }
    )
    manifest = RunManifest(
        run_id=run_id,
        created_wall=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        specdec_version=package_version(),
        engine=facts,
        model=model,
        model_source=model_source,
        dtype=(
            "unknown"
            if cfg.external
            else "; ".join(f"{e}: {dtype[e]}" for e in sorted(engines))
            if len(engines) > 1
            else dtype[next(iter(engines))]
        ),
        engines=per_engine,
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
        concurrency_levels=cfg.levels,
        warmup_requests=cfg.warmup_requests,
        host=host_facts(),
        max_error_rate=cfg.max_error_rate,
        margin=cfg.margin,
        capture=capture,
        timeouts={"connect_s": cfg.connect_timeout_s, "request_s": cfg.request_timeout_s},
        schedule={
            "repeats": cfg.repeats,
            "load": load_summary(cfg),
            "order": (
                "repeat-major: fresh embedded servers before every repeat after the first, then every "
                "level with the arms counterbalanced by repeat and level (A B, B A, ...)"
                if cfg.restart_servers == "repeat" and not cfg.external and cfg.repeats > 1
                else "per level, repeats with the arms counterbalanced (A B, B A, A B, ...), all servers up"
            ),
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
                "off": "embedded servers run with --no-enable-prefix-caching (vLLM) or --no-cache-prompt (llama.cpp)",
                "keep": "nothing done: a block may be faster because an earlier one warmed the cache",
            }[cfg.prefix_cache],
        },
        notes=(
            [
                "--per-request-spec-decode-metrics is part of the speculative setting: vLLM rejects it without "
                "speculation."
            ]
            if "vllm" in engines
            else []
        )
        + (
            [
                "llama.cpp: no greedy lossless pass (its logprobs are not vLLM's); prefix cache "
                f"'{'off' if cfg.prefix_cache == 'reset' else cfg.prefix_cache}' ('off': --no-cache-prompt on its arms, "
                "as llama.cpp has no endpoint to empty the cache between blocks)."
            ]
            if "llama.cpp" in engines
            else []
        )
        + (
            [
                "A/A run: --spec-config null, both arms are the same embedded server (or the two given URLs); "
                "no speedup should be labelled faster or slower."
            ]
            if cfg.speculative_config is None and cfg.named_arms is None
            else []
        )
        + (
            [
                f"Named arms: {'; '.join(comparison_note(arms))}. Each comparison is analysed as its own run "
                "<run_id>/<arm> (specdec.arms)."
            ]
            if cfg.named_arms is not None
            else []
        )
        + (
            ["External servers: the speculative setting is as declared by the user (--spec-config), not verified."]
            if cfg.external
            else []
        ),
    )
    open_run_dir(cfg.runs_dir, run_dir)
    write_manifest(run_dir, manifest)

    with recording(run_dir, manifest):  # SIGTERM = Ctrl-C; parts merged, manifest written, however it ends
        with (
            Progress(cfg.progress) as progress,
            EmbeddedServers(
                cfg, spec, arms, run_dir, run_id, progress, llama=llama, model=models.get("llama.cpp")
            ) as servers,
        ):
            endpoints = (
                servers.start() if not cfg.external else {arm.name: getattr(cfg, f"{arm.name}_url") for arm in arms}
            )
            if cfg.external:
                for arm in arms:
                    progress.message(f"{arm.name} arm: {arm.endpoint}")
            restart = servers.restart if servers.restarts else None
            runner = Replayer(cfg, run_id, run_dir, traffic, progress, eos_token_ids=eos_ids, pid_of=servers.pid_of)
            event_loop.run(runner.run(endpoints, restart=restart))
            if cfg.capture_dir is not None:
                progress.message(f"importing this run's captured rounds from {cfg.capture_dir}")
                manifest.capture = import_capture(
                    cfg.capture_dir, run_dir, run_id, request_id_prefix(run_id), cfg.capture_wait_s
                )
        manifest.finished = True
    return run_dir


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
        spec: ServerSpec | None,
        arms: list[ArmConfig],
        run_dir: Path,
        run_id: str,
        progress: Progress,
        llama=None,
        model: str | None = None,
    ):
        self.cfg, self.spec, self.arms, self.run_dir, self.run_id = cfg, spec, arms, run_dir, run_id
        self.progress = progress
        self.llama, self.model = llama, model  # the llama.cpp adapter and GGUF when the engine is llama-server
        self.restarts = not cfg.external and cfg.restart_servers == "repeat" and cfg.repeats > 1
        self._stack = contextlib.ExitStack()
        self._servers: dict[str, LocalServer] = {}  # arm -> the server started for it (shared in A/A)

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
            if engines[arm.name] == "llama.cpp":
                self.progress.message(f"starting llama-server for the {arm.name} arm{when} (log: {log})")
                srv = LlamaServer(
                    Arm(arm.name, arm.speculative_config), Path(self.model), log, self.llama, self.cfg.startup_timeout_s
                )
            else:
                self.progress.message(f"starting vLLM for the {arm.name} arm{when} (log: {log})")
                srv = LocalServer(
                    self.spec,
                    arm.speculative_config,
                    capture_dir(self.run_dir),
                    self.run_id,
                    log,
                    self.cfg.startup_timeout_s,
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


#: llama.cpp: context per slot (-c is the slots' total), the same as vLLM's max_model_len
LLAMA_SLOT_CONTEXT = ServerSpec.max_model_len


def llama_facts(llama) -> dict:
    """The manifest's engine facts for the embedded llama-server."""
    return {
        "name": "llama.cpp",
        "version": f"llama-cpp-python {LLAMA_CPP_PYTHON} sdist (llama.cpp 0c1e570)",
        "binary": str(llama.binary or cached_llama_server()),
        "threads": llama.threads,
        "slots": llama.slots,
        "context": llama.context,
    }


def _arm_config(
    cfg: ReplayConfig, arm: ArmSpec, spec: ServerSpec | None, llama=None, models: dict[str, str] | None = None
) -> ArmConfig:
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
    engine, model = (llama, models["llama.cpp"]) if arm.engine == "llama.cpp" else (Vllm(spec), spec.model)
    return ArmConfig(
        name=arm.name,
        speculative_config=spec_cfg,
        server_args=engine.server_args(Arm(arm.name, spec_cfg), model=model),
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
    out, i = [], 0
    while i < len(args):
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            out.append((args[i], args[i + 1]))
            i += 2
        else:
            out.append((args[i],))
            i += 1
    return out
