"""``specdec compat``: the command over ``specdec.experiments.compat.run`` (the probes,
the run folder), then the matrix on the terminal."""

from __future__ import annotations

from pathlib import Path

import click

from specdec.cli.common import handle_errors
from specdec.cli.options import client_options
from specdec.cli.params import LevelList
from specdec.engines import ENGINE_NAMES
from specdec.errors import SpecdecError
from specdec.experiments.compat.lossless_cells import LEVELS as LOSSLESS_LEVELS
from specdec.experiments.compat.run import CompatConfig, matrix_text, run_compat
from specdec.experiments.compat.sampling_cells import LEVELS as SAMPLING_LEVELS
from specdec.experiments.compat.stopping import CompatStopped
from specdec.experiments.compat.timing import DEFAULT_REPEATS
from specdec.schemas.strict import check_run_name


@click.command("compat")
@click.option("--baseline-url", default=None, help="Your server without speculation (with --speculative-url).")
@click.option("--speculative-url", default=None, help="Your server with speculation, serving the same model.")
@click.option(
    "--engine",
    type=click.Choice([*ENGINE_NAMES, "both"]),
    default=None,
    help="Without URLs: start the embedded pair(s): vLLM CPU (float32, ngram k=4 vs none) and/or "
    "llama-server (ngram-mod with 4-token matches and drafts of 1-4 vs none: at its defaults it drafts nothing "
    "in a 32-token probe), both on the bundled SmolLM2. Default: vllm.",
)
@click.option(
    "-o",
    "--output",
    "run_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The run folder to write (must be new or empty; default: runs/<UTC timestamp>).",
)
@click.option(
    "--draft-model",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="A draft model folder: its tokenizer is compared with the target's before anything is sent.",
)
@click.option(
    "--target-model",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="The target model folder for the tokenizer preflight (default with --engine vllm: the bundled model).",
)
@click.option("--no-report", is_flag=True, help="Skip the marts and report.html (the cells are in compat.parquet).")
@click.option(
    "--probe",
    "probes",
    multiple=True,
    help="Send only this probe (repeatable; names as in the matrix; 'quantization': every quantization cell).",
)
@click.option(
    "--repeats",
    type=click.IntRange(1, 20),
    default=DEFAULT_REPEATS,
    show_default=True,
    help="Times each feature probe's requests are sent per arm, paired and interleaved: each cell's speedup "
    "with a 95% interval needs 2 or more. 2 gives it on 1 df (wide: a speed loss is rarely called 'degrades'); "
    "3 narrows it about 3x for half as much time again.",
)
@click.option(
    "--sampling-levels",
    type=LevelList,
    default=",".join(map(str, SAMPLING_LEVELS)),
    show_default=True,
    help="Levels (requests in flight) of the sampling-distribution cells: per level, each arm samples 4 prompts "
    "(2 open-ended, 2 copies) x 6 seeds at temperature 1, every sample is re-scored on the baseline (teacher "
    "forcing) and the arms are compared by the sampling pass's permutation test. 'works' needs drafts accepted "
    "and no rejection; 'broken': the speculative arm samples another distribution (a defect that may show only "
    "with several requests in flight).",
)
@click.option("--no-sampling", is_flag=True, help="Skip the sampling-distribution cells.")
@click.option(
    "--lossless-levels",
    type=LevelList,
    default=",".join(map(str, LOSSLESS_LEVELS)),
    show_default=True,
    help="Levels (requests in flight) of the lossless cells: per level, each arm answers 4 prompts (3 copies, 1 "
    "open) greedily with token ids and top-2 log-probabilities (vLLM: the chat stream's logprobs; llama-server: "
    "/completion with n_probs), and each pair is identical, a near-tie (the baseline's runner-up taken within "
    "the dtype's margin) or suspect. 'broken': a suspect pair; 'works' needs drafts accepted.",
)
@click.option("--no-lossless", is_flag=True, help="Skip the lossless cells.")
@click.option(
    "--draft-pair",
    is_flag=True,
    help="On an embedded engine that can draft with the target's own file (llama.cpp: -md on the shipped GGUF, "
    "--spec-type draft-simple), probe every feature again on a draft-model pair after the ngram pair: the "
    "matrix's column for a local target with a draft. Off by default: the draft is as large as the target, so "
    "the pair takes about as long again as the engine's ngram pair.",
)
@click.option(
    "--no-quantization",
    is_flag=True,
    help="Embedded llama.cpp: skip the quantization cells (target Q4_1, Q8_0, F16 x draft Q4_1, Q8_0, ngram-mod).",
)
@click.option(
    "--engines-together",
    is_flag=True,
    help="--engine both: probe llama.cpp while vLLM is probed, not after it (8-9 minutes against 12 min 49 s on a "
    "2-core host on 2026-12-03; one after the other takes 9 min 24 s since the vLLM pair's workers got a core "
    "each). Outcomes, acceptance, validity, identity and capture are each server's own and do not change; "
    "the speed figures do: each engine is host load for the other, the speedup intervals widen 2-7x and a "
    "2-pair cell can be labelled faster or slower by that noise (measured: BENCHMARKS.md, 'Issue 22, round four').",
)
@client_options()
def compat_command(**options) -> None:
    """Which features still work with speculation on, measured from real requests.

    \b
    Sends a fixed set of probe requests, one at a time, to a server without
    speculation and one with it: structured output (json_object, json_schema,
    regex, choice), tools (tool_choice auto, required, named), streaming,
    logprobs, n=2, stop, seed, penalties, logit_bias, min_tokens, a long
    input near the maximum length and a multi-turn session on a shared prefix.
    Per probe (a cell) it records whether each arm accepted it (the error
    verbatim when not), whether each output obeys the constraint, whether the
    greedy outputs agree, the speculative arm's acceptance from its counters
    and the paired speedup (each request sent --repeats times per arm, the
    arms alternated), with the feature and on a plain twin without it, and
    whether the capture's rows reconcile with the counters in each arm
    (embedded vLLM; elsewhere: not captured). The multi-turn session runs
    with prefix caching on and off, one cell per turn. Outcome:

    \b
      works        valid in both arms, identical, and the speculative arm
                   drafted in the cell (its counters moved)
      degrades     valid and identical, but no draft with the feature,
                   acceptance per token below half the plain twin's, or the
                   speedup clearly below the plain twin's (interval < 1/1.1)
      broken       invalid output, the greedy outputs differ, or the
                   capture reconciles in one arm only
      refused      the speculative server refused what the baseline accepted
      not tested   valid and identical, but nothing shows speculation ran: no
                   draft with the feature nor on the plain twin (the probe
                   could not make the engine draft), or no counters read
      not offered  the baseline refused it too, or no valid output in either
                   arm (the field ignored, or not met within max_tokens)

    Writes RUN_DIR/compat.parquet (one row per cell, as each is measured) and
    manifest.json (every probe's request bodies), prints the matrix, then
    builds the marts (the compatibility mart) and report.html ("What works
    with speculation on this stack").

    \b
    Every request is bounded: --request-timeout for the next byte (and for
    /metrics), a wall limit of --request-timeout plus 1 s per requested token,
    and a length limit; a reply past one, or malformed, is a broken cell with
    the reason. A server that gives no reply to 3 requests in a row, or fails
    its first 3, stops the run with an error naming it (exit 1). Stopped by
    Ctrl-C or SIGTERM, the cells measured so far are kept, the manifest says
    the run stopped, and the status is 130 or 143; runs/latest moves only to
    a folder that holds cells.

    \b
    On the embedded llama.cpp it adds the quantization cells: the target
    at 4 bits (Q4_1 as shipped), 8 (Q8_0) and 16 (F16), made once with the
    llama.cpp source's convert_hf_to_gguf.py and llama-quantize and cached,
    each with the draft at 4 and 8 bits and with ngram-mod: acceptance per
    token and per round, and the paired speedup against the same target
    without speculation. The files' sha256 go to the manifest.

    With --draft-model the
    draft's tokenizer is checked against the target's first: a mismatch stops
    the run before any server starts or request is sent."""
    handle_errors(_compat)(**options)


