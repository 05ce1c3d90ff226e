"""The report and the terminal summary: failures first and loud, plain words
for a run with no successes or no captured rounds, columns that fit the data,
and the stability table when the run has one."""

from __future__ import annotations

import duckdb
import pytest

from specdec.analytics.build import build
from specdec.analytics.report.data import load_report
from specdec.analytics.report.summary import summary_text, text_table
from specdec.analytics.report.write import render_html, write_report
from tests.support.synthetic_run import failed, make_manifest, make_requests, with_position_counter, write_run


def report_of(run_dir):
    out, summary = write_report(run_dir)
    return out.read_text(encoding="utf-8"), summary


def test_a_run_where_every_request_failed_says_so(tmp_path):
    reqs = [failed(r, http_status=501, message="HTTP 501: Not Implemented") for r in make_requests()]
    page, summary = report_of(write_run(tmp_path, requests=reqs, rounds=[]))
    plain = "Every request failed (8 of 8): no latency, throughput, speedup or lossless figure can be computed."
    assert plain in summary and plain in page
    assert "Errors: http_status: 8 (HTTP 501: 8). First error: HTTP 501: Not Implemented" in summary
    assert "4 level(s) failed" in summary.splitlines()[2]
    assert "timed-pass text identity (no margins): n/a (no successful pair; 4 group(s) excluded" in summary


def test_a_failed_level_is_announced_at_the_top_of_both(tmp_path):
    reqs = [failed(r) if (r.arm, r.level, r.category) == ("baseline", 2, "chat") else r for r in make_requests()]
    page, summary = report_of(write_run(tmp_path, requests=reqs))
    banner = (
        "1 level(s) failed (error rate above max_error_rate 0.05): baseline c2 (1/2 failed: "
        "http_status: 1); no speedup or lossless figure computed from them."
    )
    lines = summary.splitlines()
    assert lines[1] == "!! " + banner
    assert lines[2].startswith("requests per arm and level")
    assert lines[3].split() == ["arm", "level", "requests", "failed", "error_rate", "errors", "status"]
    assert lines[5].split() == ["baseline", "c2", "2", "1", "50.0%", "http_status:", "1", "FAILED"]
    assert "  excluded: baseline level failed (error rate 0.500 > max 0.050): (system) c2, chat c2, code c2" in lines
    # in the page: the banner and the failure table come before any figure
    at = page.index('<div class="alarm" role="alert">' + banner)
    assert at < page.index("<h2>Requests and failures per arm and level") < page.index("<h2>Speedup")
    assert at < page.index('<div id="speedup">')


def test_an_unfinished_run_is_announced(tmp_path):
    page, summary = report_of(write_run(tmp_path, manifest=make_manifest(finished=False)))
    assert summary.splitlines()[1].startswith("!! Run not finished (manifest.finished is false)")
    assert '<div class="alarm" role="alert">Run not finished' in page


def test_a_finished_clean_run_has_no_notice(run_dir):
    page, summary = report_of(run_dir)
    assert "!!" not in summary and "note:" not in summary
    assert 'role="alert"' not in page
    assert "reconciliation with vLLM counters: exact" in summary
    assert "timed-pass text identity (no margins): 3/4 greedy pairs identical" in summary


def test_no_captured_rounds_is_said_plainly(tmp_path):
    manifest = make_manifest(capture={"source": "none", "reason": "external servers without --capture-dir"})
    page, summary = report_of(write_run(tmp_path, rounds=[], manifest=manifest))
    said = (
        "No rounds were captured (capture source: none; reason: external servers without --capture-dir; "
        "see manifest.capture)"
    )
    assert said in summary and said in page
    assert (
        "reconciliation of the rounds with the engine's counters: not applicable (no rounds were captured); "
        "per-request stats against the counters: exact at 2 level(s)"
    ) in summary
    assert "level(s) differ" not in summary
    assert "No per-round data for this engine" in page  # not a table of zeros
    assert '<table class="flagged">' in page and "(flagged: no rounds captured)" in page


def test_summary_columns_fit_long_category_names(tmp_path):
    long = "an_unusually_long_category_name_for_a_terminal"
    reqs = [r.model_copy(update={"category": long}) if r.category == "chat" else r for r in make_requests()]
    _, summary = report_of(write_run(tmp_path, requests=reqs))
    lines = summary.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("speedup (speculative/baseline")) + 1
    header, rows = lines[head], lines[head + 1 : head + 4]
    c1, c2 = header.index("c1"), header.index("c2")
    assert {r.split()[0] for r in rows} == {"(system)", "code", long}  # nothing truncated
    for r in rows:  # every value starts under its column heading
        assert r[c1 - 1] == r[c2 - 1] == " " and r[c1] != " " and r[c2] != " "
        assert r[c1:].split()[0] in ("2.000", "2.500") and r[c2:].split()[0] in ("2.000", "2.500")


