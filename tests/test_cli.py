import json
import re
import subprocess
import sys
import time

from click.testing import CliRunner

from specdec.cli.main import main
from specdec.cli.replay import main as replay_main
from tests.support.synthetic_run import failed, make_requests, repeated_counters, repeated_requests, write_run


def test_help_is_fast_and_imports_nothing_heavy():
    code = (
        "import sys, time; t=time.perf_counter()\n"
        "from specdec.cli.main import main\n"
        "heavy = [m for m in ('vllm', 'torch', 'duckdb', 'altair') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
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


def test_report_on_a_corrupted_run_is_a_named_error(tmp_path):
    run_dir = write_run(tmp_path)
    path = run_dir / "requests.parquet"
    path.write_bytes(path.read_bytes()[:100])
    r = CliRunner().invoke(main, ["report", str(run_dir)])
    assert r.exit_code == 1
    assert f"{path}: not a readable Parquet file" in r.output
    assert "Traceback" not in r.output and not (run_dir / "report.html").exists()


def test_report_on_a_run_missing_its_requests_is_a_named_error(tmp_path):
    run_dir = write_run(tmp_path)
    (run_dir / "requests.parquet").unlink()
    r = CliRunner().invoke(main, ["analytics", "build", str(run_dir)])
    assert r.exit_code == 1 and f"{run_dir / 'requests.parquet'}: missing" in r.output


def test_report_of_an_all_failed_run_says_so_first(tmp_path):
    reqs = [failed(q, http_status=404, message="HTTP 404: Not Found") for q in make_requests()]
    run_dir = write_run(tmp_path, requests=reqs, rounds=[])
    r = CliRunner().invoke(main, ["report", str(run_dir)])
    # the report is written, then the command fails: every level is over its error budget
    assert r.exit_code == 1, r.output
    assert (run_dir / "report.html").is_file()
    assert r.output.splitlines()[1].startswith("!! Every request failed (8 of 8)")
    assert "HTTP 404: Not Found" in r.output
    assert "Error: 4 level(s) failed" in r.output and "baseline c1" in r.output


def test_report_prints_the_verdict_after_the_failures(tmp_path):
    e2e = lambda arm, pid, level, r: 2000.0 if arm == "baseline" else 800.0  # noqa: E731
    run_dir = write_run(tmp_path, requests=repeated_requests(e2e), rounds=[], counters=repeated_counters())
    r = CliRunner().invoke(main, ["report", str(run_dir)])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    at = lines.index("verdict:")
    assert (
        lines.index(
            "requests per arm and level (error_rate = failed / requests; a level fails above max_error_rate 0.05):"
        )
        < at
    )
    # every figure with the family-wise interval its label reads (Holm's level for its rank)
    assert re.fullmatch(
        r"  - chat: faster at every level: 2\.50x \(9[0-9.]+% CI 2\.50-2\.50\) at c1, 2\.50x "
        r"\(9[0-9.]+% CI 2\.50-2\.50\) at c2, each gain beyond the 5% margin \[n = 4 pairs per "
        r"level: 2 prompts x 2 repeats\]\.",
        lines[at + 1],
    ), lines[at + 1]
