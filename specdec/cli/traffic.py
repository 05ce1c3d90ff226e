"""``specdec traffic``: commands on traffic files. This module holds the group
and ``import`` (public traces -> traffic Parquet with content from the prompt
pool), and registers ``inspect``, ``draw`` and ``mix`` from
``traffic_tools``; the group is added to ``specdec`` in ``specdec.cli.main``.

Thin: options -> ``ImportOptions`` -> ``import_trace`` (which the tests also
call) -> summary. Heavy imports (the tokenizer) happen inside the command.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import click

from specdec.cli.common import handle_errors, renamed_command
from specdec.cli.params import MixParam, PositiveInt, StrictFloatType, StrictIntType
from specdec.cli.traffic_tools import draw_cmd, inspect_cmd, mix_cmd
from specdec.traffic.prompt_pool import load_pool


@click.group()
def traffic() -> None:
    """Traffic files: import public traces, inspect, draw a subset, re-weight to a mix."""


@traffic.command("import")
@click.argument("fmt", metavar="FORMAT", type=click.Choice(["azure", "mooncake", "burstgpt"]))
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "-o",
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Traffic file to write (.parquet).",
)
@click.option(
    "--start-s",
    type=StrictFloatType(0.0),
    default=0.0,
    show_default=True,
    help="Window start, seconds from the trace start (its earliest timestamp).",
)
@click.option(
    "--end-s",
    type=StrictFloatType(0.0, exclusive_min=True),
    default=None,
    help="Window end (exclusive), seconds from the trace start (default: the end).",
)
@click.option(
    "--keep-fraction",
    "--sample",
    "keep_fraction",
    type=StrictFloatType(0.0, 1.0, exclusive_min=True),
    default=1.0,
    show_default=True,
    help="Keep this fraction of rows (whole sessions) by seeded hash thinning: the arrival "
    "curve keeps its shape, rates scale by the fraction.",
)
@click.option(
    "--seed",
    type=StrictIntType(0),
    default=0,
    show_default=True,
    help="Seed of the thinning and of every content choice.",
)
@click.option(
    "--skip-bad",
    is_flag=True,
    help="Skip malformed rows and count them (default: refuse the file at the first one, naming its row "
    "and field). Malformed includes out of range: a timestamp not finite or more than 30 days from "
    "the trace's zero, an input length above 100,000,000 tokens, an output length above 1,000,000.",
)
@click.option(
    "--category",
    default=None,
    help="Give every row a pool prompt of this category (code, structured, template, summarize, rewrite, "
    "translate, chat, creative, advice) or tier (high, medium, low).",
)
@click.option(
    "--mix",
    type=MixParam(),
    default=None,
    help="Categories (or tiers: high, medium, low) with shares summing to 1, e.g. code=0.3,chat=0.7.",
)
@click.option(
    "--max-input-tokens",
    type=PositiveInt,
    default=None,
    help="Compose at most this many input tokens per row (e.g. the served model's context minus "
    "the output); longer rows are capped, noted and counted.",
)
@click.option(
    "--fit-context",
    type=StrictIntType(2),
    default=None,
    help="The served model's context length (e.g. 2048 for the embedded engine): each row's input "
    "is capped to context - max_tokens; rows whose output alone does not fit are left out. "
    "Capped and left-out rows are counted.",
)
@click.option(
    "--pool",
    "pool_dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="Prompt pool folder (prompts*.jsonl, context*.jsonl); default: the bundled pool.",
)
@click.option(
    "--tokenizer",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="Tokenizer folder for counting input tokens (default: the prepared SmolLM2 model).",
)
@click.option(
    "--no-progress",
    is_flag=True,
    help="No progress bar on standard error (there is none either when it is not a terminal).",
)
@click.option(
    "--whole-prompts",
    is_flag=True,
    help="Write every prompt whole (traffic format version 2, which a specdec before version 3 reads) instead of a Mooncake row's prefix blocks once per file (version 3: smaller and faster; the same prompts when read).",
)
def import_command(fmt: str, file: Path, out: Path, **options) -> None:
    """Import a public trace FILE (azure CSV, mooncake JSONL, burstgpt CSV)
    into a traffic file: arrival times in ms from the first kept row, input
    and output lengths (max_tokens = the recorded output), sessions, shared
    prefixes, and real content from the prompt pool reaching each row's input
    length (what was done is in each row's content_note).

    \b
    Timestamps must be finite and within 30 days of the trace's zero (the
    trace start; Azure: midnight of the first row's date). Rows are streamed:
    the file is read twice (check, then compose and write in batches); rows
    of one category and length bucket share their composed content (see the
    content_note's composed_for), except Mooncake prefix blocks and sessions."""
    if out.suffix.lower() != ".parquet":
        raise click.BadParameter(f"{out} must end in .parquet (a traffic file)", param_hint="'-o'")
    handle_errors(_import)(fmt, file, out, **options)


def _import(
    fmt: str,
    file: Path,
    out: Path,
    start_s: float,
    end_s: float | None,
    keep_fraction: float,
    seed: int,
    skip_bad: bool,
    category: str | None,
    mix: dict[str, float] | None,
    max_input_tokens: int | None,
    fit_context: int | None,
    pool_dir: Path | None,
    tokenizer: Path | None,
    no_progress: bool = False,
    whole_prompts: bool = False,
) -> None:
    # heavy (pyarrow, numpy): only when the command runs
    from specdec.traffic.importers import ImportOptions, import_to_file
    from specdec.traffic.importers.tokens import counter_for  # heavy (pyarrow, numpy): only when the command runs

    opts = ImportOptions(
        start_s=start_s,
        end_s=end_s,
        keep_fraction=keep_fraction,
        seed=seed,
        skip_bad=skip_bad,
        category=category,
        mix=mix,
        max_input_tokens=max_input_tokens,
        fit_context=fit_context,
    )
    pool = load_pool(pool_dir) if pool_dir else None
    counter = counter_for(tokenizer) if tokenizer else None
    with _bar(not no_progress and sys.stderr.isatty()) as progress:
        report = import_to_file(
            fmt, file, opts, out, pool=pool, counter=counter, progress=progress, blocks=False if whole_prompts else None
        )
    for line in report.lines():
        click.echo(line)
    click.echo(f"wrote {out} ({report.kept} rows)")


def _bar(show: bool):
    """A context manager giving ``progress(done, total)``: a rich bar on
    standard error, or None (no bar)."""
    if not show:
        return contextlib.nullcontext(None)

    @contextlib.contextmanager
    def bar():
        from rich.console import Console  # heavy: rich, imported only when used

        # heavy (rich): only when the command runs
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

        with Progress(
            "importing",
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
        ) as p:
            task = p.add_task("rows", total=None)
            yield lambda done, total: p.update(task, completed=done, total=total)

    return bar()


traffic.add_command(inspect_cmd)
traffic.add_command(draw_cmd)
# `traffic sample` was this command's name until 2026-12-02 ("sample" now names only the sampling check)
traffic.add_command(renamed_command(draw_cmd, "specdec traffic draw"), "sample")
traffic.add_command(mix_cmd)
