"""The click options that several commands share, each read from the config model
that validates it (defaults and help from the pydantic fields, one definition):
the client's timeouts and API key, the schedule, the load mode, the frame of a
run (``specdec demo`` and ``specdec-replay``), and the recording proxy's
(``specdec-capture proxy`` and the proxy ``specdec-capture sidecar`` runs).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, get_args

import click
from click.core import ParameterSource

from specdec.cli.common import renamed_option
from specdec.cli.params import FloatList, NonNegativeInt, PositiveFloat, PositiveInt, UnitInterval
from specdec.replay.config import ClientOptions, ReplayConfig
from specdec.replay.load.modes import LOAD_MODES
from specdec.runfolder import TRAFFIC_PART_LAYOUT

#: the parameters schedule_options declares: each is the ReplayConfig field of the same name
SCHEDULE_FIELDS = ("repeats", "lossless_pass", "samples", "restart_servers", "prefix_cache", "margin")
#: ``--design``'s choices; without it a run that can look is sequential (``design_config``)
DESIGNS = ("sequential", "fixed")
#: client_options' timeouts -> their ReplayConfig fields (--api-key-env, where declared, keeps its name)
CLIENT_FIELDS = {"connect_timeout": "connect_timeout_s", "request_timeout": "request_timeout_s"}
#: the parameters run_options declares: each is the ReplayConfig field of the same name (and
#: --no-progress, which is progress negated)
RUN_FIELDS = ("runs_dir", "requests_per_level", "dtype", "max_error_rate")


def shared_config(params: Mapping[str, Any]) -> dict[str, Any]:
    """The ReplayConfig keywords of the shared run, schedule and client options, from a
    command's parsed parameters (``click.get_current_context().params``): one
    mapping for ``specdec demo`` and ``specdec-replay``."""
    out = {name: params[name] for name in (*SCHEDULE_FIELDS, *RUN_FIELDS)}
    out.update({field: params[name] for name, field in CLIENT_FIELDS.items()})
    out["progress"] = not params["no_progress"]
    if "api_key_env" in params:
        out["api_key_env"] = params["api_key_env"]
    return out


def design_config(
    params: Mapping[str, Any],
    *,
    default_max: Callable[[int], int],
    fixed_repeats: int | None = None,
    closed_loop: bool = True,
) -> tuple[dict[str, Any], str]:
    """The ReplayConfig keywords of ``--design``, ``--max-repeats`` and ``--budget`` (and of
    ``--repeats`` where the design changes its default), with a line that says which design
    the run uses and why.

    Without ``--design`` a run that can look (closed loop, ``--repeats`` at least 2) is
    sequential, up to ``--max-repeats`` or ``default_max(repeats)``; one that cannot is
    fixed, and the line says why. ``--design sequential`` where the run cannot look, and
    ``--max-repeats`` or ``--budget`` with ``--design fixed``, are refused by name.
    ``fixed_repeats``: the fixed design's ``--repeats`` when the option was not given (the
    demo's 5 against its sequential first look after 2)."""
    design, max_repeats, budget = params.get("design"), params.get("max_repeats"), params.get("budget_minutes")
    repeats = params["repeats"]
    given = click.get_current_context().get_parameter_source("repeats") != ParameterSource.DEFAULT
    if design == "fixed":
        if max_repeats is not None or budget is not None:
            raise click.UsageError("--max-repeats and --budget belong to the sequential design, not --design fixed")
        if fixed_repeats is not None and not given:
            return {"repeats": fixed_repeats}, f"design: fixed, {fixed_repeats} repeats"
        return {}, f"design: fixed, {repeats} repeats"
    why_not = None
    if not closed_loop:
        why_not = "open loop (--load) has no looks"
    elif repeats < 2:
        why_not = f"--repeats {repeats}: a look needs 2 repeats"
    if why_not is not None:
        if design == "sequential" or max_repeats is not None or budget is not None:
            raise click.UsageError(f"the sequential design cannot run here: {why_not}; give --design fixed")
        return {}, f"design: fixed, {repeats} repeats ({why_not})"
    most = max_repeats if max_repeats is not None else max(default_max(repeats), repeats)
    out: dict[str, Any] = {"max_repeats": most}
    line = f"design: sequential, first look after repeat {repeats}, at most {most} repeats"
    if budget is not None:
        out["budget_minutes"] = budget
        line += f" or {budget:g} minutes of timed blocks"
    fixed = fixed_repeats if fixed_repeats is not None and not given else repeats
    return out, line + f" (--design fixed: exactly {fixed})"


