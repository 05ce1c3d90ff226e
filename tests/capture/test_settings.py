"""Bad capture settings never crash or busy-loop vLLM: register() logs one
clear error naming the variable (or path) and the value, and capture stays off."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specdec.capture import settings
from specdec.runfolder import (
    ENV_CAPTURE_DIR,
    ENV_CAPTURE_FLUSH_S,
    ENV_CAPTURE_MAX_BYTES,
    ENV_CAPTURE_MAX_ROWS,
    ENV_CAPTURE_RUN_ID,
)

REGISTER_TWICE = r"""
import sys
from specdec.capture.plugin import hooks as plugin
plugin.register(); plugin.register()  # vLLM may call it more than once
assert plugin.state() is None, "capture is on despite a bad setting"
assert "vllm" not in sys.modules, "register() imported vllm though it gave up"
assert "pyarrow" not in sys.modules, "register() started the writer though it gave up"
print("OFF")
"""


def _register(env: dict[str, str]) -> list[str]:
    """Run register() twice in a fresh interpreter; return the log lines it printed."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("SPECDEC_CAPTURE_")}
    proc = subprocess.run(
        [sys.executable, "-c", REGISTER_TWICE], env={**base, **env}, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "OFF", proc.stdout + proc.stderr
    return [ln for ln in proc.stderr.splitlines() if ln.strip()]


@pytest.mark.parametrize(
    "var, value",
    [
        (ENV_CAPTURE_FLUSH_S, "abc"),
        (ENV_CAPTURE_FLUSH_S, "0"),
        (ENV_CAPTURE_FLUSH_S, "-1"),
        (ENV_CAPTURE_FLUSH_S, "nan"),
        (ENV_CAPTURE_FLUSH_S, "inf"),
        (ENV_CAPTURE_FLUSH_S, "1e-9"),  # would spin the flush thread
        (ENV_CAPTURE_FLUSH_S, "1e10"),  # overflows threading's timeout
        (ENV_CAPTURE_MAX_ROWS, "many"),
        (ENV_CAPTURE_MAX_ROWS, "0"),
        (ENV_CAPTURE_MAX_ROWS, "-5"),
        (ENV_CAPTURE_MAX_ROWS, "1e6"),
        (ENV_CAPTURE_MAX_BYTES, "256MiB"),
    ],
)
def test_bad_setting_logs_one_error_and_capture_stays_off(tmp_path, var, value):
    lines = _register({ENV_CAPTURE_DIR: str(tmp_path / "cap"), var: value})
    assert len(lines) == 1, lines
    assert f"{var}={value!r}" in lines[0] and "capture is off" in lines[0]


def test_capture_dir_below_a_regular_file_logs_one_error(tmp_path):
    # permission bits do not stop root (the tests run as root): a path below a
    # regular file cannot be created by anyone
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    lines = _register({ENV_CAPTURE_DIR: str(blocker / "cap")})
    assert len(lines) == 1, lines
    assert ENV_CAPTURE_DIR in lines[0] and str(blocker / "cap") in lines[0]
    assert "not a writable directory" in lines[0] and "capture is off" in lines[0]


def test_capture_dir_that_is_a_regular_file_logs_one_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    (line,) = _register({ENV_CAPTURE_DIR: str(blocker)})
    assert ENV_CAPTURE_DIR in line and str(blocker) in line


def test_good_settings_are_read_as_given(tmp_path):
    env = {
        ENV_CAPTURE_DIR: str(tmp_path / "new" / "cap"),
        ENV_CAPTURE_RUN_ID: "r1",
        ENV_CAPTURE_FLUSH_S: "0.5",
        ENV_CAPTURE_MAX_ROWS: "1000",
        ENV_CAPTURE_MAX_BYTES: " 4096 ",
    }
    cfg = settings.from_env(env)
    assert cfg == settings.CaptureSettings(tmp_path / "new" / "cap", "r1", 0.5, 1000, 4096)
    assert cfg.out_dir.is_dir() and list(cfg.out_dir.iterdir()) == []  # probe removed


def test_defaults_and_no_capture_dir():
    assert settings.from_env({}) is None
    assert settings.from_env({ENV_CAPTURE_DIR: ""}) is None
    cfg = settings.from_env({ENV_CAPTURE_DIR: "/tmp"})
    assert (cfg.run_id, cfg.flush_s, cfg.max_rows, cfg.max_bytes) == ("adhoc", 1.0, 1_000_000, 256 * 2**20)


def test_messages_name_variable_and_value():
    with pytest.raises(settings.SettingError, match=json.dumps("SPECDEC_CAPTURE_FLUSH_S='abc'")[1:-1]):
        settings.flush_seconds("abc")
    with pytest.raises(settings.SettingError, match="X='2.5' is not a whole number"):
        settings.positive_int("2.5", "X")
    assert settings.usable_dir(Path("/tmp")) == Path("/tmp")
