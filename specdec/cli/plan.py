"""``specdec plan RUN -o PLAN_DIR``: which speculative setting to deploy per category and
load band, predicted from the run's captured rounds and step timings
(``specdec.analytics.plan``), with the engine exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click

from specdec.atomic import atomic_write_text
from specdec.cli.common import handle_errors
from specdec.cli.params import MixParam
from specdec.defaults import RUNS_DIR

#: The largest draft length ``--k`` and ``--sweep-k`` take.
MAX_K = 64


class KRange(click.ParamType):
    """``A..B`` (inclusive) or comma-separated whole numbers 0..MAX_K -> sorted list; a range is
    checked before its list is built."""

    name = "k"

    def convert(self, value, param, ctx) -> list[int]:
        if isinstance(value, list):
            return value
        text = str(value).strip()
        m = re.fullmatch(r"(\d+)\.\.(\d+)", text)
        if m:
            lo, hi = int(m[1]), int(m[2])
            if lo > hi:
                self.fail(f"{value!r}: the range's start is above its end", param, ctx)
            if hi > MAX_K:  # checked before the list is built: 0..1000000000 would not fit in memory
                self.fail(f"{value!r}: k above {MAX_K}", param, ctx)
            return list(range(lo, hi + 1))
        if not re.fullmatch(r"\d+(,\d+)*", text):
            self.fail(f"{value!r}: expected A..B or comma-separated whole numbers, such as 0..8 or 0,2,4", param, ctx)
        out = sorted({int(p) for p in text.split(",")})
        if out[-1] > MAX_K:
            self.fail(f"{value!r}: k above {MAX_K}", param, ctx)
        return out


@click.command("plan")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path), help="Plan folder."
)
@click.option(
    "--mix", type=MixParam(), default=None, help="Request shares per category (default: the run's own shares)."
)
@click.option(
    "--slo-ttft-p95-ms",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="No speculation where the speculative arm's measured p95 TTFT exceeded this [ms].",
)
@click.option("--k", "ks", type=KRange(), default="0..8", show_default=True, help="Draft lengths to consider.")
@click.option(
    "--rules",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="The recording proxy's rules file that categorised the traffic: exported again with pools as categories.",
)
@click.option("--run-id", default=None, help="The analysis run to plan (a run of named arms has several).")
@click.option(
    "--db",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Plan from this database, built already (specdec analytics build RUN_DIR), instead of rebuilding "
    "RUN_DIR/specdec.duckdb first.",
)
@click.option("--replicates", type=click.IntRange(min=20), default=400, show_default=True, help="Bootstrap replicates.")
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap seed.")
@click.option(
    "--skip-bad",
    is_flag=True,
    help="Leave out step times (verify_ms, draft_ms) that are NaN, infinite or negative, counted in a note, "
    "instead of refusing the run.",
)
@click.option(
    "--validate",
    is_flag=True,
    help="Replay the plan's k (and one rejected k) at its levels on the embedded engine (a --sweep-k run of the "
    "same traffic; many minutes), or, for a run recorded against external servers, the servers given by "
    "--baseline-url/--speculative-url (required then), and write plan_validation.json; the plan is validated only "
    "if it passes. Exits non-zero when nothing could be validated (every request failed).",
)
@click.option(
    "--baseline-url",
    default=None,
    help="--validate of a run recorded against external servers: the server without speculation.",
)
@click.option(
    "--speculative-url",
    default=None,
    help="--validate of a run recorded against external servers: the server with speculation (the plan's setting).",
)
@click.option(
    "--validate-with",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Validate against a run made already (a --sweep-k run of the same traffic and levels) instead of replaying.",
)
@click.option(
    "--runs-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=RUNS_DIR,
    show_default=True,
    help="Where --validate writes its replay run.",
)
@handle_errors
def plan_command(
    run_dir: Path,
    out_dir: Path,
    mix: dict[str, float] | None,
    slo_ttft_p95_ms: float | None,
    ks: list[int],
    rules: Path | None,
    run_id: str | None,
    db: Path | None,
    replicates: int,
    seed: int,
    skip_bad: bool,
    validate: bool,
    validate_with: Path | None,
    baseline_url: str | None,
    speculative_url: str | None,
    runs_dir: Path,
) -> None:
    """Plan RUN_DIR's speculation: per category and load band the k to deploy (0 = off) with its
    predicted speedup, three policies' traffic-weighted gains, and the vLLM, llama.cpp and
    routing exports, in PLAN_DIR (plan.json, plan.html). Predicted, not validated by replay."""
    from specdec.analytics.build import interruptible  # heavy: pyarrow
    from specdec.analytics.plan.run import PlanConfig, make_plan, write_plan  # heavy: duckdb, numpy
    from specdec.capture.proxy.rules import load_rules

    rules_data = None
    if rules is not None:
        load_rules(rules)  # checked as the proxy checks it
        rules_data = json.loads(rules.read_text(encoding="utf-8"))
    config = PlanConfig(
        ks=tuple(ks),
        mix=mix,
        slo_ttft_p95_ms=slo_ttft_p95_ms,
        replicates=replicates,
        seed=seed,
        run_id=run_id,
        rules=rules_data,
        skip_bad=skip_bad,
    )
    if validate and validate_with is not None:
        raise click.UsageError("--validate replays; --validate-with uses a run made already: give one of them")
    urls = (baseline_url, speculative_url)
    if not validate and any(urls):
        raise click.UsageError("--baseline-url/--speculative-url are the servers --validate replays: give --validate")
    if validate:
        from specdec.cli.plan_validate import validation_target

        urls = validation_target(run_dir, urls)  # refused here, before planning or starting anything
    # SIGTERM, SIGINT: one line, exit 143 or 130, no temporary file left (analytics.build.interruptible);
    # not around the validation replay, which runs engine servers (specdec.engines.lifecycle owns their signals)
    with interruptible():
        plan = make_plan(run_dir, config, db)
    outcome = None
    if validate or validate_with is not None:
        from specdec.cli.plan_validate import replay_validation, validate_against

        target = validate_with if validate_with is not None else replay_validation(plan, run_dir, runs_dir, urls)
        result = validate_against(plan, target)
        outcome = result["outcome"]
        plan["validated"] = outcome == "validated"
        plan["validation"] = _validation_text(result, target)
        out_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out_dir / "plan_validation.json", json.dumps(result, indent=2))
    with interruptible():
        write_plan(plan, out_dir)
    state = "validated by replay" if plan["validated"] else "not validated"
    click.echo(f"What to deploy (predicted from {plan['run_id']}, captured k = {plan['captured_k']}; {state}):")
    deployed = next(p for p in plan["policies"] if p["name"] == "k_per_band_with_fallback")
    compared = [deployed] + [p for p in plan["policies"] if p is not deployed]
    for p in compared:
        o = p["overall"]
        bands = "; ".join(f"c{b['level']}: " + ",".join(f"{c}={k}" for c, k in b["k"].items()) for b in p["bands"])
        tag = "deploy" if p is deployed else "compare"
        click.echo(f"  {tag} {p['name']}: gain {o['gain']:.3f} [{o['low']:.3f}, {o['high']:.3f}]  ({bands})")
    for export in plan["exports"]["engines"].values():
        click.echo(f"  {export['label']}: {export['command'] or '(speculation off)'}")
    rule = plan["decision_rule"]
    click.echo(
        f"  rule: off unless a k's predicted speedup and its {rule['confidence']:.0%} interval clear 1; the best "
        f"such k, or a smaller one within the margin ({rule['margin']:.0%}) by the paired ratio (plan.html states it)"
    )
    for note in plan["notes"]:
        click.echo(f"  note: {note}")
    click.echo(f"validation: {plan['validation']}")
    click.echo(f"wrote {out_dir / 'plan.html'} and {out_dir / 'plan.json'}")
    if outcome == "not validated":  # nothing could be compared: a failure of the command, not of the plan
        raise click.ClickException(plan["validation"])


def _validation_text(result: dict, target: Path) -> str:
    """plan.json's ``validation``: the outcome against the validation run, and why (plan_validation.json)."""
    if result["outcome"] == "not validated":
        return f"not validated against {target}: {result['reason']} (plan_validation.json)"
    return (
        f"{'passed' if result['passed'] else 'failed'} against {target}: {result['cells_compared']} cells, "
        f"median absolute error {_fmt(result['median_absolute_relative_error'])}, "
        f"coverage {_fmt(result['coverage'])} of prediction intervals with a median half-width of "
        f"{_fmt(result['median_prediction_half_width'])} (plan_validation.json)"
    )


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"
