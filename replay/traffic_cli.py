"""``specdec traffic``: commands on traffic files. This module holds the group
and ``import`` (public traces -> traffic Parquet with content from the prompt
pool), and registers ``inspect``, ``sample`` and ``mix`` from
``traffic_tools``; the group is added to ``specdec`` in ``specdec.cli``.

Thin: options -> ``ImportOptions`` -> ``import_trace`` (which the tests also
call) -> summary. Heavy imports (the tokenizer) happen inside the command.
"""

from __future__ import annotations

from pathlib import Path

import click

from specdec.replay.traffic_tools import MixParam, inspect_cmd, mix_cmd, sample_cmd
from specdec.validate import PositiveInt, StrictFloatType, StrictIntType


@click.group()
def traffic() -> None:
    """Traffic files: import public traces, inspect, sample, re-weight to a mix."""


@traffic.command("import")
@click.argument("fmt", metavar="FORMAT", type=click.Choice(["azure", "mooncake", "burstgpt"]))
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Traffic file to write (.parquet).")
@click.option("--start-s", type=StrictFloatType(0.0), default=0.0, show_default=True,
              help="Window start, seconds from the trace start (its earliest timestamp).")
@click.option("--end-s", type=StrictFloatType(0.0, exclusive_min=True), default=None,
              help="Window end (exclusive), seconds from the trace start (default: the end).")
@click.option("--sample", type=StrictFloatType(0.0, 1.0, exclusive_min=True), default=1.0, show_default=True,
              help="Keep this fraction of rows (whole sessions) by seeded hash thinning: the arrival "
                   "curve keeps its shape, rates scale by the fraction.")
@click.option("--seed", type=StrictIntType(0), default=0, show_default=True,
              help="Seed of the thinning and of every content choice.")
@click.option("--skip-bad", is_flag=True, help="Skip malformed rows and count them (default: refuse the file at the first one).")
@click.option("--category", default=None,
              help="Give every row a pool prompt of this category (code, structured, template, summarize, rewrite, "
                   "translate, chat, creative, advice) or tier (high, medium, low).")
@click.option("--mix", type=MixParam(), default=None,
              help="Categories (or tiers: high, medium, low) with shares summing to 1, e.g. code=0.3,chat=0.7.")
@click.option("--max-input-tokens", type=PositiveInt, default=None,
              help="Compose at most this many input tokens per row (e.g. the served model's context minus "
                   "the output); longer rows are capped, noted and counted.")
@click.option("--fit-context", type=StrictIntType(2), default=None,
              help="The served model's context length (e.g. 2048 for the embedded engine): each row's input "
                   "is capped to context - max_tokens; rows whose output alone does not fit are left out. "
                   "Capped and left-out rows are counted.")
@click.option("--pool", "pool_dir", type=click.Path(file_okay=False, exists=True, path_type=Path), default=None,
              help="Prompt pool folder (prompts*.jsonl, context*.jsonl); default: the bundled pool.")
@click.option("--tokenizer", type=click.Path(file_okay=False, exists=True, path_type=Path), default=None,
              help="Tokenizer folder for counting input tokens (default: the prepared SmolLM2 model).")
def import_command(fmt: str, file: Path, out: Path, **options) -> None:
    """Import a public trace FILE (azure CSV, mooncake JSONL, burstgpt CSV)
    into a traffic file: arrival times in ms from the first kept row, input
    and output lengths (max_tokens = the recorded output), sessions, shared
    prefixes, and real content from the prompt pool reaching each row's input
    length (what was done is in each row's content_note)."""
    if out.suffix.lower() != ".parquet":
        raise click.BadParameter(f"{out} must end in .parquet (a traffic file)", param_hint="'-o'")
    from specdec.cli import handle_errors  # here, not at import: specdec.cli registers this group

    handle_errors(_import)(fmt, file, out, **options)


def _import(fmt: str, file: Path, out: Path, start_s: float, end_s: float | None, sample: float, seed: int,
            skip_bad: bool, category: str | None, mix: dict[str, float] | None, max_input_tokens: int | None,
            fit_context: int | None, pool_dir: Path | None, tokenizer: Path | None) -> None:
    from specdec.replay.importers import ImportOptions, import_trace, write_traffic
    from specdec.replay.prompt_pool import HFTokenCounter, load_pool

    opts = ImportOptions(start_s=start_s, end_s=end_s, sample=sample, seed=seed, skip_bad=skip_bad,
                         category=category, mix=mix, max_input_tokens=max_input_tokens,
                         fit_context=fit_context)
    pool = load_pool(pool_dir) if pool_dir else None
    counter = HFTokenCounter(tokenizer) if tokenizer else None
    report = import_trace(fmt, file, opts, pool=pool, counter=counter)
    for line in report.lines():
        click.echo(line)
    write_traffic(report, out)
    click.echo(f"wrote {out} ({len(report.rows)} rows)")


traffic.add_command(inspect_cmd)
traffic.add_command(sample_cmd)
traffic.add_command(mix_cmd)
