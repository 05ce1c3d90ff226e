"""`specdec-capture sidecar` without an engine: hand-written part files in a
capture folder, a fake vLLM /metrics, the sidecar in-process (and once as the
CLI, stopped by SIGTERM). Compaction moves every row into the hive layout
and deletes a source only after; an unreadable part stays and is counted; the
live gauges and histograms show hand-checked values; counter scrapes land in
the lake; stopping flushes everything."""

import asyncio
import math
import re
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import aiohttp
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from specdec.capture.sidecar.lake import Compactor
from specdec.capture.sidecar.metrics import BUCKETS_MS, METRIC_NAMES
from specdec.capture.sidecar.service import Sidecar, SidecarSettings
from specdec.cli.capture import main as capture_cli
from specdec.engines.metrics import COUNTERS, GAUGES, parse_counters
from specdec.runfolder import (
    LAKE_COUNTERS_GLOB,
    LAKE_ROUNDS_GLOB,
    lake_rounds_part,
    round_part_name,
)
from specdec.schemas.arrow import table_from_records, write_parquet_atomic
from specdec.schemas.counters import CounterScrape
from specdec.schemas.records import RoundTrace
from tests.support.capture_rows import rows
from tests.support.fake_server import FakeVllm, serving, threaded
from tests.support.prometheus import NOW_NS, samples

DAY1 = "2026-05-28"
NEXT_DAY_NS = NOW_NS + 86_400 * 10**9  # 2026-05-29
ALERTS = Path(__file__).parents[2] / "capture" / "alerts" / "specdec-alerts.yml"


def _round(
    proposed: int,
    accepted: int,
    *,
    run_id: str = "r1",
    wall_ns: int = NOW_NS,
    step: int = 0,
    token: str = "11-aaaa",
    draft_ms: float | None = None,
    verify_ms: float | None = None,
) -> RoundTrace:
    return RoundTrace(
        run_id=run_id,
        engine_request_id="req-1",
        pid=11,
        process_token=token,
        step_index=step,
        round_index=step,
        phase="decode" if proposed else "prefill",
        tokens_proposed=proposed,
        tokens_accepted=accepted,
        tokens_emitted=accepted + 1,
        batch_size=1,
        num_scheduled_tokens=1 + proposed,
        context_len=10,
        draft_ms=draft_ms,
        verify_ms=verify_ms,
        wall_time_ns=wall_ns,
    )


def _part(capture: Path, seq: int, rounds: list[RoundTrace], token: str = "11-aaaa") -> Path:
    capture.mkdir(parents=True, exist_ok=True)
    path = capture / round_part_name(token, seq)
    write_parquet_atomic(table_from_records(RoundTrace, rounds), path)
    return path


def _lake_rows(lake: Path, glob: str = LAKE_ROUNDS_GLOB) -> list[dict]:
    return [row for f in sorted(lake.glob(glob)) for row in pq.read_table(f).to_pylist()]


def _settings(tmp_path: Path, server: str = "http://127.0.0.1:9", **kw) -> SidecarSettings:
    return SidecarSettings(capture_dir=tmp_path / "cap", lake=tmp_path / "lake", server=server, port=0, **kw)


async def _get(url: str) -> str:
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        assert r.status == 200
        return await r.text()


def _with_sidecar(settings: SidecarSettings, body, clock_ns=lambda: NOW_NS):
    """Start a sidecar (endpoint only; the test drives compaction), run body(sidecar), close."""

    async def go():
        sc = Sidecar(settings, clock_ns=clock_ns)
        await sc.start()
        try:
            return await body(sc)
        finally:
            await sc.close()

    return asyncio.run(go())


