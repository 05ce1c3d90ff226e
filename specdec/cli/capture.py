"""``specdec-capture``: run a vLLM server with the capture plugin switched on
(the sidecar use), summarize a capture folder, and record a service's own
traffic with a transparent reverse proxy (``proxy``, ``proxy-export``)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path

import click
from pydantic import ValidationError

from specdec.arms import NGRAM
from specdec.capture.plugin.reconcile import run_reconcile
from specdec.capture.settings import SettingError, flush_seconds, usable_dir
from specdec.cli.common import handle_errors, renamed_command
from specdec.cli.options import recording_options
from specdec.defaults import DTYPE
from specdec.errors import InputFileError
from specdec.listen import warn_if_exposed
from specdec.model import prepare_model
from specdec.runfolder import (
    ENV_CAPTURE_DIR,
    ENV_CAPTURE_FLUSH_S,
    ENV_CAPTURE_RUN_ID,
    ROUND_PART_GLOB,
    files_of,
    record_file,
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Record one row per request per speculative round inside vLLM.

    \b
    The recorder is a vLLM general plugin (entry point vllm.general_plugins,
    no change to vLLM). It is inert unless SPECDEC_CAPTURE_DIR is set in the
    server's environment; `specdec-capture serve` sets it for you (and keeps
    vLLM on 127.0.0.1 unless you pass --host).
    """


def _flush_s_option(ctx, param, value: float) -> float:

    try:
        return flush_seconds(value, "--flush-s")
    except SettingError as exc:
        raise click.BadParameter(str(exc)) from None


def _has_host(vllm_args: tuple[str, ...]) -> bool:
    return any(a == "--host" or a.startswith("--host=") for a in vllm_args)


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option(
    "--dir",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help=f"Where {ROUND_PART_GLOB} part files are written.",
)
@click.option("--run-id", default="adhoc", show_default=True, help="Value of the run_id column.")
@click.option(
    "--flush-s",
    type=float,
    default=1.0,
    show_default=True,
    callback=_flush_s_option,
    help="Seconds between Parquet flushes (0.01 to 3600).",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address vLLM listens on: loopback unless you say otherwise (here or among VLLM_ARGS, not both).",
)
@click.argument("vllm_args", nargs=-1, type=click.UNPROCESSED)
@handle_errors
def serve(out_dir: Path, run_id: str, flush_s: float, host: str, vllm_args: tuple[str, ...]) -> None:
    """Start vLLM's OpenAI server with capture on; VLLM_ARGS go to vLLM.

    Example: specdec-capture serve --dir cap -- --model DIR --speculative-config '{"method":"ngram","num_speculative_tokens":4}'
    """

    if not _has_host(vllm_args):
        host_args = ["--host", host]
    elif click.get_current_context().get_parameter_source("host") is click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError("--host given twice (before and among VLLM_ARGS): give it once")
    else:
        host_args = []  # the user's own --host among VLLM_ARGS
    try:
        out_dir = usable_dir(out_dir, "--dir")
    except SettingError as exc:
        raise click.ClickException(str(exc)) from None
    os.environ.update(
        {ENV_CAPTURE_DIR: str(out_dir.resolve()), ENV_CAPTURE_RUN_ID: run_id, ENV_CAPTURE_FLUSH_S: repr(flush_s)}
    )
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", *host_args, *vllm_args]
    os.execv(sys.executable, cmd)


@main.command()
@click.argument("capture_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@handle_errors
def summary(capture_dir: Path) -> None:
    """Print rows, requests, verify rounds and pooled acceptance of a capture folder."""
    import duckdb  # heavy: duckdb, imported only when used

    # a capture folder, or a run folder (its rounds.parquet, else capture/rounds-*)
    files = sorted(capture_dir.glob(ROUND_PART_GLOB)) or files_of(capture_dir, record_file("rounds"))
    if not files:
        raise InputFileError(capture_dir, f"no {ROUND_PART_GLOB} files")
    con = duckdb.connect()
    row = con.execute(
        """select count(*), count(distinct engine_request_id), count(*) filter (tokens_proposed > 0),
                  sum(tokens_proposed), sum(tokens_accepted)
           from read_parquet(?)""",
        [[str(f) for f in files]],
    ).fetchone()
    assert row is not None  # an aggregate query returns one row
    rows, reqs, rounds, proposed, accepted = row
    click.echo(f"{len(files)} files, {rows} rows, {reqs} requests, {rounds} verify rounds")
    if rounds:
        click.echo(f"acceptance rate (pooled, accepted/proposed): {accepted / proposed:.3f}")
        click.echo(f"mean acceptance length (pooled, 1 + accepted/rounds): {1 + accepted / rounds:.3f}")


@main.command()
@click.option(
    "--dir",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Capture folder (default: a temporary folder, removed at the end).",
)
@click.option("--model", default=None, help="Model folder (default: the prepared SmolLM2).")
@click.option("--dtype", default=DTYPE, show_default=True)
@click.option(
    "--spec-config",
    default=json.dumps(NGRAM["vllm"]),
    show_default=True,
    help="vLLM speculative config JSON.",
)
@click.option("--max-tokens", default=48, show_default=True)
@click.option(
    "--json-out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the result as JSON here.",
)
@handle_errors
def reconcile(out_dir, model, dtype, spec_config, max_tokens, json_out) -> None:
    """Run a few prompts in an in-process vLLM engine with capture on and reconcile
    the captured rounds with vLLM's own spec_decode counters: they must be equal.
    Exit 1 if not. Without --dir the captured rows go to a temporary folder that is
    removed at the end (the JSON result keeps the counts)."""

    if model is None:
        model = str(prepare_model().path)
    with contextlib.ExitStack() as stack:
        if out_dir is None:
            out_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="specdec-reconcile-")))
        result = run_reconcile(out_dir, model, json.loads(spec_config), dtype=dtype, max_tokens=max_tokens)
    text = json.dumps(result, indent=2)
    if json_out:
        json_out.write_text(text)
    click.echo(text)
    if not result["match"]:
        raise SystemExit(1)


