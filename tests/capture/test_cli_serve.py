"""`specdec-capture serve`: loopback unless told otherwise, checked options,
and vLLM started by exec with capture switched on."""

import os
import sys

import pytest
from click.testing import CliRunner

from specdec.cli.capture import main
from specdec.runfolder import ENV_CAPTURE_DIR, ENV_CAPTURE_FLUSH_S, ENV_CAPTURE_RUN_ID


@pytest.fixture
def execv(monkeypatch):
    """Record the exec instead of replacing the test process; restore the env."""
    for name in (ENV_CAPTURE_DIR, ENV_CAPTURE_RUN_ID, ENV_CAPTURE_FLUSH_S):
        monkeypatch.setenv(name, "x")  # so that undo removes what serve sets
        monkeypatch.delenv(name)
    calls = []
    monkeypatch.setattr(os, "execv", lambda path, argv: calls.append((path, argv)))
    return calls


def _serve(*args):
    return CliRunner().invoke(main, ["serve", *args], catch_exceptions=False)


def _vllm_args(calls) -> list[str]:
    ((path, argv),) = calls
    assert path == sys.executable
    assert argv[:3] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    return argv[3:]


def test_serve_binds_loopback_by_default(tmp_path, execv):
    r = _serve("--dir", str(tmp_path / "cap"), "--run-id", "r7", "--", "--model", "M")
    assert r.exit_code == 0, r.output
    assert _vllm_args(execv) == ["--host", "127.0.0.1", "--model", "M"]
    assert os.environ[ENV_CAPTURE_DIR] == str((tmp_path / "cap").resolve())
    assert (os.environ[ENV_CAPTURE_RUN_ID], os.environ[ENV_CAPTURE_FLUSH_S]) == ("r7", "1.0")


def test_serve_host_option_is_passed_to_vllm(tmp_path, execv):
    r = _serve("--dir", str(tmp_path), "--host", "0.0.0.0", "--", "--model", "M")
    assert r.exit_code == 0, r.output
    assert _vllm_args(execv) == ["--host", "0.0.0.0", "--model", "M"]


@pytest.mark.parametrize("user_host", [["--host", "10.0.0.5"], ["--host=10.0.0.5"]])
def test_a_host_among_vllm_args_is_respected_and_not_doubled(tmp_path, execv, user_host):
    r = _serve("--dir", str(tmp_path), "--", "--model", "M", *user_host)
    assert r.exit_code == 0, r.output
    args = _vllm_args(execv)
    assert args == ["--model", "M", *user_host]


def test_host_given_twice_is_refused(tmp_path, execv):
    r = _serve("--dir", str(tmp_path), "--host", "0.0.0.0", "--", "--host", "10.0.0.5")
    assert r.exit_code == 2 and "--host given twice" in r.output
    assert execv == []


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "abc", "0.001"])
def test_bad_flush_interval_is_a_click_error(tmp_path, execv, value):
    r = _serve("--dir", str(tmp_path / "cap"), "--flush-s", value, "--", "--model", "M")
    assert r.exit_code == 2 and "--flush-s" in r.output, r.output
    assert execv == [] and not (tmp_path / "cap").exists()


def test_unwritable_capture_dir_is_a_click_error(tmp_path, execv):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    r = _serve("--dir", str(blocker / "cap"), "--", "--model", "M")
    assert r.exit_code == 1 and "not a writable directory" in r.output, r.output
    assert execv == []