# ------------------------------------------------------------- compaction
def test_compaction_moves_every_row_into_the_hive_layout(tmp_path):
    cap, lake = tmp_path / "cap", tmp_path / "lake"
    a = _part(cap, 0, [_round(4, 4, step=0), _round(4, 0, step=1)])
    b = _part(
        cap, 1, [_round(4, 2, step=2), _round(0, 0, run_id="r/2", step=3), _round(4, 1, step=4, wall_ns=NEXT_DAY_NS)]
    )
    tmp = cap / ".rounds-11-aaaa-000002.parquet.x1y2.tmp"  # the plugin's half-written file
    tmp.write_bytes(b"PAR1 half")
    other = cap / "notes.txt"
    other.write_text("not a part")
    before = sorted((r["step_index"], r["run_id"]) for f in (a, b) for r in pq.read_table(f).to_pylist())

    result = Compactor(cap, lake).compact_once()

    assert (result.files, result.rows, result.unreadable_files) == (2, 5, 0)
    assert not a.exists() and not b.exists()
    assert tmp.exists() and other.exists()  # left alone
    rows = _lake_rows(lake)
    assert sorted((r["step_index"], r["run_id"]) for r in rows) == before
    expected = {
        lake_rounds_part(lake, DAY1, "r1", "11-aaaa", 0): [0, 1],
        lake_rounds_part(lake, DAY1, "r1", "11-aaaa", 1): [2],
        lake_rounds_part(lake, DAY1, "r/2", "11-aaaa", 1): [3],
        lake_rounds_part(lake, "2026-05-29", "r1", "11-aaaa", 1): [4],
    }
    assert sorted(lake.glob(LAKE_ROUNDS_GLOB)) == sorted(expected)
    for path, steps in expected.items():
        assert pq.read_table(path)["step_index"].to_pylist() == steps
    assert lake_rounds_part(lake, DAY1, "r/2", "t", 1).parent.name == "run_id=r%2F2"


def test_compacting_a_part_again_after_a_crash_does_not_duplicate_rows(tmp_path):
    cap, lake = tmp_path / "cap", tmp_path / "lake"
    rounds = [_round(4, 3, step=0), _round(4, 1, step=1)]
    _part(cap, 0, rounds)
    Compactor(cap, lake).compact_once()
    _part(cap, 0, rounds)  # as if the sidecar died after the lake write, before the delete
    assert Compactor(cap, lake).compact_once().rows == 2
    assert len(_lake_rows(lake)) == 2


def test_a_failed_lake_write_keeps_the_source(tmp_path):
    cap, lake = tmp_path / "cap", tmp_path / "lake"
    lake.write_text("a file where the lake folder should be")
    src = _part(cap, 0, [_round(4, 4)])
    result = Compactor(cap, lake).compact_once()
    assert (result.files, result.rows, result.write_failures) == (0, 0, 1)
    assert src.exists() and pq.read_table(src).num_rows == 1


def test_an_unreadable_part_stays_and_is_counted_once(tmp_path):
    cap, lake = tmp_path / "cap", tmp_path / "lake"
    garbage = cap / round_part_name("11-aaaa", 0)
    cap.mkdir()
    garbage.write_bytes(b"this is not parquet")
    foreign = cap / round_part_name("11-aaaa", 1)
    pq.write_table(pa.table({"x": [1, 2, 3]}), foreign)  # readable footer, not RoundTrace: 3 rows declared
    good = _part(cap, 2, [_round(4, 2)])

    comp = Compactor(cap, lake)
    first, second = comp.compact_once(), comp.compact_once()

    assert (first.unreadable_files, first.rows_dropped, first.rows) == (2, 3, 1)
    assert (second.unreadable_files, second.rows_dropped) == (0, 0)  # not counted twice
    assert garbage.exists() and foreign.exists() and not good.exists()
    assert comp.unreadable == 2
    assert any("missing column" in e for e in first.errors)


def test_unreadable_parts_show_on_the_endpoint(tmp_path):
    s = _settings(tmp_path)
    s.capture_dir.mkdir()
    (s.capture_dir / round_part_name("11-aaaa", 0)).write_bytes(b"this is not parquet")
    pq.write_table(pa.table({"x": [1, 2, 3]}), s.capture_dir / round_part_name("11-aaaa", 1))

    async def body(sc):
        await sc.compact()
        await sc.compact()
        return samples(await _get(sc.url + "/metrics"))

    m = _with_sidecar(s, body)
    assert m["specdec_sidecar_rows_dropped_total"] == 3
    assert m["specdec_sidecar_unreadable_files_total"] == 2
    assert m["specdec_sidecar_unreadable_files"] == 2
    assert m["specdec_sidecar_rows_written_total"] == 0


