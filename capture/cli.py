"""``specdec-capture``: run a vLLM server with the capture plugin switched on
(the sidecar use), and summarize a capture folder."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from specdec.cli import handle_errors
from specdec.errors import InputFileError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Record one row per request per speculative round inside vLLM.

    \b
    The recorder is a vLLM general plugin (entry point vllm.general_plugins,
    no change to vLLM). It is inert unless SPECDEC_CAPTURE_DIR is set in the
    server's environment; `specdec-capture serve` sets it for you.
    """


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option("--dir", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Where rounds-*.parquet part files are written.")
@click.option("--run-id", default="adhoc", show_default=True, help="Value of the run_id column.")
@click.option("--flush-s", default=1.0, show_default=True, help="Seconds between Parquet flushes.")
@click.argument("vllm_args", nargs=-1, type=click.UNPROCESSED)
def serve(out_dir: Path, run_id: str, flush_s: float, vllm_args: tuple[str, ...]) -> None:
    """Start vLLM's OpenAI server with capture on; VLLM_ARGS go to vLLM.

    Example: specdec-capture serve --dir cap -- --model DIR --speculative-config '{"method":"ngram","num_speculative_tokens":4}'
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    os.environ.update({"SPECDEC_CAPTURE_DIR": str(out_dir.resolve()), "SPECDEC_CAPTURE_RUN_ID": run_id,
                       "SPECDEC_CAPTURE_FLUSH_S": str(flush_s)})
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", *vllm_args]
    os.execv(sys.executable, cmd)


@main.command()
@click.argument("capture_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@handle_errors
def summary(capture_dir: Path) -> None:
    """Print rows, requests, verify rounds and pooled acceptance of a capture folder."""
    import duckdb

    files = sorted(capture_dir.glob("rounds-*.parquet")) or sorted(capture_dir.glob("rounds.parquet"))
    if not files:
        raise InputFileError(capture_dir, "no rounds-*.parquet files")
    con = duckdb.connect()
    row = con.execute(
        """select count(*), count(distinct engine_request_id), count(*) filter (tokens_proposed > 0),
                  sum(tokens_proposed), sum(tokens_accepted)
           from read_parquet(?)""", [[str(f) for f in files]]).fetchone()
    rows, reqs, rounds, proposed, accepted = row
    click.echo(f"{len(files)} files, {rows} rows, {reqs} requests, {rounds} verify rounds")
    if rounds:
        click.echo(f"acceptance rate (pooled, accepted/proposed): {accepted / proposed:.3f}")
        click.echo(f"mean acceptance length (pooled, 1 + accepted/rounds): {1 + accepted / rounds:.3f}")


@main.command()
@click.option("--dir", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Capture folder (default: a temporary folder).")
@click.option("--model", default=None, help="Model folder (default: the prepared SmolLM2).")
@click.option("--dtype", default="bfloat16", show_default=True)
@click.option("--spec-config", default='{"method": "ngram", "num_speculative_tokens": 4, '
              '"prompt_lookup_min": 2, "prompt_lookup_max": 4}', show_default=True,
              help="vLLM speculative config JSON.")
@click.option("--max-tokens", default=48, show_default=True)
@click.option("--json-out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the result as JSON here.")
@handle_errors
def selfcheck(out_dir, model, dtype, spec_config, max_tokens, json_out) -> None:
    """Run a few prompts in an in-process vLLM engine with capture on and check
    that the captured rounds equal vLLM's own spec_decode counters. Exit 1 if not."""
    import json
    import tempfile

    from specdec.capture.selfcheck import run_selfcheck

    if model is None:
        from specdec.model import prepare_model

        model = str(prepare_model().path)
    out_dir = out_dir or Path(tempfile.mkdtemp(prefix="specdec-selfcheck-"))
    result = run_selfcheck(out_dir, model, json.loads(spec_config), dtype=dtype, max_tokens=max_tokens)
    text = json.dumps(result, indent=2)
    if json_out:
        json_out.write_text(text)
    click.echo(text)
    if not result["match"]:
        raise SystemExit(1)


if __name__ == "__main__":  # pragma: no cover
    main()