def schedule_options(
    fn=None, *, repeats: int | None = None, sequential: bool = False, max_repeats_default: str = "2 x --repeats"
):
    """The click options of the schedule (--repeats, --lossless-pass/--no-lossless-pass,
    --samples, --restart-servers, --prefix-cache) and of its reading
    (--margin), defaults and meaning from ReplayConfig; ``repeats`` overrides
    the default number of repeats (the demo's design); ``sequential`` adds
    --design and the sequential design's --max-repeats and --budget (their
    values become ReplayConfig's through ``design_config``; ``max_repeats_default``
    is the words of --max-repeats' default in its help). Used bare
    (``@schedule_options``) or called (``@schedule_options(repeats=4)``)."""
    if fn is None:
        return lambda f: schedule_options(
            f, repeats=repeats, sequential=sequential, max_repeats_default=max_repeats_default
        )

    fields = ReplayConfig.model_fields
    if sequential:
        fn = click.option(
            "--design",
            type=click.Choice(DESIGNS),
            default=None,
            help="sequential (the default wherever the run can look: closed loop and --repeats 2 or "
            "more): a look after --repeats repeats and after each one from then on, repeating only the "
            "levels still undecided, up to --max-repeats or --budget; fixed: exactly --repeats "
            "repeats, as before. docs/manual/sequential.md.",
        )(fn)
        fn = click.option(
            "--budget",
            "budget_minutes",
            type=PositiveFloat,
            default=None,
            metavar="MINUTES",
            help=fields["budget_minutes"].description,
        )(fn)
        fn = click.option(
            "--max-repeats",
            type=click.IntRange(2, 100),
            default=None,
            help=f"{fields['max_repeats'].description} Default here: {max_repeats_default}.",
        )(fn)
    fn = click.option(
        "--margin",
        type=float,
        default=fields["margin"].default,
        show_default=True,
        help=f"{fields['margin'].description} (0 < delta <= 1)",
    )(fn)
    fn = click.option(
        "--prefix-cache",
        type=click.Choice(get_args(fields["prefix_cache"].annotation)),
        default=fields["prefix_cache"].default,
        show_default=True,
        help=fields["prefix_cache"].description,
    )(fn)
    fn = click.option(
        "--restart-servers",
        type=click.Choice(get_args(fields["restart_servers"].annotation)),
        default=fields["restart_servers"].default,
        show_default=True,
        help=fields["restart_servers"].description,
    )(fn)
    fn = click.option(
        "--samples",
        type=NonNegativeInt,
        default=fields["samples"].default,
        show_default=True,
        help=fields["samples"].description,
    )(fn)
    fn = click.option(
        "--lossless-pass/--no-lossless-pass",
        "lossless_pass",
        default=fields["lossless_pass"].default,
        show_default=True,
        help=fields["lossless_pass"].description,
    )(renamed_option("--verify/--no-verify", "lossless_pass", "--lossless-pass/--no-lossless-pass")(fn))
    fn = click.option(
        "--repeats",
        type=PositiveInt,
        default=repeats or fields["repeats"].default,
        show_default=True,
        help=fields["repeats"].description,
    )(fn)
    return fn


def client_options(api_key: bool = True):
    """The click options of ClientOptions (defaults and meaning from the model);
    they arrive as connect_timeout, request_timeout and api_key_env."""
    fields = ClientOptions.model_fields

    def decorate(fn):
        if api_key:
            fn = click.option(
                "--api-key-env",
                default=fields["api_key_env"].default,
                show_default=True,
                metavar="NAME",
                help="Environment variable holding the API key, sent as "
                "'Authorization: Bearer'. Never written to any file.",
            )(fn)
        fn = click.option(
            "--request-timeout",
            type=PositiveFloat,
            default=fields["request_timeout_s"].default,
            show_default=True,
            help="Seconds to wait for the next byte of a reply (the first one included). A hung "
            "server fails within this time; a generation that keeps streaming never times out.",
        )(fn)
        fn = click.option(
            "--connect-timeout",
            type=PositiveFloat,
            default=fields["connect_timeout_s"].default,
            show_default=True,
            help="Seconds to wait for a connection.",
        )(fn)
        return fn

    return decorate