def _compat(
    baseline_url,
    speculative_url,
    engine,
    run_dir,
    draft_model,
    target_model,
    no_report,
    probes,
    repeats,
    sampling_levels,
    no_sampling,
    lossless_levels,
    no_lossless,
    draft_pair,
    no_quantization,
    engines_together,
    connect_timeout,
    request_timeout,
    api_key_env,
) -> None:
    runs_dir, run_id = (None, None) if run_dir is None else (run_dir.parent, run_dir.name)
    if run_id is not None:
        try:
            check_run_name(run_id)
        except ValueError as exc:
            raise SpecdecError(f"-o {run_dir}: {exc}") from None
    cfg = CompatConfig(
        baseline_url=baseline_url,
        speculative_url=speculative_url,
        engine=engine,
        run_id=run_id,
        draft_model=draft_model,
        target_model=target_model,
        probes=list(probes) or None,
        quantization=not no_quantization,
        together=engines_together,
        repeats=repeats,
        sampling_levels=[] if no_sampling else sampling_levels,
        lossless_levels=[] if no_lossless else lossless_levels,
        draft_pair=draft_pair,
        connect_timeout_s=connect_timeout,
        request_timeout_s=request_timeout,
        api_key_env=api_key_env,
        **({"runs_dir": runs_dir} if runs_dir is not None else {}),
    )
    try:
        out, cells = run_compat(cfg, echo=click.echo, machinery=_verdict(), sampling=_sampling_test())
    except CompatStopped as exc:  # a signal: the cells so far are kept; one line, then 130 or 143
        click.echo(f"Error: {exc}", err=True)
        click.get_current_context().exit(exc.exit_code)
    click.echo(matrix_text(cells))
    click.echo(f"run folder: {out.resolve()}")
    if not no_report:
        from specdec.analytics.report.write import write_report  # heavy (pyarrow, numpy): only when the command runs

        path, _ = write_report(out)
        click.echo(f"report: {path.resolve()}")


def _verdict():
    """The verdict's functions that decide each feature cell's speed (``replay.compat.speed``)."""
    # heavy: numpy (the variance model), only when the command runs
    from specdec.analytics.labels import ALPHA, DEFAULT_MARGIN, holm_levels, judge
    from specdec.analytics.variance import block_noise, t_sf
    from specdec.experiments.compat.speed import Machinery

    return Machinery(block_noise, judge, holm_levels, t_sf, DEFAULT_MARGIN, ALPHA)


def _sampling_test():
    """The sampling pass's test that judges the sampling-distribution cells (``replay.compat.sampling_cells``)."""
    # heavy: numpy (the permutation test), only when the command runs
    from specdec.analytics.sampling_check import DIFFERS, compare
    from specdec.experiments.compat.sampling_cells import Test

    return Test(compare, DIFFERS)