def test_engine_capture_status_files_are_summed_onto_the_endpoint(tmp_path):
    # the counts that live inside the engine (hook failures, rows the writer
    # dropped) reach the sidecar through each process's status file
    import json

    from specdec.capture.plugin import hooks as plugin
    from specdec.capture.writer import RoundWriter
    from specdec.runfolder import capture_status_name

    s = _settings(tmp_path)
    st = plugin._State(s.capture_dir, "r1", flush_s=600)  # a real engine process's state and writer
    st.fail("update_from_output/after", RuntimeError("moved internals"))
    st.fail("update_from_output/after", RuntimeError("moved internals"))
    assert st.writer.write_status()
    other = RoundWriter(s.capture_dir, start_thread=False, max_rows=1)
    other.append_rows(rows(3))  # 2 past the bound: dropped and counted
    other.write_status()
    (s.capture_dir / capture_status_name("99-broken")).write_text("{not json")

    async def body(sc):
        await sc.compact()
        return samples(await _get(sc.url + "/metrics"))

    m = _with_sidecar(s, body)
    assert m["specdec_capture_hook_failures_total"] == 2
    assert m["specdec_capture_engine_rows_dropped_total"] == 2
    assert m["specdec_capture_processes"] == 2 and m["specdec_capture_status_unreadable"] == 1
    assert json.loads((s.capture_dir / capture_status_name(st.writer.token)).read_text())["run_id"] == "r1"
    st.writer.close()
    other.close()


def test_without_status_files_the_capture_metrics_read_zero_processes(tmp_path):
    s = _settings(tmp_path)
    s.capture_dir.mkdir()

    async def body(sc):
        await sc.compact()
        return await _get(sc.url + "/metrics")

    text = _with_sidecar(s, body)
    assert "specdec_capture_processes 0" in text  # the folder was read: no engine process wrote a status yet


# ----------------------------------------------------------- live metrics
def test_rolling_acceptance_is_exact_and_moves_with_new_rows(tmp_path):
    s = _settings(tmp_path, window_s=60)
    now = [NOW_NS]

    async def body(sc):
        base = sc.url + "/metrics"
        empty = samples(await _get(base))
        _part(s.capture_dir, 0, [_round(0, 0, step=0), _round(4, 4, step=1), _round(4, 0, step=2)])
        await sc.compact()
        first = samples(await _get(base))
        _part(s.capture_dir, 1, [_round(4, 4, step=3), _round(4, 4, step=4)])
        await sc.compact()
        second = samples(await _get(base))
        now[0] += 61 * 10**9  # every row has left the window
        later = samples(await _get(base))
        return empty, first, second, later

    empty, first, second, later = _with_sidecar(s, body, clock_ns=lambda: now[0])
    lab = '{server="http://127.0.0.1:9"}'
    assert math.isnan(empty[f"specdec_acceptance_rate{lab}"])
    assert first[f"specdec_acceptance_rate{lab}"] == 0.5  # 4 accepted / 8 proposed
    assert first[f"specdec_acceptance_length{lab}"] == 3.0  # 1 + 4 accepted / 2 verify rounds
    assert first[f"specdec_window_verify_rounds{lab}"] == 2
    assert second[f"specdec_acceptance_rate{lab}"] == 0.75  # 12 / 16
    assert second[f"specdec_acceptance_length{lab}"] == 4.0  # 1 + 12 / 4
    assert math.isnan(later[f"specdec_acceptance_rate{lab}"])
    assert second["specdec_sidecar_rows_written_total"] == 5
    assert second["specdec_sidecar_compactions_total"] == 2