def load_options(fn):
    """The click options of the load mode (--load, --time-scale, --rates,
    --arrival-seed); they arrive as load, time_scales, rates, arrival_seed."""
    fields = ReplayConfig.model_fields
    fn = click.option(
        "--arrival-seed",
        type=int,
        default=fields["arrival_seed"].default,
        show_default=True,
        help=fields["arrival_seed"].description,
    )(fn)
    fn = click.option(
        "--rates", "rates", type=FloatList(), default=None, metavar="R1,R2,...", help=fields["rates"].description
    )(fn)
    fn = click.option(
        "--time-scale",
        "time_scales",
        type=FloatList(),
        default=None,
        metavar="S1,S2,...",
        help=fields["time_scales"].description,
    )(fn)
    fn = click.option(
        "--load",
        type=click.Choice(LOAD_MODES),
        default=fields["load"].default,
        show_default=True,
        help=fields["load"].description,
    )(fn)
    return fn


def _stack(fn, options):
    """Apply click options so that ``--help`` lists them in the order given."""
    for option in reversed(options):
        fn = option(fn)
    return fn


def _from_config(flag: str, field: str, help: str, **kw):
    """A click option whose default (shown) is ReplayConfig's field ``field``."""
    return click.option(flag, default=ReplayConfig.model_fields[field].default, show_default=True, help=help, **kw)


def run_options(fn):
    """The click options of a run's frame (--runs-dir, --requests-per-level, --dtype,
    --max-error-rate, --no-progress), defaults from ReplayConfig; ``shared_config``
    turns them into its fields."""
    folder = click.Path(file_okay=False, path_type=Path)
    return _stack(
        fn,
        [
            _from_config(
                "--runs-dir", "runs_dir", "Parent of run folders; runs/latest points at the newest.", type=folder
            ),
            click.option(
                "--requests-per-level",
                type=PositiveInt,
                default=None,
                help="Requests per level, >= 1 (default: every traffic row once).",
            ),
            _from_config(
                "--dtype",
                "dtype",
                "Embedded engine: model dtype of both arms (float32 makes greedy outputs bit-stable).",
            ),
            _from_config(
                "--max-error-rate",
                "max_error_rate",
                "A level whose share of failed requests exceeds this (0..1) is marked failed: no speedup or "
                "lossless figure is computed from it and the command exits non-zero.",
                type=UnitInterval,
            ),
            click.option(
                "--no-progress", is_flag=True, help="Plain log lines (one per level and arm) instead of progress bars."
            ),
        ],
    )


def recording_options(prefix: str = "", out_default: str = ""):
    """The recording proxy's --out, --content and --rules: bare for ``specdec-capture
    proxy``, named ``--proxy-out``... (``prefix="proxy-"``) for the proxy that
    ``specdec-capture sidecar`` runs in process. They arrive as ``<prefix>out``,
    ``<prefix>content``, ``<prefix>rules`` (dashes as underscores); --out is required
    unless ``out_default`` says what stands in for it."""
    where = f"; default: {out_default}." if out_default else "."
    options = [
        # no default=None for --out: click 8.3+ takes an explicit one as given, and required would pass
        click.option(
            f"--{prefix}out",
            type=click.Path(file_okay=False, path_type=Path),
            required=not out_default,
            help=f"Folder of the proxy's traffic part files ({TRAFFIC_PART_LAYOUT}){where}",
        ),
        click.option(
            f"--{prefix}content",
            type=click.Choice(["hash", "keep"]),
            default="hash",
            show_default=True,
            help="hash: keep roles and structure, replace every text by sha256:<hex>:<tokens>; "
            "keep: record the content as sent.",
        ),
        click.option(
            f"--{prefix}rules",
            type=click.Path(exists=True, dir_okay=False, path_type=Path),
            default=None,
            help="JSON category rules on route, model or message content (see specdec.capture.proxy.rules).",
        ),
    ]
    return lambda fn: _stack(fn, options)
