"""``specdec traffic inspect|draw|mix``: look at a traffic file, draw a
seeded subset of it, re-weight it to a category mix. Thin click commands over
``traffic_profile`` and ``traffic_mix`` (the tests call those functions);
registered into the ``traffic`` group by ``specdec/cli/traffic.py`` as
``inspect_cmd``, ``draw_cmd`` and ``mix_cmd``.

``MixParam`` is the click type of every ``--mix`` option (here and
``specdec-replay --mix``): a bad mix fails while click parses the options,
naming the option.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from specdec.cli.common import handle_errors
from specdec.cli.params import MixParam, NonNegativeInt, PositiveInt
from specdec.traffic import load_traffic
from specdec.traffic.mix import MixError, draw_rows, mix_rows, write_rows
from specdec.traffic.profile import profile, render

_FILE = click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
_OUT = click.option(
    "-o",
    "--out",
    "out",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Output traffic file, .parquet or .jsonl (written atomically).",
)
_SEED = click.option(
    "--seed",
    type=NonNegativeInt,
    default=0,
    show_default=True,
    help="Seed of the random draw: the same seed gives the same rows.",
)


def _errors(fn, *args):
    return handle_errors(fn)(*args)


def _written(drawn, out: Path, what: str) -> None:
    total = len(drawn.rows)
    shares = ", ".join(f"{c} {k} ({k / total:.1%})" for c, k in drawn.counts().items()) if total else "nothing"
    click.echo(f"{what}: {total} rows written to {out}: {shares}")
    for note in drawn.notes:
        click.echo(f"  note: {note}")


@click.command("inspect")
@_FILE
@click.option("--json", "as_json", is_flag=True, help="Print the figures as one JSON object instead of text.")
def inspect_cmd(file: Path, as_json: bool) -> None:
    """Counts, category shares, tiers, sources, sessions, length histograms
    (input_tokens when recorded, max_tokens) and the arrival-rate curve of
    FILE (.parquet or .jsonl of TrafficRow)."""

    def run() -> None:
        prof = profile(load_traffic(file))
        click.echo(json.dumps(prof, indent=2) if as_json else render(prof))

    _errors(run)


@click.command("draw")
@_FILE
@click.option("-n", "--rows", "n", required=True, type=PositiveInt, help="Rows to draw (without replacement).")
@_OUT
@_SEED
@click.option(
    "--by-category",
    is_flag=True,
    help="Stratified: each category keeps its share of FILE (round(n x share) rows, largest remainder).",
)
def draw_cmd(file: Path, n: int, out: Path, seed: int, by_category: bool) -> None:
    """Draw N rows of FILE at random, keeping each session whole (all its turns
    or none), in FILE's order; arrival times are kept as they are."""

    def run() -> None:
        traffic = load_traffic(file)
        drawn = draw_rows(traffic, n, seed=seed, by_category=by_category)
        write_rows(drawn.rows, out, traffic)
        _written(drawn, out, f"rows drawn from {file} (seed {seed}{', by category' if by_category else ''})")

    _errors(run)


@click.command("mix")
@_FILE
@click.option(
    "--mix",
    "mix",
    required=True,
    type=MixParam(),
    metavar="CATEGORY=SHARE,...",
    help="Category shares of the output, e.g. code=0.3,chat=0.7: shares from 0 to 1 that sum to 1; "
    "categories not named are left out.",
)
@click.option(
    "-n", "--rows", "n", type=PositiveInt, default=None, help="Rows of the output (default: as many as FILE)."
)
@_OUT
@_SEED
def mix_cmd(file: Path, mix: dict[str, float], n: int | None, out: Path, seed: int) -> None:
    """Re-weight FILE to the category shares of --mix: a seeded draw per
    category, with replacement once a category's rows are used up (a copy
    gets a new prompt_id '<id>~<k>'), sessions whole. With arrival times the
    output keeps FILE's arrival-rate curve (units placed on its clock)."""

    def run() -> None:
        traffic = load_traffic(file)
        try:
            drawn = mix_rows(traffic, mix, n or len(traffic.rows), seed=seed)
        except MixError as exc:
            raise click.BadParameter(str(exc), param_hint="'--mix'") from None
        write_rows(drawn.rows, out, traffic)
        _written(drawn, out, f"mix of {file} (seed {seed})")

    _errors(run)