# `selfcheck` was this command's name until 2026-12-07 ("check" names the report's checks)
main.add_command(renamed_command(reconcile, "specdec-capture reconcile"), "selfcheck")


def _listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", value
    if not port.isdigit() or not 0 <= int(port) <= 65535 or not host:
        raise click.BadParameter(f"{value!r}: expected HOST:PORT, e.g. 127.0.0.1:8001")
    return host.strip("[]"), int(port)


@main.command()
@click.option("--upstream", required=True, help="Base URL of the OpenAI-compatible server, e.g. http://127.0.0.1:8000.")
@click.option(
    "--listen",
    default="127.0.0.1:8001",
    show_default=True,
    help="HOST:PORT to listen on: loopback unless you say otherwise (port 0: any free port).",
)
@recording_options()
@click.option(
    "--tokenizer",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="tokenizer.json for the token lengths of --content hash (default: a stated approximation).",
)
@click.option(
    "--flush-s",
    type=float,
    default=2.0,
    show_default=True,
    callback=_flush_s_option,
    help="Seconds between Parquet flushes (0.01 to 3600).",
)
@click.option(
    "--header-timeout-s",
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="Seconds a client gets to send a request's headers (from connecting, or from the first byte "
    "of a next request), and at most between two pieces of its body; then 408 and the connection is "
    "closed (slow clients, slowloris).",
)
@click.option(
    "--upstream-idle-s",
    type=click.FloatRange(min=0, min_open=True),
    default=600.0,
    show_default=True,
    help="Seconds without a byte from the upstream before the proxy gives up: 504 before the reply "
    "began, a closed stream after (counted at /specdec/stats). A reply that is not streamed "
    "sends nothing until it is complete: keep this above your longest generation.",
)
@handle_errors
def proxy(upstream, listen, out, content, rules, tokenizer, flush_s, header_timeout_s, upstream_idle_s) -> None:
    """Forward an OpenAI-compatible API unchanged (streaming included) and
    record each chat/completions request as a traffic row.

    \b
    Category: the X-Specdec-Category header, else --rules, else 'unknown'.
    Session: the X-Specdec-Session header (turn = earlier assistant messages).
    Authorization and cookies pass through and are never recorded. Counters:
    GET /specdec/stats on the proxy. Stop with Ctrl-C (or SIGTERM): every
    recorded row is written first; exit 1 if some could not be (the message
    says how many). Then: specdec-capture proxy-export.
    """
    # heavy (aiohttp, pyarrow): only when the command runs
    from specdec.capture.proxy.service import ProxySettings, exposure, run_proxy

    host, port = _listen(listen)
    try:
        out_dir = usable_dir(out, "--out")
    except SettingError as exc:
        raise click.ClickException(str(exc)) from None
    settings = ProxySettings(
        upstream=upstream,
        host=host,
        port=port,
        out_dir=out_dir,
        content=content,
        rules=rules,
        tokenizer=tokenizer,
        flush_s=flush_s,
        header_timeout_s=header_timeout_s,
        upstream_idle_s=upstream_idle_s,
    )
    warn_if_exposed(host, exposure(settings), emit=lambda text: click.echo(text, err=True))
    run_proxy(settings, announce=lambda text: click.echo(text))


