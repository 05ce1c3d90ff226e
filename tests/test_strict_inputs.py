"""Command-line numbers and names are checked before anything runs (issue 5, item 5).

A bad value must stop `specdec demo` while click parses the options: exit
code 2, a message naming the option, no model preparation, no run folder.
"""

import click
import pytest
from click.testing import CliRunner

from specdec.cli.common import parse_levels
from specdec.cli.main import main
from specdec.errors import SpecdecError


@pytest.fixture
def no_side_effects(tmp_path, monkeypatch):
    """Run in an empty folder; preparing the model is recorded and stops the command."""
    monkeypatch.chdir(tmp_path)
    calls = []

    def prepare_model(*a, **k):
        calls.append(a)
        raise SpecdecError("stopped before the model was prepared")

    monkeypatch.setattr("specdec.cli.main.prepare_model", prepare_model)  # `specdec model prepare`
    monkeypatch.setattr("specdec.model.prepare_model", prepare_model)  # the demo's (specdec.model.bundled_model)
    return tmp_path / "runs", calls


BAD = [
    ("--levels", "0"),
    ("--levels", "-1"),
    ("--levels", "1,,2"),
    ("--levels", "1,2,"),
    ("--levels", ""),
    ("--levels", "1,x"),
    ("--levels", "2,2"),
    ("--levels", "5000"),
    ("--levels", "1.5"),
    ("--levels", "\u0663"),
    ("--max-tokens", "0"),
    ("--max-tokens", "-5"),
    ("--max-tokens", "1000001"),
    ("--max-tokens", "1_000"),
    ("--requests-per-level", "0"),
    ("--requests-per-level", "-1"),
    ("--requests-per-level", "\u0664"),
    ("--max-error-rate", "-0.1"),
    ("--max-error-rate", "1.5"),
    ("--max-error-rate", "nan"),
    ("--max-error-rate", "abc"),
    ("--connect-timeout", "0"),
    ("--connect-timeout", "-1"),
    ("--connect-timeout", "nan"),
    ("--connect-timeout", "inf"),
    ("--connect-timeout", "1e999"),
    ("--request-timeout", "0"),
    ("--request-timeout", "-0.5"),
]


@pytest.mark.parametrize("option, value", BAD)
def test_demo_refuses_a_bad_number_before_doing_anything(no_side_effects, option, value):
    runs, calls = no_side_effects
    r = CliRunner().invoke(main, ["demo", "--runs-dir", str(runs), option, value])
    assert r.exit_code == 2, r.output
    assert f"Invalid value for '{option}'" in r.output
    assert "Traceback" not in r.output
    assert calls == [] and not runs.exists()


def test_demo_accepts_good_values_and_stops_only_at_the_model(no_side_effects):
    runs, calls = no_side_effects
    r = CliRunner().invoke(
        main,
        [
            "demo",
            "--runs-dir",
            str(runs),
            "--levels",
            " 4, 1 ,2",
            "--max-tokens",
            "8",
            "--requests-per-level",
            "3",
            "--max-error-rate",
            "0",
            "--connect-timeout",
            "0.5",
            "--request-timeout",
            "1e1",
        ],
    )
    assert r.exit_code == 1 and "stopped before the model was prepared" in r.output
    assert len(calls) == 1 and not runs.exists()


def test_parse_levels_names_the_option():
    assert parse_levels(" 8,1 ,2") == [8, 1, 2]
    for text in ("1,x", "0", "1,,2", "3,3"):
        with pytest.raises(click.BadParameter) as e:
            parse_levels(text)
        assert "'--levels'" in e.value.format_message() or e.value.param_hint == "'--levels'"
    with pytest.raises(click.BadParameter, match="comma-separated integers"):
        parse_levels("1,x")


def _command(param_type, default=None):
    from specdec.cli import params  # noqa: F401  (the types under test)

    @click.command()
    @click.option("--value", type=param_type, default=default)
    def cmd(value):
        click.echo(repr(value))

    return cmd


@pytest.mark.parametrize(
    "type_name, good, bad",
    [
        (
            "PositiveInt",
            {"1": 1, "+3": 3, "4096": 4096},
            ["0", "-2", "1.0", "x", " ", "1e3"],
        ),  # --repeats, --requests-per-level
        ("NonNegativeInt", {"0": 0, "2": 2}, ["-1", "0.5", "two"]),  # --warmup
        ("PositiveFloat", {"0.001": 0.001, "5": 5.0, "1e2": 100.0}, ["0", "-1", "nan", "inf", "-inf", "1e999", "1,5"]),
        ("UnitInterval", {"0": 0.0, "1": 1.0, ".25": 0.25}, ["-0.01", "1.01", "nan", "5%"]),
    ],
)
def test_reusable_number_types(type_name, good, bad):
    from specdec.cli import params

    cmd = _command(getattr(params, type_name))
    for text, value in good.items():
        r = CliRunner().invoke(cmd, ["--value", text])
        assert r.exit_code == 0 and r.output.strip() == repr(value), (text, r.output)
    for text in bad:
        r = CliRunner().invoke(cmd, ["--value", text])
        assert r.exit_code == 2 and "Invalid value for '--value'" in r.output, (text, r.output)


@pytest.mark.parametrize(
    "name",
    [
        "",
        ".hidden",
        "-rf",
        "a/b",
        "..",
        "a..b",
        "../x",
        "x" * 101,
        "latest",
        "Latest",
        "naïve",
        "a b",
        "a\nb",
        "a\\b",
        "nul\x00",
        "run:1",
    ],
)
def test_run_name_refuses_anything_but_a_plain_name(name):
    from specdec.cli.params import RunName

    with pytest.raises(click.BadParameter, match="not a plain run name"):
        RunName.convert(name, None, None)


@pytest.mark.parametrize("name", ["run-1", "2025.01.01_a", "_x", "x" * 100, "20250101T000000Z", "A.b-c_9"])
def test_run_name_accepts_plain_names(name):
    from specdec.cli.params import RunName

    assert RunName.convert(name, None, None) == name
