"""``specdec compat``'s run: validate the settings, run the tokenizer preflight
when a draft model is named, start the embedded pair of each engine (or take
the user's two URLs), send the probe set to both arms, and write the run
folder: ``compat.parquet`` (one ``CompatCell`` per cell) and a manifest of
kind ``compat`` whose ``traffic.probes`` holds every probe's request bodies.

Embedded pairs are started with the servers' own starters
(``specdec.engines.vllm.VllmServer`` for vLLM CPU, ``specdec.engines.llama_cpp.LlamaServer``
for llama.cpp), the speculative arm with each engine's prompt lookup
(``Engine.probe_speculation``: vLLM's ngram k=4, llama.cpp's ngram-mod with 4-token matches), float32 for vLLM so that speculation changes no
greedy token. vLLM's capture plugin writes into ``compat-capture/``; once
the pair has stopped, ``capture_check`` reconciles each cell's captured rows
with the counters around its requests (llama.cpp and a user's pair: not
captured). The build does not read those rows as rounds of a replay.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from specdec.defaults import RUNS_DIR, STARTUP_TIMEOUT_S
from specdec.engines import DEFAULT_ENGINE, EMBEDDED, ENGINE_NAMES, ENGINES, EngineName
from specdec.errors import SpecdecError
from specdec.experiments.compat.lossless_cells import LEVELS as LOSSLESS_LEVELS
from specdec.experiments.compat.sampling_cells import LEVELS as SAMPLING_LEVELS
from specdec.experiments.compat.stopping import keeping
from specdec.experiments.compat.timing import DEFAULT_REPEATS
from specdec.experiments.compat.together import Book, Checkpoint, never, side_by_side
from specdec.model import bundled_model
from specdec.replay.config import ClientOptions
from specdec.replay.host import host_facts, package_version
from specdec.runfolder import claim_run_dir, point_latest, server_log, write_manifest
from specdec.schemas.compat import OUTCOMES, CompatCell
from specdec.schemas.records import ArmConfig, RunManifest
from specdec.schemas.strict import MAX_LEVEL, RunName

#: where the embedded vLLM pair's capture plugin writes (``capture_check`` reads it after the pair stops)
CAPTURE_FOLDER = "compat-capture"
EngineChoice = EngineName | Literal["both"]
#: The manifest's note when the two embedded engines were probed at the same time (``together``).
TOGETHER_NOTE = (
    "vLLM and llama.cpp probed at the same time (specdec.experiments.compat.together): each engine one request "
    "at a time on its own pair; the other engine's requests are host load that both arms of a pair see"
)


class CompatConfig(ClientOptions):
    """The validated settings of one ``specdec compat`` run."""

    baseline_url: str | None = Field(default=None, description="The user's server without speculation.")
    speculative_url: str | None = Field(default=None, description="The user's server with speculation.")
    engine: EngineChoice | None = Field(default=None, description="Embedded pair(s) to start when no URLs are given.")
    runs_dir: Path = Field(default=RUNS_DIR, description="Parent folder of the run folder.")
    run_id: RunName | None = Field(default=None, description="Run folder name; default: UTC timestamp.")
    draft_model: Path | None = Field(
        default=None, description="A draft model folder: its tokenizer is checked against target_model's first."
    )
    target_model: Path | None = Field(
        default=None, description="The target model folder of the preflight (embedded vLLM: the prepared SmolLM2)."
    )
    probes: list[str] | None = Field(
        default=None, description="Probe names to send (default: all; 'quantization': every quantization cell)."
    )
    quantization: bool = Field(
        default=True,
        description="Embedded llama.cpp: add the quantization cells (target Q4_1, Q8_0, F16 x draft Q4_1, Q8_0, "
        "ngram-mod; specdec.experiments.compat.quant_run).",
    )
    startup_timeout_s: float = Field(default=STARTUP_TIMEOUT_S, gt=0, description="Embedded: longest server start.")
    together: bool = Field(
        default=False,
        description="--engine both: the embedded llama.cpp engine's work runs in a thread beside the vLLM pair's "
        "(specdec.experiments.compat.together; --engines-together): 8-9 minutes against 12 min 49 s here on 2026-12-03 "
        "(one after the other: 9 min 24 s since the vLLM workers got a core each), but the "
        "speedup intervals widen 2-7x and a 2-pair cell can be labelled by the other engine's noise; False (the "
        "default): one engine after the other.",
    )
    sampling_levels: list[int] = Field(
        default_factory=lambda: list(SAMPLING_LEVELS),
        description="Levels (requests in flight) of the sampling-distribution cells, each arm sampling the same "
        "seeded prompts, re-scored on the baseline and compared by the permutation test "
        "(specdec.experiments.compat.sampling_cells); empty: none.",
    )
    lossless_levels: list[int] = Field(
        default_factory=lambda: list(LOSSLESS_LEVELS),
        description="Levels (requests in flight) of the lossless cells: greedy token ids and top-2 logprobs per "
        "arm, each pair identical, a near-tie or suspect (specdec.experiments.compat.lossless_cells); empty: none.",
    )
    draft_pair: bool = Field(
        default=False,
        description="Embedded engines that can draft with the target's own file (llama.cpp): also probe every "
        "feature on a draft-model pair (--draft-pair; off by default: about as long again as the engine's ngram "
        "pair, the draft being as large as the target).",
    )
    repeats: int = Field(
        default=DEFAULT_REPEATS,
        ge=1,
        le=20,
        description="Times each feature probe's requests are sent per arm, paired and interleaved (2 or more: a "
        "speedup interval per cell).",
    )

    @model_validator(mode="after")
    def _sampling_levels(self) -> CompatConfig:
        for what, levels in (("sampling", self.sampling_levels), ("lossless", self.lossless_levels)):
            bad = [x for x in levels if not 1 <= x <= MAX_LEVEL]
            if bad or len(set(levels)) != len(levels):
                raise ValueError(
                    f"{what} levels must be distinct, each 1 to {MAX_LEVEL} requests in flight; got {levels}"
                )
        return self

    @model_validator(mode="after")
    def _one_target(self) -> CompatConfig:
        urls = (self.baseline_url is None, self.speculative_url is None)
        if urls[0] != urls[1]:
            raise ValueError("give both --baseline-url and --speculative-url, or neither")
        if self.baseline_url is not None and self.engine is not None:
            raise ValueError("--engine starts embedded servers; it does not go with --baseline-url/--speculative-url")
        if self.baseline_url is None and self.engine is None:
            self.engine = DEFAULT_ENGINE
        # the default target is the prepared model folder: an engine that serves another file needs one named
        folders = all(ENGINES[e].model_kind == "folder" for e in self.embedded_engines())
        if self.draft_model is not None and self.target_model is None and not folders:
            raise ValueError("--draft-model needs --target-model (the folder whose tokenizer the target serves)")
        return self

    def embedded_engines(self) -> list[str]:
        """The engines whose embedded pairs the run starts (none with the user's URLs)."""
        if self.baseline_url is not None or self.engine is None:
            return []
        return list(ENGINE_NAMES) if self.engine == "both" else [self.engine]


def run_compat(
    cfg: CompatConfig, echo: Callable[[str], None] = print, machinery: Any = None, sampling: Any = None
) -> tuple[Path, list[CompatCell]]:
    """Probe every pair and write the run folder; returns (run folder, cells). The tokenizer
    preflight runs first, before any folder is created, server started or request sent.
    ``machinery``: the verdict's functions (``speed.Machinery``, from the CLI) that decide each
    feature cell's speed; None: not judged."""
    # heavy: aiohttp (the probes, the servers' health checks), only when a run starts
    from specdec.experiments.compat.probing import Pair
    from specdec.http.urls import parse_endpoint

    if cfg.draft_model is not None:
        from specdec.vocab import preflight  # heavy: tokenizers (as above)

        target = (
            cfg.target_model if cfg.target_model is not None else bundled_model("folder")
        )  # the default _one_target allows
        report = preflight(cfg.draft_model, Path(target))
        echo(f"tokenizer preflight: draft and target agree ({report.target_vocab_size} tokens)")
    settings = cfg.client_settings()
    pairs: list[tuple[str, Any]] = []  # (engine, a Pair or a starter of one)
    if cfg.baseline_url is not None:
        assert cfg.speculative_url is not None  # the validator asks for both
        b = parse_endpoint(cfg.baseline_url, "--baseline-url")
        s = parse_endpoint(cfg.speculative_url, "--speculative-url")
        pairs.append(("external", Pair("external", None, "declared", b, s)))
    else:
        settings = dataclasses.replace(settings, api_key=None)  # the embedded servers want no key
        pairs += [(e, None) for e in cfg.embedded_engines()]
    run_id, run_dir = claim_run_dir(cfg.runs_dir, cfg.run_id)
    run_dir.mkdir(parents=True, exist_ok=True)  # runs/latest moves to it once it holds cells (``stopping``)
    manifest = _manifest(cfg, run_id, pairs)
    write_manifest(run_dir, manifest)
    only = frozenset(cfg.probes) if cfg.probes else None
    book = Book(run_dir, manifest, [e for e, _ in pairs])
    job = _Job(cfg, run_id, settings, book, only, echo, machinery, sampling)
    work = [functools.partial(_probe_engine, job, engine, pair) for engine, pair in pairs]
    with keeping(cfg.runs_dir, book):  # a signal or an error: the cells so far kept (stopping.py)
        if cfg.engine == "both" and cfg.baseline_url is None and cfg.together:  # side by side (together.py)
            for engine in book.order:
                manifest.engines.setdefault(engine, {})["probed_beside"] = next(e for e in book.order if e != engine)
            manifest.notes.append(TOGETHER_NOTE)
            write_manifest(run_dir, manifest)
            side_by_side(work[0], work[1])
        else:
            for w in work:
                w(never)
    cells = book.all()
    if not cells:
        raise SpecdecError(f"no probe was sent (--probe names none of the probe set: {sorted(only or ())})")
    manifest.finished = True
    write_manifest(run_dir, manifest)
    point_latest(cfg.runs_dir, run_dir)
    return run_dir, cells


@dataclasses.dataclass(frozen=True)
class _Job:
    """What every engine's work in one run shares: the settings, the run, where its cells go."""

    cfg: CompatConfig
    run_id: str
    settings: Any  # ClientSettings
    book: Book
    only: frozenset[str] | None  # probe names asked for; None: all
    echo: Callable[[str], None]
    machinery: Any = None  # speed.Machinery, or None: speeds not judged
    sampling: Any = None  # sampling_cells.Test, or None: the sampling cells not judged


def _probe_engine(job: _Job, engine: str, pair: Any, checkpoint: Checkpoint) -> None:
    """One engine's work: on the embedded llama.cpp its quantization cells first, then its feature
    pair (started here unless given), and with ``--draft-pair`` a draft-model pair after it on an
    engine that has one; ``checkpoint`` before each probe or cell."""
    cfg, only = job.cfg, job.only
    adapter = ENGINES.get(engine)  # None: the user's pair ("external")
    if adapter is not None and adapter.makes_quantized_targets and cfg.quantization and _quant_wanted(only):
        _quantization(job, engine, checkpoint)
        if only is not None and only <= _quant_names():
            return  # only quantization cells were asked for: no feature pair
    speculations: list[Any] = [None]  # None: the engine's probe speculation (or the user's pair as it is)
    if pair is None and cfg.draft_pair and adapter is not None:
        from specdec.model import find_gguf  # the target's own file: only an engine that serves one drafts so

        own = adapter.self_draft_speculation(find_gguf()) if adapter.model_kind == "gguf" else None
        speculations += [own] if own is not None else []
    for speculation in speculations:
        _probe_one_pair(job, engine, pair, checkpoint, speculation)


def _probe_one_pair(job: _Job, engine: str, pair: Any, checkpoint: Checkpoint, speculation: Any) -> None:
    """One pair's feature probes (started here unless given; ``speculation``: its speculative arm,
    None for the engine's probe speculation), reconciled with the capture, added to the book."""
    from specdec.experiments.compat.capture_check import read_capture, reconcile
    from specdec.experiments.compat.probing import probe_pair

    cfg, run_id, book, only, echo = job.cfg, job.run_id, job.book, job.only, job.echo
    run_dir = book.run_dir
    adapter = ENGINES.get(engine)
    with contextlib.ExitStack() as stack:
        if pair is None:
            pair, args = _start_embedded(engine, run_dir, run_id, cfg.startup_timeout_s, stack, echo, speculation)
            facts = {"version": pair.engine_version, "spec_method": pair.spec_method, **args}
            if speculation is None:
                book.add(engine, [], lambda m: m.engines.setdefault(engine, {}).update(facts))
            else:  # a further pair of the engine: its facts beside the first pair's
                book.add(
                    engine, [], lambda m: m.engines.setdefault(engine, {}).setdefault("more_pairs", []).append(facts)
                )
        echo(
            f"probing {engine} ({pair.spec_method}): baseline {pair.baseline.display}, speculative {pair.speculative.display}"
        )
        found, sent = asyncio.run(
            probe_pair(
                pair,
                job.settings,
                run_id,
                echo,
                only,
                cfg.repeats,
                checkpoint,
                keep=functools.partial(book.partial, engine),
                machinery=job.machinery,
                sampling=job.sampling,
                sampling_levels=tuple(cfg.sampling_levels),
                lossless_levels=tuple(cfg.lossless_levels),
            )
        )
    # the servers have stopped: their capture parts are whole (only the embedded vLLM pair captures)
    writes_rounds = adapter is not None and adapter.writes_rounds
    captured = read_capture(run_dir / CAPTURE_FOLDER, run_id) if writes_rounds else None
    found = reconcile(found, sent, captured)

    def record(m: RunManifest) -> None:
        m.traffic.setdefault("probes", {}).setdefault(engine, [])[:0] = sent

    book.add(engine, found, record)


def _quant_names() -> frozenset[str]:
    # heavy: aiohttp (quant measures over it), only when a run starts
    from specdec.experiments.compat.quant import QUANT_FEATURE, QuantArm, probe_name

    arms = [QuantArm("draft-simple", q) for q in ("Q4_1", "Q8_0")] + [QuantArm("ngram-mod")]
    return frozenset({QUANT_FEATURE} | {probe_name(t, a) for t in ("Q4_1", "Q8_0", "F16") for a in arms})


def _quant_wanted(only: frozenset[str] | None) -> bool:
    return only is None or bool(only & _quant_names())


def _quantization(job: _Job, engine: str, checkpoint: Checkpoint) -> None:
    """The quantization cells (``quant_run``: llama.cpp's, the one engine whose adapter
    ``makes_quantized_targets``), with their files' checksums and servers in the manifest."""
    # heavy: aiohttp and the GGUF making (torch, in a subprocess), only when a run starts
    from specdec.engines.llama_cpp.build import LLAMA_CPP_PYTHON
    from specdec.experiments.compat.quant_run import run_quant

    book = job.book
    job.echo("quantization cells on llama.cpp: target Q4_1 (shipped), Q8_0, F16 x draft Q4_1, Q8_0 and ngram-mod")
    version = f"llama-cpp-python {LLAMA_CPP_PYTHON}"
    q = run_quant(
        book.run_dir,
        job.run_id,
        job.settings,
        version,
        job.cfg.startup_timeout_s,
        job.echo,
        job.only,
        checkpoint=checkpoint,
        repeats=job.cfg.repeats,
    )

    def record(m: RunManifest) -> None:
        m.dtype += "; llama.cpp quantization cells: Q4_1 as shipped, Q8_0, F16 (model_source.quantization)"
        m.model_source["quantization"] = q.files
        m.engines.setdefault(engine, {})["quantization_servers"] = q.servers
        m.traffic.setdefault("probes", {}).setdefault(engine, []).extend(q.sent)

    book.add(engine, q.cells, record)


def _start_embedded(
    engine: str, run_dir: Path, run_id: str, timeout_s: float, stack: contextlib.ExitStack, echo, speculation=None
):
    """Start ``engine``'s baseline and speculative servers together (``speculation``: the speculative
    arm's, None: the engine's probe speculation, ngram); they stop when ``stack`` closes.
    Returns the pair and each arm's server arguments (for the manifest)."""
    # heavy: aiohttp (the probes), only when a run starts
    from specdec.engines.server import start_all
    from specdec.experiments.compat.probing import Pair
    from specdec.http.urls import parse_endpoint

    adapter = ENGINES[engine]
    spec = speculation if speculation is not None else adapter.probe_speculation()
    method = str(adapter.method_of(spec))
    tag = engine.replace(".", "") + ("" if speculation is None else f"-{method}")
    logs = [server_log(run_dir, f"{tag}-baseline"), server_log(run_dir, f"{tag}-speculative")]
    servers, binds, version = EMBEDDED[engine].probe_servers(run_dir / CAPTURE_FOLDER, run_id, logs, timeout_s, spec)
    echo(f"starting {engine} (logs: {logs[0].name}, {logs[1].name})")
    start_all(stack, servers)
    b, s = (parse_endpoint(x.base_url) for x in servers)
    args: dict[str, Any] = {}
    for arm, x, core in zip(("baseline", "speculative"), servers, binds):
        args[f"{arm}_server_args"] = list(x.cmd[1:])
        if core is not None:  # the core its CPU worker computes on
            args[f"{arm}_cpu_bind"] = core
    pair = Pair(engine, version, method, b, s, dict(adapter.counters), lossless_protocol=adapter.lossless_protocol)
    if speculation is not None:  # a further pair of the engine: its requests' ids say which
        pair = dataclasses.replace(pair, id_tag=f"{engine}-{method}")
    return dataclasses.replace(pair, dtype=EMBEDDED[engine].probe_dtype), args


def _manifest(cfg: CompatConfig, run_id: str, pairs: list[tuple[str, Any]]) -> RunManifest:
    external = cfg.baseline_url is not None
    arms = [
        ArmConfig(
            name="baseline", speculative_config=None, server_args=[], endpoint=p.baseline.display if p else "embedded"
        )
        for _, p in pairs[:1]
    ] + [
        ArmConfig(
            name="speculative",
            speculative_config=None if external else {e: ENGINES[e].probe_speculation() for e, _ in pairs},
            server_args=[],
            endpoint=p.speculative.display if p else "embedded",
            speculative_config_source="declared" if external else "launched",
        )
        for _, p in pairs[:1]
    ]
    return RunManifest(
        kind="compat",
        run_id=run_id,
        created_wall=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        specdec_version=package_version(),
        engine={"name": "external", "version": None}
        if external
        # vLLM's package facts only where a vLLM pair ran (each engine's own version: manifest.engines)
        else {
            "engines": [e for e, _ in pairs],
            **{k: v for e, _ in pairs for k, v in EMBEDDED[e].package_facts().items()},
        },
        model="(first of GET /v1/models)" if external else "bundled SmolLM2-135M-Instruct",
        dtype="unknown" if external else "; ".join(EMBEDDED[e].probe_dtype_text for e, _ in pairs),
        arms=arms,
        arm_difference=["the speculative setting"],
        sampling={"note": "each probe sets its own request body; see traffic.probes"},
        traffic={"source": "built-in compat probes (specdec.experiments.compat.probes)", "outcomes": list(OUTCOMES)},
        levels=[1],
        warmup_requests=0,
        host=host_facts(),
        timeouts={"connect": cfg.connect_timeout_s, "request": cfg.request_timeout_s},
        notes=["one request at a time per arm; speculation counters read around each probe's requests"],
    )


def matrix_text(cells: list[CompatCell]) -> str:
    """The matrix on a terminal: one line per cell, then the counts per outcome."""
    lines = [f"{'engine':<10} {'feature':<18} {'probe':<22} {'outcome':<11} detail"]
    for c in cells:
        lines.append(f"{c.engine:<10} {c.feature:<18} {c.probe:<22} {c.outcome:<11} {c.detail[:110]}")
    counts = {o: sum(c.outcome == o for c in cells) for o in OUTCOMES}
    lines.append("outcomes: " + ", ".join(f"{o} {n}" for o, n in counts.items()))
    return "\n".join(lines)