def test_text_table_escapes_control_characters_and_pads_wide_ones():
    lines = text_table(["name", "n"], [["a\x1b[31mb\u2028", 1], ["表", 22]])
    assert lines[1] == "  a\\u001b[31mb\\u2028  1"
    assert lines[2] == "  表                  22"  # a wide character counts as two columns


STABILITY = """create or replace view stability as
select * from (values
    ('empty_prompt', 3, 3, 3, 'http_status', 'HTTP 400', 'ok', true, 'refused with HTTP 400'),
    ('restart', 1, 4, 1, 'connect_error', 'recovers', 'degraded', true, '1 request lost while restarting'))
    t(fault, probes, requests_sent, requests_failed, error_types, expected, outcome, server_healthy_after, detail)"""


def test_stability_table_when_the_run_has_one(run_dir):
    db = build(run_dir)
    con = duckdb.connect(str(db))
    try:
        con.execute(STABILITY)
        data = load_report(con)
    finally:
        con.close()
    page, summary = render_html(data), summary_text(data)
    assert "<h2>Stability: fault -&gt; outcome</h2>" in page
    assert "<td>empty_prompt</td>" in page and "<td>degraded</td>" in page
    lines = summary.splitlines()
    at = lines.index("stability: fault -> outcome:")
    assert lines[at + 2].split()[:2] == ["empty_prompt", "ok"]
    assert lines[at + 3].split()[:2] == ["restart", "degraded"]


@pytest.mark.parametrize("rows", [False, True])
def test_no_stability_section_without_rows(run_dir, rows):
    db = build(run_dir)
    con = duckdb.connect(str(db))
    try:
        if rows:  # a stability view with no rows (a replay run)
            con.execute(STABILITY + " where false")
        data = load_report(con)
    finally:
        con.close()
    assert data.stability is None
    assert "Stability" not in render_html(data) and "stability" not in summary_text(data)


def test_a_run_with_no_requests_says_so(tmp_path):
    page, summary = report_of(write_run(tmp_path, requests=[], rounds=[]))
    said = "No requests were recorded in this run: there is nothing to measure."
    assert summary.splitlines()[1] == "!! " + said and said in page


def test_a_stability_run_reports_its_faults_and_no_replay_sections(tmp_path):
    from specdec.schemas.arrow import table_from_records, write_parquet_atomic
    from specdec.schemas.records import StabilityResult

    def probe(fault, i, outcome, failed_n, types):
        return StabilityResult(
            run_id="t",
            fault=fault,
            probe_index=i,
            wall_start_ns=i,
            duration_ms=10.0,
            requests_sent=2,
            requests_failed=failed_n,
            error_types=types,
            expected="HTTP 400",
            outcome=outcome,
            server_healthy_after=True,
            detail=f"{fault} probe {i}",
        )

    write_run(tmp_path, requests=[], rounds=[], manifest=make_manifest(kind="stability"))
    (tmp_path / "requests.parquet").unlink()  # a stability run has no replay requests
    rows = [probe("empty_prompt", 0, "ok", 2, ["http_400"]), probe("burst", 1, "degraded", 1, ["request_timeout"])]
    write_parquet_atomic(table_from_records(StabilityResult, rows), tmp_path / "stability.parquet")
    page, summary = report_of(tmp_path)
    assert "<h2>Stability: fault -&gt; outcome</h2>" in page and "<td>http_400</td>" in page
    lines = summary.splitlines()
    at = lines.index("stability: fault -> outcome:")
    assert [ln.split()[:2] for ln in lines[at + 2 : at + 4]] == [["empty_prompt", "ok"], ["burst", "degraded"]]
    assert "!!" not in summary and "speedup" not in summary and "<h2>Speedup" not in page


def test_without_rounds_per_position_acceptance_comes_from_the_engine_counter(tmp_path):
    page, _ = report_of(write_run(tmp_path, with_position_counter([3, 2, 1, 1]), rounds=[]))
    text = page.replace("&#x27;", "'")
    assert "Acceptance by draft position, from the engine's counter (speculative arm)" in text  # table and chart
    assert "per draft position from the engine's counter" in text
    assert '"acceptance_positions"' in page  # the chart, drawn from the counter