@main.command()
@click.option(
    "--capture-dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help=f"The server's SPECDEC_CAPTURE_DIR (`serve --dir`), where the plugin writes {ROUND_PART_GLOB}.",
)
@click.option(
    "--lake",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Root of the Parquet lake: rounds/date=YYYY-MM-DD/run_id=RUN/ and counters/date=YYYY-MM-DD/.",
)
@click.option(
    "--server", required=True, help="Base URL of the vLLM server whose /metrics is read, e.g. http://127.0.0.1:8000."
)
@click.option(
    "--listen",
    default="127.0.0.1:9464",
    show_default=True,
    help="HOST:PORT of the sidecar's own /metrics and /healthz: loopback unless you say otherwise "
    "(port 0: any free port; any other address warns at start: nothing there authenticates). "
    '/healthz answers 503 "degraded" while the server\'s /metrics cannot be read.',
)
@click.option(
    "--compact-s",
    type=float,
    default=10.0,
    show_default=True,
    help="Seconds between moves of finished part files into the lake.",
)
@click.option(
    "--scrape-s",
    type=float,
    default=5.0,
    show_default=True,
    help="Seconds between reads of the server's /metrics (written to the lake at least every 30 s).",
)
@click.option(
    "--window-s",
    type=float,
    default=60.0,
    show_default=True,
    help="Window of the rolling acceptance rate and length gauges, in seconds of row wall time.",
)
@click.option(
    "--proxy-listen",
    default=None,
    metavar="HOST:PORT",
    help="Also run the recording proxy (as `specdec-capture proxy`) in this process, in front of "
    "--server, listening here (loopback unless you say otherwise).",
)
@recording_options("proxy-", out_default="LAKE/traffic")
@handle_errors
def sidecar(
    capture_dir,
    lake,
    server,
    listen,
    compact_s,
    scrape_s,
    window_s,
    proxy_listen,
    proxy_out,
    proxy_content,
    proxy_rules,
) -> None:
    """Run beside a vLLM server with capture on: compact its part files into a
    Parquet lake, record its /metrics counters there, and serve live
    acceptance metrics for Prometheus (alert rules: capture/alerts/specdec-alerts.yml).

    \b
    With --proxy-listen the same process also records the server's traffic
    (the recording proxy, in front of --server): point clients at it. The
    rounds of the requests it forwards then also count in per-category
    gauges (specdec_category_acceptance_rate{category=...}): the category is
    the X-Specdec-Category header, else the first --proxy-rules rule that
    matches, else "unknown".
    Stop with Ctrl-C (or SIGTERM): one last compaction and every counter row
    (and every recorded traffic row) are written first. A part file that
    cannot be read stays in place and is counted (specdec_sidecar_rows_dropped_total).
    Rows that could not be written at the stop (counter rows, proxy rows: a
    full disk, say) make it exit 1, saying how many of each.
    """
    from specdec.capture.proxy.service import ProxySettings  # heavy (aiohttp, pyarrow): only when the command runs

    # heavy (aiohttp, pyarrow): only when the command runs
    from specdec.capture.sidecar.service import SidecarSettings, run_sidecar

    host, port = _listen(listen)
    if proxy_listen is None and (proxy_out is not None or proxy_rules is not None):
        raise click.UsageError("--proxy-out and --proxy-rules need --proxy-listen (the proxy is off without it)")
    try:
        capture_dir, lake = usable_dir(capture_dir, "--capture-dir"), usable_dir(lake, "--lake")
        proxy = None
        if proxy_listen is not None:
            proxy_host, proxy_port = _listen(proxy_listen)
            proxy = ProxySettings(
                upstream=server,
                host=proxy_host,
                port=proxy_port,
                content=proxy_content,
                rules=proxy_rules,
                out_dir=usable_dir(proxy_out or lake / "traffic", "--proxy-out"),
            )
        settings = SidecarSettings(
            capture_dir=capture_dir,
            lake=lake,
            server=server,
            host=host,
            port=port,
            compact_s=compact_s,
            scrape_s=scrape_s,
            window_s=window_s,
            proxy=proxy,
        )
    except SettingError as exc:
        raise click.ClickException(str(exc)) from None
    except ValidationError as exc:
        err = exc.errors()[0]
        raise click.BadParameter(err["msg"], param_hint="--" + str(err["loc"][0]).replace("_", "-")) from None
    run_sidecar(settings, announce=lambda text: click.echo(text))


@main.command("proxy-export")
@click.argument("proxy_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "-o",
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("traffic.parquet"),
    show_default=True,
    help="The traffic file to write.",
)
@click.option("--since", default=None, metavar="YYYY-MM-DD", help="First date partition to include.")
@click.option("--until", default=None, metavar="YYYY-MM-DD", help="Last date partition to include.")
@handle_errors
def proxy_export(proxy_dir, out, since, until) -> None:
    """Merge a proxy's part files into one traffic file for specdec-replay."""
    from specdec.capture.proxy.export import export_traffic  # heavy (pyarrow): only when the command runs

    click.echo(json.dumps(export_traffic(proxy_dir, out, since, until)))


if __name__ == "__main__":  # pragma: no cover
    main()
