"""benchmarks/analytics_scale.py at a small size: its generator keeps up with the record
schemas (a field added to RoundTrace or RequestResult without the generator writing it
fails here, not on the next 50-million-round run), and its three ways to the same figures
(the build's marts, DuckDB's same steps as pandas, pandas) agree."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "analytics_scale.py"


def test_scale_benchmark_small(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--shape",
            "light",
            "--rounds",
            "30000",
            "--runs",
            "2",
            "--data",
            str(tmp_path / "data"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    *_, figures, worst = (json.loads(line) for line in proc.stdout.strip().splitlines() if line.startswith("{"))
    assert figures["shape"] == "light" and worst["slowest_shape"] == "light"
    assert worst["build_and_marts_s"] == figures["build_and_marts_s"]
    assert figures["runs"] == 2 and figures["rounds"] >= 30000 and figures["requests"] > 0
    assert figures["same_steps_acceptance_matches_mart"] is True
    assert figures["pandas_matches_mart"] is True
    assert figures["pandas_speedup_matches_same_steps"] is True
    for key in (
        "build_s",
        "duckdb_same_steps_acceptance_s",
        "pandas_acceptance_grouped_first_s",
        "same_steps_ratio_grouped_first",
        "same_steps_speedup_ratio",
    ):
        assert figures[key] > 0, key
    assert "(goal <= 10 s; the median of 3 builds)" in proc.stdout
    each = figures["build_and_marts_s_each"]
    assert figures["builds"] == len(each) == 3 and figures["build_and_marts_s"] == sorted(each)[1]


def test_scale_benchmark_every_shape(tmp_path):
    """Every shape generates and builds; one JSON line per shape, then the worst figures."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--rounds", "20000", "--runs", "2", "--builds", "1", "--no-pandas"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.strip().splitlines() if line.startswith("{")]
    *shapes, worst = lines
    assert (
        [s["shape"] for s in shapes]
        == worst["shapes"]
        == [
            "light",
            "real-128-parts",
            "real-512-one-file",
            "large-run",
            "lake-200-runs",
        ]
    )
    real = {s["shape"]: s for s in shapes}["real-128-parts"]
    assert real["chunk_count"] == real["rounds"]  # a chunk per engine step
    assert worst["build_and_marts_s"] == max(s["build_and_marts_s"] for s in shapes)
    assert worst["peak_rss_mib"] == max(s["peak_rss_mib"] for s in shapes)
    assert all(s["same_steps_acceptance_matches_mart"] for s in shapes)
