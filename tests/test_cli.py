import json
import subprocess
import sys
import time

from click.testing import CliRunner

from specdec.cli import main
from specdec.replay.cli import main as replay_main


def test_help_is_fast_and_imports_nothing_heavy():
    code = ("import sys, time; t=time.perf_counter()\n"
            "from specdec.cli import main\n"
            "heavy = [m for m in ('vllm', 'torch', 'duckdb', 'altair') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    assert time.perf_counter() - start < 20  # generous: a cold interpreter on a busy CI box


def test_help_texts_explain_commands():
    r = CliRunner().invoke(main, ["--help"])
    assert r.exit_code == 0
    for cmd in ("demo", "report", "analytics", "model"):
        assert cmd in r.output
    r = CliRunner().invoke(replay_main, ["--help"])
    assert r.exit_code == 0 and "--levels" in r.output and "--spec-config" in r.output


def test_bad_traffic_file_gives_a_clear_error(tmp_path):
    bad = tmp_path / "mix.jsonl"
    bad.write_text(json.dumps({"prompt_id": "a", "category": "c", "prompt": "", "max_tokens": 4}) + "\n")
    r = CliRunner().invoke(replay_main, [str(bad), "--runs-dir", str(tmp_path / "runs")])
    assert r.exit_code == 1
    assert f"{bad}, row 1, field 'prompt'" in r.output
    assert "Traceback" not in r.output


def test_bad_option_values_are_reported_not_raised(tmp_path):
    r = CliRunner().invoke(replay_main, ["whatever.jsonl", "--levels", "1,x"])
    assert r.exit_code == 2 and "comma-separated integers" in r.output
    r = CliRunner().invoke(replay_main, ["x.jsonl", "--spec-config", "{nope"])
    assert r.exit_code == 2 and "not valid JSON" in r.output


def test_report_on_missing_run_folder(tmp_path):
    r = CliRunner().invoke(main, ["report", str(tmp_path / "nope")])
    assert r.exit_code == 1 and "no such run folder" in r.output
