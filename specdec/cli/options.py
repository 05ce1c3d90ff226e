"""The click options that several commands share, each read from the config model
that validates it (defaults and help from the pydantic fields, one definition):
the client's timeouts and API key, the schedule, the load mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import click

from specdec.cli.params import FloatList, NonNegativeInt, PositiveFloat, PositiveInt
from specdec.replay.config import ClientOptions, ReplayConfig
from specdec.replay.load.levels import LOAD_MODES

#: the values click.Choice lets through for --restart-servers and --prefix-cache
RestartServers = Literal["repeat", "never"]
PrefixCache = Literal["reset", "off", "keep"]

#: the parameters schedule_options declares: each is the ReplayConfig field of the same name
SCHEDULE_FIELDS = ("repeats", "lossless_pass", "samples", "restart_servers", "prefix_cache", "margin")
#: client_options' timeouts -> their ReplayConfig fields (--api-key-env, where declared, keeps its name)
CLIENT_FIELDS = {"connect_timeout": "connect_timeout_s", "request_timeout": "request_timeout_s"}


def shared_config(params: Mapping[str, Any]) -> dict[str, Any]:
    """The ReplayConfig keywords of the shared schedule and client options, from a
    command's parsed parameters (``click.get_current_context().params``): one
    mapping for ``specdec demo`` and ``specdec-replay``."""
    out = {name: params[name] for name in SCHEDULE_FIELDS}
    out.update({field: params[name] for name, field in CLIENT_FIELDS.items()})
    if "api_key_env" in params:
        out["api_key_env"] = params["api_key_env"]
    return out


def schedule_options(fn=None, *, repeats: int | None = None):
    """The click options of the schedule (--repeats, --lossless-pass/--no-lossless-pass,
    --samples, --restart-servers, --prefix-cache) and of its reading
    (--margin), defaults and meaning from ReplayConfig; ``repeats`` overrides
    the default number of repeats (the demo's design). Used bare
    (``@schedule_options``) or called (``@schedule_options(repeats=4)``)."""
    if fn is None:
        return lambda f: schedule_options(f, repeats=repeats)

    fields = ReplayConfig.model_fields
    fn = click.option(
        "--margin",
        type=float,
        default=fields["margin"].default,
        show_default=True,
        help=f"{fields['margin'].description} (0 < delta <= 1)",
    )(fn)
    fn = click.option(
        "--prefix-cache",
        type=click.Choice(["reset", "off", "keep"]),
        default=fields["prefix_cache"].default,
        show_default=True,
        help=fields["prefix_cache"].description,
    )(fn)
    fn = click.option(
        "--restart-servers",
        type=click.Choice(["repeat", "never"]),
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
        "--verify/--no-verify",  # the old name, kept so that scripts keep working
        "lossless_pass",
        default=fields["lossless_pass"].default,
        show_default=True,
        help=f"{fields['lossless_pass'].description} (Old name: --verify/--no-verify.)",
    )(fn)
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
