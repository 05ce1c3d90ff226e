"""``specdec-replay TRAFFIC``: the replay command line."""

from __future__ import annotations

import json
from pathlib import Path

import click

from specdec.cli import handle_errors, parse_levels


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("traffic", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--levels", default="1,2,4,8", show_default=True,
              help="Closed-loop concurrency levels, comma-separated (e.g. 1,2,4,8,16,32).")
@click.option("--arms", default="baseline,speculative", show_default=True,
              help="Arms to run, in order.")
@click.option("--spec-config", default=None,
              help='vLLM --speculative-config JSON for the speculative arm '
                   '(default: {"method":"ngram","num_speculative_tokens":4,...}).')
@click.option("--requests-per-level", type=int, default=None,
              help="Requests per level (default: every traffic row once).")
@click.option("--max-tokens", type=int, default=None, help="Override every row's output length.")
@click.option("--warmup", type=int, default=2, show_default=True, help="Unrecorded warm-up requests per arm.")
@click.option("--runs-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("runs"),
              show_default=True, help="Parent of run folders; runs/latest points at the newest.")
@click.option("--run-id", default=None, help="Run folder name (default: UTC timestamp).")
@click.option("--model", default=None, help="Embedded engine: model folder (default: prepared SmolLM2).")
@click.option("--dtype", default="bfloat16", show_default=True, help="Embedded engine: dtype of both arms.")
@click.option("--baseline-url", default=None, help="External server without speculation (skips the embedded engine).")
@click.option("--speculative-url", default=None, help="External server with speculation.")
@click.option("--served-model", default="specdec-target", show_default=True,
              help="Model name sent in requests to external servers.")
@click.option("--no-progress", is_flag=True, help="Plain log lines instead of progress bars.")
@handle_errors
def main(traffic: Path, levels: str, arms: str, spec_config: str | None, requests_per_level, max_tokens,
         warmup: int, runs_dir: Path, run_id, model, dtype, baseline_url, speculative_url,
         served_model, no_progress) -> None:
    """Replay TRAFFIC (.parquet or .jsonl of prompt_id, category, prompt,
    max_tokens, temperature) in two arms that differ only in speculation.

    \b
    Without --baseline-url/--speculative-url it starts a local vLLM server per
    arm (CPU engine, capture plugin on), waits for /health, runs every level
    and stops it. Per request it records TTFT, chunk arrival times, output
    tokens and text, errors and vLLM's per-request speculative metrics; around
    each level it reads vLLM's /metrics counters. Output: runs/<run-id>/.
    """
    from specdec.replay.config import DEFAULT_SPEC_CONFIG, ReplayConfig
    from specdec.replay.experiment import run_replay

    try:
        spec = json.loads(spec_config) if spec_config else dict(DEFAULT_SPEC_CONFIG)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint="--spec-config") from None
    cfg = ReplayConfig(
        traffic=traffic, runs_dir=runs_dir, run_id=run_id, levels=parse_levels(levels),
        arms=[a.strip() for a in arms.split(",") if a.strip()], speculative_config=spec,
        requests_per_level=requests_per_level, warmup_requests=warmup, max_tokens=max_tokens,
        model=model, dtype=dtype, baseline_url=baseline_url, speculative_url=speculative_url,
        served_model=served_model, progress=not no_progress,
    )
    run_dir = run_replay(cfg)
    click.echo(f"run written to {run_dir}")