def test_histograms_count_one_observation_per_engine_step(tmp_path):
    s = _settings(tmp_path)
    rows = [
        _round(4, 1, step=0, draft_ms=0.4, verify_ms=30.0),
        _round(4, 1, step=1, draft_ms=1.0, verify_ms=None),
        _round(4, 1, step=2, draft_ms=3.0, verify_ms=30.0),
        _round(4, 2, step=2, draft_ms=3.0, verify_ms=30.0),  # same step, another request: counted once
        _round(4, 2, step=2, token="12-bbbb", draft_ms=20000.0),
    ]  # another engine process

    async def body(sc):
        _part(s.capture_dir, 0, rows)
        await sc.compact()
        return samples(await _get(sc.url + "/metrics"))

    m = _with_sidecar(s, body)
    lab = 'server="http://127.0.0.1:9"'
    draft = {le: m[f'specdec_draft_ms_bucket{{{lab},le="{le}"}}'] for le in ("0.5", "1", "2.5", "5", "10000", "+Inf")}
    assert draft == {"0.5": 1, "1": 2, "2.5": 2, "5": 3, "10000": 3, "+Inf": 4}
    assert m[f"specdec_draft_ms_count{{{lab}}}"] == 4
    assert m[f"specdec_draft_ms_sum{{{lab}}}"] == pytest.approx(20004.4)
    assert m[f'specdec_verify_ms_bucket{{{lab},le="25"}}'] == 0
    assert m[f'specdec_verify_ms_bucket{{{lab},le="50"}}'] == 2  # steps 0 and 2; NULLs skipped
    assert m[f"specdec_verify_ms_count{{{lab}}}"] == 2
    assert len([k for k in m if k.startswith("specdec_draft_ms_bucket")]) == len(BUCKETS_MS) + 1


# --------------------------------------------------------------- counters
def test_counter_scrapes_land_in_the_lake(tmp_path, fixtures):
    prom = (fixtures / "vllm_metrics_spec.prom").read_text()

    async def go():
        async with serving(FakeVllm(metrics_text=prom).server()) as (_, url):
            sc = Sidecar(_settings(tmp_path, server=url))
            await sc.start()
            try:
                await sc.scrape()
                await sc.scrape()
                written = await sc.flush_counters()
                text = await _get(sc.url + "/metrics")
            finally:
                await sc.close()
            return url, written, samples(text)

    url, written, m = asyncio.run(go())
    assert written == 2
    rows = _lake_rows(tmp_path / "lake", LAKE_COUNTERS_GLOB)
    # the two scrapes, and the one close() takes so the lake ends with the counters at the stop
    assert len(rows) == 3 and all(r["scrape_ok"] and r["server"] == url and r["error"] is None for r in rows)
    expected = parse_counters(prom)
    assert {k: rows[0][k] for k in COUNTERS} == expected
    assert rows[0]["spec_num_accepted_tokens"] == 7.0 and rows[0]["requests_running"] == 0.0
    assert m[f'specdec_server_spec_num_drafts_total{{server="{url}"}}'] == 4.0
    assert m["specdec_sidecar_scrape_failures_total"] == 0
    assert m["specdec_sidecar_counter_rows_written_total"] == 2


def test_a_failed_scrape_is_a_row_and_counted(tmp_path):
    async def body(sc):
        row = await sc.scrape()  # nothing listens on port 9
        await sc.flush_counters()
        return row, samples(await _get(sc.url + "/metrics"))

    row, m = _with_sidecar(_settings(tmp_path), body)
    assert not row.scrape_ok and row.error and row.spec_num_drafts is None
    assert m["specdec_sidecar_scrape_failures_total"] == 1
    stored = _lake_rows(tmp_path / "lake", LAKE_COUNTERS_GLOB)  # this scrape, then close()'s last one
    assert (
        len(stored) == 2 and all(r["scrape_ok"] is False for r in stored) and row.error in {r["error"] for r in stored}
    )


def test_counter_record_has_every_counter_and_gauge():
    assert set(CounterScrape.model_fields) == {*COUNTERS, *GAUGES, "wall_time_ns", "server", "scrape_ok", "error"}


