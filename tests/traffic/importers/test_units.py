"""Arrival times keep their units: Azure datetime strings, Mooncake ms,
BurstGPT seconds all become ms from the first kept row."""

from __future__ import annotations

import pytest

from specdec.traffic.importers import ImportOptions, import_trace
from specdec.traffic.importers.azure import stamp


def arrivals(fmt, path, counter, **opts):
    report = import_trace(fmt, path, ImportOptions(**opts), counter=counter)
    return [r.arrival_ms for r in report.rows], report


def test_azure_datetime_strings_become_ms(traces, counter):
    ms, report = arrivals("azure", traces / "azure_code_excerpt.csv", counter)
    # 18:17:03.9799600 -> 18:17:04.0319600 is 52 ms; -> 18:17:05.3790470 is 1399.087 ms
    assert ms[:3] == pytest.approx([0.0, 52.0, 98.189], abs=1e-6)
    assert ms[-1] == pytest.approx(1399.087, abs=1e-6)
    assert len(ms) == 12 and report.read == 12
    assert {r.source for r in report.rows} == {"azure-llm-2023"}


def ms(text: str) -> float:
    day, of_day = stamp(text)
    return (day - stamp("2023-11-16 00:00:00")[0]) * 86_400_000.0 + of_day


def test_azure_stamp_keeps_the_seventh_digit_and_crosses_midnight():
    assert ms("2023-11-16 18:17:03.9799601") - ms("2023-11-16 18:17:03.9799600") == pytest.approx(1e-4, abs=1e-7)
    assert ms("2023-11-17 00:00:00.0000000") - ms("2023-11-16 23:59:59.5") == pytest.approx(500.0, abs=1e-9)
    assert ms("2023-11-16 00:00:01") == 1000.0
    for bad in ("2023-11-16", "18:17:03.97", "2023-11-16 25:00:00.0", "1700000000", "2023-02-30 00:00:00"):
        with pytest.raises(ValueError):
            stamp(bad)


def test_mooncake_timestamps_are_ms(traces, counter):
    ms, _ = arrivals("mooncake", traces / "mooncake_small.jsonl", counter, category="chat")
    assert ms == [0.0, 0.0, 1500.0, 3052.0, 61000.0]


def test_burstgpt_timestamps_are_seconds(traces, counter):
    ms, report = arrivals("burstgpt", traces / "burstgpt_v1.csv", counter, category="chat")
    assert ms == [0.0, 40000.0, 113000.0, 114000.0]
    assert [r.model for r in report.rows] == ["ChatGPT", "ChatGPT", "GPT-4", "ChatGPT"]


def test_lengths_are_kept_and_zero_outputs_are_clamped(traces, counter):
    _, report = arrivals("burstgpt", traces / "burstgpt_v1.csv", counter, category="chat")
    rows = report.rows
    assert [r.input_tokens for r in rows] == [472, 1087, 417, 90]
    assert [r.recorded_output_tokens for r in rows] == [18, 250, 0, 42]
    assert [r.max_tokens for r in rows] == [18, 250, 1, 42]
    assert report.clamped == 1
    assert "max_tokens clamped to 1 (recorded output 0): 1 rows" in report.lines()


def test_azure_file_name_gives_the_category(traces, counter):
    _, code = arrivals("azure", traces / "azure_code_excerpt.csv", counter)
    _, conv = arrivals("azure", traces / "azure_conv_excerpt.csv", counter)
    assert {r.category for r in code.rows} == {"code"} and {r.tier for r in code.rows} == {"high"}
    assert {r.category for r in conv.rows} == {"chat"} and {r.tier for r in conv.rows} == {"low"}
