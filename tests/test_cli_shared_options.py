"""``specdec demo`` and ``specdec-replay`` turn the options they share (run, schedule and
client: runs folder, requests per level, dtype, error budget, progress, repeats, lossless
pass, samples, restarts, prefix cache, margin, timeouts) into the same ReplayConfig
fields, through one mapping (``cli.options.shared_config``)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from specdec.cli import main as main_cli
from specdec.cli import replay as replay_cli
from specdec.cli.options import CLIENT_FIELDS, RUN_FIELDS, SCHEDULE_FIELDS
from specdec.replay import experiment
from specdec.traffic.io import BUNDLED

SHARED = [
    "--repeats", "3", "--no-lossless-pass", "--samples", "2", "--restart-servers", "never",
    "--prefix-cache", "off", "--margin", "0.1", "--connect-timeout", "7", "--request-timeout", "11",
    "--requests-per-level", "5", "--dtype", "float32", "--max-error-rate", "0.2", "--no-progress",
]  # fmt: skip
WANT = {
    "repeats": 3,
    "lossless_pass": False,
    "samples": 2,
    "restart_servers": "never",
    "prefix_cache": "off",
    "margin": 0.1,
    "connect_timeout_s": 7.0,
    "request_timeout_s": 11.0,
    "requests_per_level": 5,
    "dtype": "float32",
    "max_error_rate": 0.2,
    "progress": False,
}


class _Stop(Exception):
    pass


@pytest.fixture
def seen(monkeypatch):
    got = []

    def fake_run(cfg, look_factory=None):
        got.append(cfg)
        assert (look_factory is not None) == cfg.sequential, "a sequential run gets its looks"
        raise _Stop

    monkeypatch.setattr(experiment, "run_replay", fake_run)
    monkeypatch.setattr("specdec.model.prepare_model", lambda: type("P", (), {"path": "/m"})())  # bundled_model's
    return got


def test_every_shared_option_has_its_field():
    assert set(WANT) | {"runs_dir"} == set(SCHEDULE_FIELDS) | set(CLIENT_FIELDS.values()) | set(RUN_FIELDS) | {
        "progress"
    }


def test_demo_and_replay_make_the_same_fields_of_the_shared_options(tmp_path, seen):
    CliRunner().invoke(main_cli.main, ["demo", "--runs-dir", str(tmp_path), *SHARED])
    CliRunner().invoke(
        replay_cli.main,
        [str(BUNDLED), "--runs-dir", str(tmp_path), "--api-key-env", "MY_KEY", *SHARED],
    )
    assert len(seen) == 2, "each command reaches run_replay"
    for cfg in seen:
        assert {k: getattr(cfg, k) for k in WANT} == WANT
        assert cfg.runs_dir == tmp_path
    assert seen[1].api_key_env == "MY_KEY"
    # the design is not shared: sequential in both, up to the demo's 5 and to 2 x --repeats
    assert (seen[0].max_repeats, seen[1].max_repeats) == (5, 6)


def test_the_old_name_of_the_lossless_pass_is_deprecated_with_a_message(tmp_path, seen):
    """--verify/--no-verify (until 2026-12-02) still sets the lossless pass for one release, in both
    commands, says it is deprecated and what to use, and is not listed in --help."""
    for old, want in (("--no-verify", False), ("--verify", True)):
        for command, args in ((main_cli.main, ["demo"]), (replay_cli.main, [str(BUNDLED)])):
            res = CliRunner().invoke(command, [*args, "--runs-dir", str(tmp_path), "--no-progress", old])
            assert "deprecated" in res.output and "--lossless-pass/--no-lossless-pass" in res.output
            assert seen[-1].lossless_pass is want
    assert len(seen) == 4
    for command, args in ((main_cli.main, ["demo", "--help"]), (replay_cli.main, ["--help"])):
        shown = CliRunner().invoke(command, args).output
        assert "--lossless-pass" in shown and "--verify" not in shown