# ------------------------------------------------------------------- stop
def test_stopping_compacts_and_flushes_what_is_left(tmp_path):
    s = _settings(tmp_path, compact_s=3600, scrape_s=3600)

    async def go():
        sc = Sidecar(s)
        await sc.start()
        stop = asyncio.Event()
        task = asyncio.create_task(sc.serve(stop))
        while sc.metrics.counters["specdec_sidecar_compactions_total"] < 1:  # the first pass runs at once
            await asyncio.sleep(0.01)
        _part(s.capture_dir, 0, [_round(4, 4), _round(4, 0, step=1)])  # arrives after that pass
        stop.set()
        await task

    asyncio.run(go())
    assert len(_lake_rows(s.lake)) == 2
    assert not list(s.capture_dir.glob("rounds-*"))
    # the first scrape (runs at once) and the last one taken at stop, neither due before it: both written at stop
    assert len(_lake_rows(s.lake, LAKE_COUNTERS_GLOB)) == 2


@contextmanager
def _cli_sidecar(*args: str):
    """The CLI sidecar in a subprocess: yields (process, result); on leaving the
    block it gets SIGTERM and result["out"] holds all it printed (killed if it hangs)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "specdec.cli.capture", "sidecar", *args], stdout=subprocess.PIPE, text=True
    )
    result: dict = {}
    try:
        yield proc, result
        proc.send_signal(signal.SIGTERM)
        result["out"], _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_cli_sidecar_stops_on_sigterm_and_loses_nothing(tmp_path):
    cap, lake = tmp_path / "cap", tmp_path / "lake"
    with _cli_sidecar(
        "--capture-dir",
        str(cap),
        "--lake",
        str(lake),
        "--server",
        "http://127.0.0.1:9",
        "--listen",
        "127.0.0.1:0",
        "--compact-s",
        "3600",
        "--scrape-s",
        "3600",
    ) as (proc, result):
        line = proc.stdout.readline()
        assert "listening on http://127.0.0.1:" in line, line
        _part(cap, 0, [_round(4, 4), _round(4, 0, step=1), _round(0, 0, step=2)])
    out = result["out"]
    assert proc.returncode == 0, out
    assert '"specdec_sidecar_rows_written_total": 3' in out
    assert len(_lake_rows(lake)) == 3 and not list(cap.glob("rounds-*"))
    scrapes = _lake_rows(lake, LAKE_COUNTERS_GLOB)  # the first scrape and the one taken at stop
    assert len(scrapes) == 2 and all(r["scrape_ok"] is False for r in scrapes)


def test_cli_help_and_bad_options(tmp_path):
    runner = CliRunner()
    help_text = runner.invoke(capture_cli, ["sidecar", "--help"]).output
    for option in ("--capture-dir", "--lake", "--server", "--listen", "--compact-s", "--scrape-s", "--window-s"):
        assert option in help_text
    bad = runner.invoke(
        capture_cli,
        ["sidecar", "--capture-dir", str(tmp_path / "c"), "--lake", str(tmp_path / "l"), "--server", "localhost:8000"],
    )
    assert bad.exit_code == 2 and "--server" in bad.output and "http://" in bad.output
    bad = runner.invoke(
        capture_cli,
        [
            "sidecar",
            "--capture-dir",
            str(tmp_path / "c"),
            "--lake",
            str(tmp_path / "l"),
            "--server",
            "http://x",
            "--compact-s",
            "0",
        ],
    )
    assert bad.exit_code == 2 and "--compact-s" in bad.output


# ----------------------------------------------------------------- alerts
def _rendered_names() -> set[str]:
    import pyarrow as pa

    from specdec.capture.categories import CategoryBook
    from specdec.capture.sidecar.metrics import LiveMetrics

    book = CategoryBook()
    book.note("chatcmpl-a", "code")
    m = LiveMetrics("http://s", 60, book)
    m.server_values = dict.fromkeys([*COUNTERS, *GAUGES], 1.0)
    m.capture = {"processes": 1}
    m.observe_rounds(pa.Table.from_pylist([_round(4, 2).model_dump() | {"engine_request_id": "chatcmpl-a-0123abcd"}]))
    return {re.split(r"[{ ]", line)[0] for line in m.render(NOW_NS).splitlines() if not line.startswith("#")}


def test_metric_names_list_is_what_the_endpoint_exports():
    assert _rendered_names() == set(METRIC_NAMES)


def test_alert_rules_parse_and_use_only_exported_metrics():
    yaml = pytest.importorskip("yaml", reason="PyYAML (installed with vllm) is needed to read the rules")
    doc = yaml.safe_load(ALERTS.read_text())
    rules = [r for g in doc["groups"] for r in g["rules"]]
    assert {r["alert"] for r in rules} >= {
        "SpecdecAcceptanceLow",
        "SpecdecCategoryAcceptanceLow",
        "SpecdecCaptureRowsDropped",
        "SpecdecCaptureSilent",
    }
    keywords = {"and", "or", "unless", "on", "ignoring", "by", "without", "bool", "group_left", "group_right"}
    used = set()
    for r in rules:
        expr = r["expr"]
        used |= {
            m.group(0)
            for m in re.finditer(r"(?<![\w:])[A-Za-z_:][\w:]*(?!\w*\()", expr)
            if m.group(0) not in keywords and not expr[m.end() :].startswith("(")
        }
    assert used <= set(METRIC_NAMES), used - set(METRIC_NAMES)
    assert {
        "specdec_acceptance_rate",
        "specdec_category_acceptance_rate",
        "specdec_sidecar_rows_dropped_total",
        "specdec_sidecar_rows_written_total",
        "specdec_server_generation_tokens_total",
    } <= used
    low = next(r for r in rules if r["alert"] == "SpecdecAcceptanceLow")
    assert low["for"] == "10m"


def test_one_sidecar_process_also_records_traffic_through_its_proxy(tmp_path):
    # issue 8: "one process, one command; it also serves the recording proxy"
    import json
    import urllib.request

    from specdec.runfolder import TRAFFIC_PART_GLOB

    cap, lake = tmp_path / "cap", tmp_path / "lake"
    fake = FakeVllm()
    with (
        threaded(fake) as (server,),
        _cli_sidecar(
            "--capture-dir",
            str(cap),
            "--lake",
            str(lake),
            "--server",
            server,
            "--listen",
            "127.0.0.1:0",
            "--proxy-listen",
            "127.0.0.1:0",
            "--compact-s",
            "3600",
            "--scrape-s",
            "3600",
        ) as (proc, result),
    ):
        sidecar_url = proc.stdout.readline().split("listening on ")[1].split()[0]
        proxy_line = proc.stdout.readline()
        assert "specdec proxy listening on http://127.0.0.1:" in proxy_line, proxy_line
        proxy_url = proxy_line.split("listening on ")[1].split()[0]
        body = json.dumps(
            {"model": "fake-model", "stream": True, "messages": [{"role": "user", "content": "hello there"}]}
        ).encode()
        req = urllib.request.Request(
            proxy_url + "/v1/chat/completions",
            data=body,
            headers={"Content-Type": "application/json", "X-Specdec-Category": "code"},
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            streamed = r.read()
        # the model label comes with the sidecar's first scrape of the server, made in the
        # background after it starts listening: on a busy host /metrics can be read before it
        deadline = time.monotonic() + 20
        while True:
            with urllib.request.urlopen(sidecar_url + "/metrics", timeout=10) as r:
                metrics = r.read().decode()
            if 'model="fake-model"' in metrics or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    out = result["out"]
    assert proc.returncode == 0, out
    assert b"data: [DONE]" in streamed and fake.bodies[0]["messages"][0]["content"] == "hello there"
    assert "specdec proxy stopped: 1 rows written" in out
    parts = list((lake / "traffic").glob(TRAFFIC_PART_GLOB))
    rows = [r for p in parts for r in pq.read_table(p).to_pylist()]
    assert [r["category"] for r in rows] == ["code"]
    assert "hello there" not in json.dumps(rows, default=str)  # hash mode by default
    # the server named its model: the rolling gauges carry it
    assert f'specdec_acceptance_rate{{server="{server}",model="fake-model"}} NaN' in metrics


def test_proxy_options_need_proxy_listen(tmp_path):
    res = CliRunner().invoke(
        capture_cli,
        [
            "sidecar",
            "--capture-dir",
            str(tmp_path / "c"),
            "--lake",
            str(tmp_path / "l"),
            "--server",
            "http://x",
            "--proxy-out",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 2 and "--proxy-listen" in res.output
