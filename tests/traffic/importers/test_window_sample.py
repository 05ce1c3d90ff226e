"""The time window and seeded down-sampling (thinning keeps the arrival
process's shape: each part of the trace keeps about the same fraction)."""

from __future__ import annotations

import json

import pytest

from specdec.traffic.importers import ImportOptions, import_trace


def test_window_is_seconds_from_the_trace_start_and_arrivals_restart_at_zero(traces, counter):
    opts = ImportOptions(start_s=0.1, end_s=0.5)
    report = import_trace("azure", traces / "azure_code_excerpt.csv", opts, counter=counter)
    # rows at 140.684, 444.994 ms from the trace start are in [100, 500) ms
    assert [r.prompt_id for r in report.rows] == ["azure-llm-2023-r5", "azure-llm-2023-r6"]
    assert [r.arrival_ms for r in report.rows] == pytest.approx([0.0, 304.310], abs=1e-6)
    assert report.outside_window == 10


def test_window_end_is_exclusive(traces, counter):
    report = import_trace(
        "mooncake", traces / "mooncake_small.jsonl", ImportOptions(end_s=1.5, category="chat"), counter=counter
    )
    assert [r.arrival_ms for r in report.rows] == [0.0, 0.0]


def write_trace(path, rate_by_second: list[int]):
    """A Mooncake trace with the given number of evenly spaced arrivals per second."""
    lines = []
    for second, n in enumerate(rate_by_second):
        for i in range(n):
            lines.append(
                json.dumps(
                    {"timestamp": second * 1000 + i * 1000 // n, "input_length": 40, "output_length": 5, "hash_ids": []}
                )
            )
    path.write_text("\n".join(lines) + "\n")


def test_thinning_keeps_the_shape_of_the_arrival_curve(tmp_path, counter):
    # 10 s at 20 req/s, then 10 s at 80 req/s: a burst four times as dense
    path = tmp_path / "burst.jsonl"
    write_trace(path, [20] * 10 + [80] * 10)
    report = import_trace("mooncake", path, ImportOptions(keep_fraction=0.25, seed=3, category="chat"), counter=counter)
    times = [_trace_ms(r) for r in report.rows]
    # arrival times are not stretched: arrival_ms is the trace time minus the first kept row's
    assert [r.arrival_ms for r in report.rows] == [float(t - times[0]) for t in times]
    calm = sum(t < 10_000 for t in times)
    burst = sum(t >= 10_000 for t in times)
    assert report.thinned_out + len(report.rows) == 1000
    # expected 50 and 200 kept rows (binomial sd ~6.1 and ~12.2): allow 3 sd
    assert abs(calm - 50) <= 19 and abs(burst - 200) <= 37
    assert burst / calm == pytest.approx(4.0, rel=0.45)


def _trace_ms(row) -> float:
    """Rebuild a kept row's time on the trace clock from its row number (the
    fixture writes evenly spaced rows: see write_trace)."""
    n = int(row.prompt_id.rsplit("-r", 1)[1]) - 1
    if n < 200:
        return (n // 20) * 1000 + (n % 20) * 1000 // 20
    n -= 200
    return 10_000 + (n // 80) * 1000 + (n % 80) * 1000 // 80


def test_thinning_is_seeded_and_deterministic(tmp_path, counter):
    path = tmp_path / "t.jsonl"
    write_trace(path, [50] * 4)

    def kept(seed):
        r = import_trace(
            "mooncake", path, ImportOptions(keep_fraction=0.5, seed=seed, category="chat"), counter=counter
        )
        return [row.prompt_id for row in r.rows]

    assert kept(1) == kept(1)
    assert kept(1) != kept(2)
    assert 70 <= len(kept(1)) <= 130


def test_thinning_keeps_or_drops_whole_sessions(traces, counter):
    for seed in range(8):
        report = import_trace(
            "burstgpt",
            traces / "burstgpt_sessions.csv",
            ImportOptions(keep_fraction=0.5, seed=seed, category="chat"),
            counter=counter,
        )
        s17 = [r.turn_index for r in report.rows if r.session_id == "s-17"]
        assert s17 in ([], [0, 1, 2])


def test_sample_fraction_is_checked():
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError):
            ImportOptions(keep_fraction=bad)
    with pytest.raises(ValueError, match="after its start"):
        ImportOptions(start_s=5, end_s=5)
