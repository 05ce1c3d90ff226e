"""``specdec-replay TRAFFIC``: the replay command line.

Option defaults come from ``ReplayConfig`` (one definition); every number is
range-checked by click before anything runs.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from specdec.cli.common import finish_run, handle_errors, look_factory, report_stopped_run
from specdec.cli.options import (
    client_options,
    design_config,
    load_options,
    run_options,
    schedule_options,
    shared_config,
)
from specdec.cli.params import (
    ArmParam,
    LevelList,
    MaxTokens,
    MixParam,
    NonNegativeInt,
    RunName,
)
from specdec.cli.plan import KRange
from specdec.cli.sweep import sweep_arms
from specdec.engines import ENGINE_NAMES
from specdec.errors import SpecdecError
from specdec.replay.config import ReplayConfig, default_of
from specdec.replay.ledger import LEDGER


def _d(name: str):
    return default_of(name)


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.argument("traffic", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--levels",
    type=LevelList,
    default=",".join(map(str, _d("levels"))),
    show_default=True,
    help="Closed-loop concurrency levels, comma-separated (e.g. 1,2,4,8,16,32).",
)
@click.option("--arms", default=",".join(_d("arms")), show_default=True, help="Arms to run, in order.")
@click.option(
    "--arm",
    "named_arms",
    type=ArmParam(),
    multiple=True,
    metavar="NAME=ENGINE[:SPEC][@REF]",
    help="A named arm (repeat the option, any number, in order), instead of the fixed pair of "
    "--arms/--spec-config/--engine: ENGINE vllm or llama.cpp; SPEC none (default), ngram (prompt "
    "lookup: vLLM ngram k=4, llama.cpp ngram-mod) or the engine's own JSON settings; each arm with "
    "speculation is measured against REF, else the first arm without speculation on its engine. "
    "E.g. --arm vllm-none=vllm --arm vllm-ngram=vllm:ngram --arm llama-none=llama.cpp "
    "--arm llama-ngram=llama.cpp:ngram: one run, both engines, two comparisons side by side.",
)
@click.option(
    "--sweep-k",
    type=KRange(),
    default=None,
    metavar="K,K,...",
    help="One run that captures every k (for specdec plan): arm k0 without speculation and one arm k<N> per "
    "N > 0, the engine's ngram (or --spec-config) with N draft tokens, each measured against k0. "
    "Not with --arm.",
)
@click.option(
    "--spec-config",
    default=None,
    help="vLLM --speculative-config JSON for the speculative arm (default: "
    f"{json.dumps(_d('speculative_config'))}). With external URLs it is recorded as "
    '"declared by the user", not verified. "null": an A/A run (both arms without speculation, one embedded server for both).',
)
@click.option("--max-tokens", type=MaxTokens, default=None, help="Override every row's output length.")
@click.option(
    "--warmup",
    type=NonNegativeInt,
    default=_d("warmup_requests"),
    show_default=True,
    help="Unrecorded warm-up requests per arm (0 still sends one check request). "
    "A failed warm-up stops the run at once.",
)
@click.option(
    "--mix",
    type=MixParam(),
    default=None,
    metavar="CATEGORY=SHARE,...",
    help="Category shares of your service, e.g. code=0.3,chat=0.7 (0..1, summing to 1): the weights of "
    "the overall speedup (mart speedup_weighted), recorded in the manifest. Default: the traffic "
    "file's own shares. It does not change what is sent: to send a re-weighted traffic, make one "
    "with `specdec traffic mix`.",
)
@run_options
@client_options()
@schedule_options(sequential=True)
@load_options
@click.option("--run-id", type=RunName, default=None, help="Run folder name, a plain name (default: UTC timestamp).")
@click.option(
    "--engine",
    type=click.Choice(list(ENGINE_NAMES)),
    default=_d("engine"),
    show_default=True,
    help="vllm: embedded vLLM CPU with the capture plugin. llama.cpp: llama-server (built once from "
    "PyPI, cached) serving the SmolLM2 Q4_1 GGUF as shipped, speculative arm --spec-type ngram-mod "
    '(--spec-config \'{"type": "draft-simple", "draft_model": "D.gguf"}\' for a draft); '
    "no per-round rows, no prompt cache (--no-cache-prompt); the lossless pass asks its /completion for token ids and "
    "top-2 probabilities. With external URLs: the servers' "
    "engine, whose counters are read.",
)
@click.option("--model", default=None, help="Embedded engine: model folder (default: prepared SmolLM2).")
@click.option("--baseline-url", default=None, help="External server without speculation (skips the embedded engine).")
@click.option("--speculative-url", default=None, help="External server with speculation.")
@click.option(
    "--served-model",
    default=_d("served_model"),
    show_default=True,
    help="Model name sent in requests to external servers.",
)
@click.option(
    "--capture-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="External servers: the folder their capture plugin writes to (specdec-capture serve --dir). "
    "This run's rounds are copied from it; without it the report says no rounds were captured.",
)
@handle_errors
def main(
    traffic: Path,
    levels: list[int],
    arms: str,
    named_arms: tuple,
    sweep_k: list[int] | None,
    spec_config: str | None,
    max_tokens,
    warmup: int,
    load: str,
    time_scales,
    rates,
    arrival_seed: int,
    run_id,
    engine,
    model,
    baseline_url,
    speculative_url,
    served_model,
    capture_dir,
    mix=None,
    **shared: Any,
) -> None:
    """Replay TRAFFIC (.parquet or .jsonl of prompt_id, category, prompt,
    max_tokens, temperature) in two arms that differ only in speculation, then
    build the marts and the report.

    \b
    Load (--load): closed (default) keeps C requests in flight per level of
    --levels; recorded sends the rows on their recorded clock (arrival_ms),
    one level per --time-scale (0.1 = ten times faster); poisson sends
    Poisson arrivals, one level per --rates (requests/s), seeded by
    --arrival-seed so both arms get the same times. In open loop the
    level column holds the level's key (1..N in load order), and every
    request records its intended and actual send time (schedule lag).

    \b
    Without --baseline-url/--speculative-url it starts a local vLLM server per
    arm (CPU engine, capture plugin on), waits for /health, runs every level
    and stops it. Per request it records TTFT, chunk arrival times, output
    tokens and text, typed errors and vLLM's per-request speculative metrics;
    around each level it reads vLLM's /metrics counters. Output: runs/<run-id>/.
    Every request is bounded without trusting the server: it fails as
    overlong_stream once the stream holds more than max_tokens plus a margin
    (the larger of 16 and half of max_tokens) of content chunks, and as
    request_wall_timeout after --request-timeout plus 1 s per requested token.

    \b
    Design (--design): sequential by default in closed loop. After --repeats
    repeats (default 3), and after every repeat from then on, a look at the
    intervals closes the levels already decided; only the open ones run again,
    up to --max-repeats (default 2 x --repeats) in all, or fewer when the next
    repeat would pass --budget MINUTES. The looks spend 5% family-wise error
    between them. The repeats run one after another (all open levels each);
    every look is in the manifest. --design fixed: exactly --repeats repeats.

    \b
    Exit status: 0 if every level stayed within --max-error-rate, 1 otherwise.
    Stopped by Ctrl-C or SIGTERM, the requests in flight are written as failed
    rows (error_type interrupted), the counts of rows written and lost are
    printed, and the status is 130 (SIGINT) or 143 (SIGTERM); a run that lost
    rows (a part file it could not write) exits 1 and says how many.
    """
    from specdec.replay.experiment import run_replay  # heavy (aiohttp, pyarrow, numpy): only when the command runs

    try:
        spec = json.loads(spec_config) if spec_config else _d("speculative_config")
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint="--spec-config") from None
    if spec is not None and not isinstance(spec, dict):
        raise click.BadParameter("must be a JSON object, or null for an A/A run", param_hint="--spec-config")
    if sweep_k is not None:
        if named_arms:
            raise click.UsageError("--sweep-k makes the arms itself: give it without --arm")
        try:
            named_arms = tuple(sweep_arms(engine, sweep_k, json.loads(spec_config) if spec_config else None))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--sweep-k") from None
        spec, engine = _d("speculative_config"), _d("engine")  # now carried by the arms
    load_kw: dict = {"load": load, "arrival_seed": arrival_seed}
    if time_scales is not None:
        load_kw["time_scales"] = time_scales
    if rates is not None:
        load_kw["rates"] = rates
    if load == "closed" or click.get_current_context().get_parameter_source("levels") != ParameterSource.DEFAULT:
        # open loop: levels are derived from --time-scale/--rates; an explicit --levels is refused
        load_kw["levels"] = levels
    design, design_line = design_config(shared, default_max=lambda r: 2 * r, closed_loop=load == "closed")
    cfg = ReplayConfig(
        traffic=traffic,
        run_id=run_id,
        **load_kw,
        arms=[a.strip() for a in arms.split(",") if a.strip()],
        speculative_config=spec,
        named_arms=list(named_arms) or None,
        warmup_requests=warmup,
        max_tokens=max_tokens,
        **{**shared_config(shared), **design},
        engine=engine,
        model=model,
        baseline_url=baseline_url,
        speculative_url=speculative_url,
        served_model=served_model,
        capture_dir=capture_dir,
        mix=mix,
    )
    LEDGER.reset()
    if cfg.progress:
        click.echo(design_line, err=True)
    factory = look_factory(cfg) if cfg.sequential else None
    try:
        run_dir = run_replay(cfg) if factory is None else run_replay(cfg, look_factory=factory)
    except SpecdecError as exc:
        report_stopped_run(exc)
        if LEDGER.lost:
            click.echo(f"the run stopped: {LEDGER.summary()}", err=True)
        raise
    except KeyboardInterrupt:
        LEDGER.signal = LEDGER.signal or signal.SIGINT
        click.echo(f"stopped by {LEDGER.signal_name()}: {LEDGER.summary()}; exit status {LEDGER.exit_code()}", err=True)
        sys.exit(LEDGER.exit_code())
    click.echo(f"run written to {run_dir}")
    if LEDGER.lost:  # never, unless a block lost rows without stopping the run
        raise click.ClickException(LEDGER.summary())
    finish_run(run_dir, progress=cfg.progress)
