"""``specdec validate PATH``: the data contracts (``analytics/contracts.py``)
on a run folder or a traffic file.

Prints every expectation (passed or failed, with counts) and, for each failure,
the file, row(s) and field(s); ``--json`` prints one JSON object per
expectation instead. Exit status: 0 when every expectation passed, 1 when any
failed, 2 when the input could not be read or a check could not run (the
message says which file, never a traceback). great-expectations is imported
only when the command runs, so no other command's start-up pays for it.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from specdec.defaults import LATEST_RUN
from specdec.errors import SpecdecError

EXIT_FAILED, EXIT_ERROR = 1, 2


@click.command("validate")
@click.argument("path", type=click.Path(path_type=Path), default=str(LATEST_RUN))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per expectation, one per line.")
def validate_command(path: Path, as_json: bool) -> None:
    """Check the data contracts of a run folder (default runs/latest) or a
    traffic file (.jsonl, .ndjson, .parquet): accepted <= proposed, non-negative
    times and counters, round indexes contiguous per request, categories from
    the manifest's declared set, one run id per folder."""
    ctx = click.get_current_context()
    try:
        # heavy (pyarrow, numpy, aiohttp): only when the command runs
        from specdec.analytics.contracts import render, validate_path

        results = validate_path(path)
    except SpecdecError as exc:
        click.echo(f"Error: {exc}", err=True)
        ctx.exit(EXIT_ERROR)
    except Exception as exc:  # noqa: BLE001 - any other failure is exit 2 with a message, not a traceback
        click.echo(f"Error: validating {path} stopped: {type(exc).__name__}: {' '.join(str(exc).split())}", err=True)
        ctx.exit(EXIT_ERROR)
    if as_json:
        for r in results:
            click.echo(json.dumps(r.to_dict(), default=str))
    else:
        click.echo(render(results))
    errors = [r for r in results if r.error]
    if errors:
        click.echo(
            f"Error: {len(errors)} expectation(s) could not run: "
            + "; ".join(f"{r.suite}/{r.expectation}: {r.error}" for r in errors),
            err=True,
        )
        ctx.exit(EXIT_ERROR)
    ctx.exit(EXIT_FAILED if any(not r.success for r in results) else 0)
