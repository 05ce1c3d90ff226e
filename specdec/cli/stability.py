"""``specdec stability``: the command over ``specdec.experiments.stability`` (the probes,
the run folder), then the marts and the report of the run it wrote."""

from __future__ import annotations

from pathlib import Path

import click

from specdec.cli.common import handle_errors
from specdec.cli.options import client_options
from specdec.cli.params import PositiveFloat, StrictFloatType, StrictIntType
from specdec.cli.params import RunName as RunNameParam
from specdec.experiments.stability import StabilityConfig, fault_table, run_stability, table_text
from specdec.replay.config import default_of as config_default_of


def default_of(name: str):
    return config_default_of(name, StabilityConfig)


@click.command("stability")
@click.option(
    "--url",
    default=None,
    help="Probe this loopback server (127.0.0.0/8, ::1, localhost) instead of "
    "starting the embedded vLLM. Its kill/restart probe is skipped.",
)
@click.option(
    "--runs-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=default_of("runs_dir"),
    show_default=True,
    help="Where run folders go.",
)
@click.option(
    "--run-id", type=RunNameParam, default=None, help="Run folder name (a plain name; default: UTC timestamp)."
)
@click.option(
    "--concurrency",
    type=StrictIntType(1, 64),
    default=default_of("concurrency"),
    show_default=True,
    help="Concurrency of the soak, 1..64; the burst sends 4x this at once (embedded: also the server's max_num_seqs).",
)
@click.option(
    "--soak-minutes",
    type=StrictFloatType(0.0, 120.0, exclusive_min=True),
    default=default_of("soak_minutes"),
    show_default=True,
    help="Length of the soak in minutes (0 < x <= 120).",
)
@client_options()
@click.option(
    "--probe-timeout",
    type=PositiveFloat,
    default=default_of("probe_timeout_s"),
    show_default=True,
    help="Longest time one probe may take (the soak gets its minutes on top).",
)
@click.option("--served-model", default=None, help="Model name for --url (default: the first of GET /v1/models).")
def stability_command(**options) -> None:
    """Probe one server with faults on purpose and say whether it coped:
    empty/whitespace and over-long prompts, odd Unicode, extreme temperature
    and top_p, clients that disconnect mid-stream, a burst, a soak with an RSS
    trend, a kill and restart, and greedy outputs re-checked after all that.
    Writes a run folder with stability.parquet, the marts and report.html;
    exits 1 if any fault's outcome is failed."""
    handle_errors(_stability)(**options)


def _stability(
    url,
    runs_dir,
    run_id,
    concurrency,
    soak_minutes,
    connect_timeout,
    request_timeout,
    probe_timeout,
    api_key_env,
    served_model,
) -> None:
    cfg = StabilityConfig(
        url=url,
        runs_dir=runs_dir,
        run_id=run_id,
        concurrency=concurrency,
        soak_minutes=soak_minutes,
        connect_timeout_s=connect_timeout,
        request_timeout_s=request_timeout,
        probe_timeout_s=probe_timeout,
        api_key_env=api_key_env,
        served_model=served_model,
    )
    run_dir, rows = run_stability(cfg, echo=click.echo)
    click.echo(table_text(rows))
    from specdec.analytics.report.write import write_report  # heavy (pyarrow, numpy): only when the command runs

    path, _ = write_report(run_dir)
    click.echo(f"report: {path.resolve()}")
    failed = [f["fault"] for f in fault_table(rows) if f["outcome"] == "failed"]
    if failed:
        raise click.ClickException(f"{len(failed)} fault type(s) failed: {', '.join(failed)}; see the table above")
