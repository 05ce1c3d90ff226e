"""What every command shares: turning specdec's errors into click's (``handle_errors``),
the run-folder argument, the SLO options, the build's progress bar, and what
happens after a replay (``finish_run``: marts, report, summary, exit status).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import sys
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from specdec.analytics.settings import DEFAULT_SLO, Slo
from specdec.cli.params import LevelList, PositiveFloat
from specdec.defaults import LATEST_RUN
from specdec.errors import SpecdecError

#: what every renamed command or option says when its old name is used (click prints it)
RENAMED = "use {new}; the old name goes in the next release"


def renamed_command(cmd: click.Command, new: str) -> click.Command:
    """A hidden copy of ``cmd`` to register under its former name, deprecated for this release:
    scripts that use the old name keep working and are told ``new``."""
    old = copy.copy(cmd)
    old.hidden = True
    old.deprecated = RENAMED.format(new=f"`{new}`")
    return old


def renamed_option(old: str, dest: str, new: str, **kwargs: Any):
    """Decorator: the hidden option ``old`` (e.g. ``--check``), the former name of the option whose
    parameter is ``dest``, deprecated for this release; a value given under the old name is the
    command's ``dest``. ``kwargs``: the option's type and the like, as the new one's."""
    name = old.split("/")[0].lstrip("-").replace("-", "_")

    def decorate(fn):
        @functools.wraps(fn)
        def command(*args: Any, **kw: Any) -> Any:
            value = kw.pop(name, None)
            if value is not None:
                kw[dest] = value
            return fn(*args, **kw)

        return click.option(old, name, default=None, hidden=True, deprecated=RENAMED.format(new=new), **kwargs)(command)

    return decorate


def handle_errors(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except SpecdecError as exc:
            err = click.ClickException(str(exc))
            err.exit_code = getattr(exc, "exit_code", err.exit_code)  # a signal's (analytics.build.Interrupted)
            raise err from exc
        except ValidationError as exc:  # a config built from options
            msgs = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise click.ClickException(f"invalid settings: {msgs}") from exc

    return wrapper


run_dir_arg = click.argument(
    "run_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=str(LATEST_RUN),
)


def slo_options(fn):
    """--slo-ttft-p95-ms and --slo-tpot-p95-ms: the latency SLO of the capacity_under_slo
    mart (analytics/settings.py); the command gets them as ``slo_ttft_p95_ms``
    and ``slo_tpot_p95_ms`` and turns them into a Slo with ``slo_of``."""
    fn = click.option(
        "--slo-tpot-p95-ms",
        type=PositiveFloat,
        default=None,
        help="Capacity SLO: p95 time per output token at most this many ms (default 100).",
    )(fn)
    fn = click.option(
        "--slo-ttft-p95-ms",
        type=PositiveFloat,
        default=None,
        help="Capacity SLO: p95 time to first token at most this many ms (default 2000).",
    )(fn)
    return fn


def slo_of(ttft_p95_ms: float | None, tpot_p95_ms: float | None):
    """The Slo of the two options; None (the defaults, said as 'default') when neither is given."""

    if ttft_p95_ms is None and tpot_p95_ms is None:
        return None
    return Slo(
        ttft_p95_ms=DEFAULT_SLO.ttft_p95_ms if ttft_p95_ms is None else ttft_p95_ms,
        tpot_p95_ms=DEFAULT_SLO.tpot_p95_ms if tpot_p95_ms is None else tpot_p95_ms,
        source="given",
    )


@contextlib.contextmanager
def build_bar(enabled: bool, stream=None):
    """A progress callback for ``build`` that draws a bar on ``stream`` (standard error)
    while the build runs, removed when it ends; None when ``stream`` is not a terminal
    or the bar is off."""
    stream = stream or sys.stderr
    if not (enabled and getattr(stream, "isatty", lambda: False)()):
        yield None
        return
    from rich.console import Console  # heavy: rich, imported only when used

    # heavy (rich): only when the command runs
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("building"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[model]}"),
        console=Console(file=stream),
        transient=True,
    ) as bar:
        task = bar.add_task("build", total=None, model="checking the inputs")

        def progress(done: int, total: int, name: str) -> None:
            bar.update(task, completed=done, total=total, model=name)

        yield progress


def parse_levels(text: str) -> list[int]:
    """``--levels`` text -> levels, by the rules of ``specdec.cli.params.LevelList``
    (for commands that take the option as a plain string)."""
    try:
        return LevelList.convert(text, None, None)
    except click.BadParameter as exc:
        raise click.BadParameter(exc.message, param_hint="'--levels'") from None


def report_stopped_run(exc: SpecdecError) -> None:
    """A run that stopped on an error (a failed warm-up, a dead server) still
    gets its report of what was recorded, before the error is shown."""
    run_dir = getattr(exc, "run_dir", None)
    if run_dir is None:
        return
    from specdec.analytics.report.write import write_report  # heavy (pyarrow, numpy): only when the command runs

    try:
        path, _ = write_report(run_dir)
    except SpecdecError:
        return  # nothing usable was recorded; the error itself says why
    click.echo(f"the run stopped; report of what was recorded before it: {path.resolve()}", err=True)


def finish_run(run_dir: Path, slo=None, progress: bool = True) -> None:
    """After a replay: build the marts (a progress bar on a terminal unless ``progress`` is
    False), write the report, print the summary, and exit 1 (after writing everything)
    when any level failed."""
    # heavy (pyarrow, numpy): only when the command runs
    from specdec.analytics.report.write import failed_levels, write_report

    with build_bar(progress) as bar:
        path, summary = write_report(run_dir, slo=slo, progress=bar)
    click.echo(summary)
    click.echo(f"report: {path.resolve()}")
    failed = failed_levels(run_dir)
    if failed:
        raise click.ClickException(
            f"{len(failed)} level(s) failed (share of failed requests above the run's max_error_rate): "
            + ", ".join(failed)
            + ". No speedup or lossless figure was computed from them; see the report."
        )


def look_factory(cfg):
    """A sequential run's looks (``run_replay``'s ``look_factory``): the analytics' look at
    the run folder (``specdec.analytics.sequential_look.look_fn``) with the run's
    ``max_repeats`` and ``margin``; ``specdec-replay`` and ``specdec demo`` pass it."""
    from specdec.analytics.sequential_look import look_fn  # heavy (duckdb): only for a sequential run

    max_repeats, margin = cfg.max_repeats, cfg.margin
    assert max_repeats is not None  # called for a sequential design only

    def factory(run_dir: Path, looks: list[dict]):
        return look_fn(run_dir, max_repeats, margin, looks)

    return factory
