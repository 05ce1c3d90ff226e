"""Acceptance 1 of issue 8, the sidecar part: `specdec-capture sidecar` runs
beside the embedded vLLM server (capture plugin on, ngram speculation) while a
client sends streamed chat requests. Its /metrics shows the acceptance gauge
go from NaN to a number; the lake holds the rounds (hive layout) and the
counter scrapes; the verify rounds, proposed and accepted tokens in the lake
equal vLLM's own spec_decode counters (what the plugin wrote, counted by the
engine); nothing is left in the capture folder. The requests go through the
sidecar's own proxy with category headers, so the per-category gauges split
the same rounds by the requests' categories.

It runs on the session's shared vLLM pair (``vllm_pair``: its ngram server), first of every
engine test (tests/conftest.py orders it so): the pair is then fresh, so its counters since
start-up and its capture folder hold this test's requests alone, as an own server's did
(issue 40: its own vLLM server cost a start, about 25 s).

Then `specdec analytics build LAKE` over two runs: a second run's part file
(the first run's rows under another run id and engine process token, as a
second server's plugin would write them; a second vLLM server would take
minutes more) is dropped into the capture folder before the sidecar stops, so
its last compaction moves it into the lake. capture_acceptance has one row
per run: the first run's figures equal vLLM's counters, the second's its
own rows."""

import asyncio
import math
import signal
import subprocess
import sys
import time
import urllib.request

import aiohttp
import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from specdec.analytics.build import build
from specdec.runfolder import (
    LAKE_COUNTERS_GLOB,
    LAKE_ROUNDS_GLOB,
    ROUND_PART_GLOB,
    lake_partition_value,
    round_part_name,
)
from specdec.schemas.arrow import write_parquet_atomic
from tests.support.engine_servers import SHARED_RUN_ID

#: ``first_on_pair``: run before any other engine test touches the session's vLLM pair (module docstring)
pytestmark = [pytest.mark.engine, pytest.mark.first_on_pair]

RUN_ID = SHARED_RUN_ID  # the pair's plugin writes its rounds under this run id
SECOND_RUN = "sidecar-e2e/second"  # a '/' in a run id: its lake partition folder is percent-encoded
PROMPTS = [
    "Repeat this list three times: red, green, blue, red, green, blue, red, green, blue.",
    "Count from one to twenty in words: one, two, three, four, five,",
    "Write the alphabet twice: a b c d e f g h i j k l m n o p q r s t u v w x y z",
]


def _metrics(url: str) -> dict[str, float]:
    """name -> value; a per-category series as name[category]."""
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            name = key.split("{")[0]  # one server label: the name alone is unique
            if 'category="' in key:
                name += "[" + key.split('category="')[1].split('"')[0] + "]"
            out[name] = float(value)
    return out


#: Per prompt: the category header the client sends through the sidecar's proxy, and
#: its X-Request-Id (None: vLLM names the request itself).
LABELS = [("lists", "e2e-lists-1"), ("counting", None), ("lists", None)]


async def _chat(base_url: str) -> None:
    async with aiohttp.ClientSession() as session:
        for prompt, (category, request_id) in zip(PROMPTS, LABELS):
            body = {
                "model": "specdec-target",
                "messages": [{"role": "user", "content": prompt}],
                "stream": True,
                "temperature": 0,
                "max_tokens": 32,
                "ignore_eos": True,
            }
            headers = {"X-Specdec-Category": category} | ({"X-Request-Id": request_id} if request_id else {})
            async with session.post(base_url + "/v1/chat/completions", json=body, headers=headers) as r:
                assert r.status == 200
                await r.read()


def _lake_rounds(lake, run_id: str | None = RUN_ID) -> list[dict]:
    """The lake's rounds of one run (every run's with run_id None)."""
    return [
        row
        for f in sorted(lake.glob(LAKE_ROUNDS_GLOB))
        for row in pq.read_table(f).to_pylist()
        if run_id is None or row["run_id"] == run_id
    ]


def _second_run_part(lake, cap) -> pa.Table:
    """The first run's lake rows as a second engine's plugin part of run SECOND_RUN."""
    table = pa.concat_tables([pq.read_table(f) for f in sorted(lake.glob(LAKE_ROUNDS_GLOB))])
    n = table.num_rows
    table = table.set_column(
        table.schema.get_field_index("run_id"), table.schema.field("run_id"), pa.array([SECOND_RUN] * n, pa.string())
    )
    table = table.set_column(
        table.schema.get_field_index("process_token"),
        table.schema.field("process_token"),
        pa.array(["99-beefcafe"] * n, pa.string()),
    )
    write_parquet_atomic(table, cap / round_part_name("99-beefcafe", 0))
    return table


def _lake_count(lake) -> int:
    return len(_lake_rounds(lake))


def _until(check, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while not (value := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)
    return value


def test_the_sidecar_beside_the_embedded_server(tmp_path, vllm_pair):
    t0 = time.monotonic()
    cap, lake = vllm_pair.capture_dir, tmp_path / "lake"
    server = vllm_pair.speculative
    # the pair fresh (first of the engine tests): the lake must equal vLLM's counters since start-up
    assert not list(cap.glob(ROUND_PART_GLOB)), "the sidecar test must run before any other use of the vLLM pair"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specdec.cli.capture",
            "sidecar",
            "--capture-dir",
            str(cap),
            "--lake",
            str(lake),
            "--server",
            server.base_url,
            "--listen",
            "127.0.0.1:0",
            "--compact-s",
            "0.5",
            "--scrape-s",
            "0.5",
            "--window-s",
            "600",
            "--proxy-listen",
            "127.0.0.1:0",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().split("listening on ")[1].split()[0]
        proxy_url = proc.stdout.readline().split("listening on ")[1].split()[0]
        before = _metrics(url)
        asyncio.run(_chat(proxy_url))
        during = _until(
            lambda: (m := _metrics(url)) and not math.isnan(m["specdec_acceptance_rate"]) and m,
            60,
            "the acceptance gauge",
        )

        def settled():  # every round compacted, in the live metrics, and counted by vLLM
            m = _metrics(url)  # read first: its rows are in the lake before they are in the metrics
            rows = _lake_rounds(lake)
            verify = sum(1 for r in rows if r["tokens_proposed"] > 0)
            return (
                verify > 0
                and m["specdec_sidecar_rows_written_total"] == len(rows)
                and m.get("specdec_server_spec_num_drafts_total") == verify
                and m
            )

        def stable():  # settled, and still the same 2 s later (4 compactions and scrapes): the plugin's
            # last part and vLLM's last stats can arrive after a first agreement (a CI run saw 10, then 15)
            first = settled()
            if not first:
                return False
            time.sleep(2.0)
            second = settled()
            return second if second and _lake_count(lake) == first["specdec_sidecar_rows_written_total"] else False

        live = _until(stable, 90, "the lake to hold every verify round vLLM counted, stably")
        second = _second_run_part(lake, cap)  # moved into the lake by the last compaction at stop
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    # the engine said once, at start-up, what the capture gives with its runner (capture.plugin.runner_line)
    lines = [
        line
        for line in server.log_path.read_text(errors="replace").splitlines()
        if "specdec-capture: counts exact" in line
    ]
    assert len(lines) == 1 and "timings from the host clock (V1 runner" in lines[0] and "on CPU" in lines[0], lines

    # the gauge moved: NaN before the requests, a rate after
    assert math.isnan(before["specdec_acceptance_rate"])
    assert 0 < during["specdec_acceptance_rate"] <= 1
    assert during["specdec_acceptance_length"] >= 1
    assert live["specdec_sidecar_rows_dropped_total"] == 0 and live["specdec_draft_ms_count"] > 0
    # the engine processes' own capture counters, from their status files
    assert live["specdec_capture_processes"] >= 1 and live["specdec_capture_hook_failures_total"] == 0
    assert live["specdec_capture_engine_rows_dropped_total"] == 0

    # the lake holds the rounds, partitioned by date and run
    rows = _lake_rounds(lake)
    assert {f.parent.name for f in lake.glob(LAKE_ROUNDS_GLOB)} == {
        f"run_id={lake_partition_value(RUN_ID)}",
        f"run_id={lake_partition_value(SECOND_RUN)}",
    }
    assert {r["run_id"] for r in _lake_rounds(lake, None)} == {RUN_ID, SECOND_RUN}
    assert not list(cap.glob(ROUND_PART_GLOB))  # nothing left behind
    assert f'"specdec_sidecar_rows_written_total": {len(rows) + second.num_rows}' in out

    # ... and the counter scrapes; the rounds equal what vLLM itself counted
    scrapes = [r for f in sorted(lake.glob(LAKE_COUNTERS_GLOB)) for r in pq.read_table(f).to_pylist()]
    ok = sorted((r for r in scrapes if r["scrape_ok"]), key=lambda r: r["wall_time_ns"])
    assert ok and ok[-1]["server"] == server.base_url
    last = ok[-1]
    verify = [r for r in rows if r["tokens_proposed"] > 0]
    assert len(verify) == last["spec_num_drafts"]
    assert sum(r["tokens_proposed"] for r in rows) == last["spec_num_draft_tokens"]
    assert sum(r["tokens_accepted"] for r in rows) == last["spec_num_accepted_tokens"]
    assert live["specdec_acceptance_rate"] == pytest.approx(
        last["spec_num_accepted_tokens"] / last["spec_num_draft_tokens"]
    )

    # per category: every request went through the proxy, so the categories' rounds are all the
    # rounds, split as the requests' own rows split (vLLM's engine ids resolved to the reply ids,
    # with and without a client X-Request-Id)
    per_cat = {c: live[f"specdec_category_window_verify_rounds[{c}]"] for c in ("lists", "counting")}
    assert sum(per_cat.values()) == live["specdec_window_verify_rounds"] == len(verify)
    by_request: dict[str, list] = {}
    for r in verify:
        by_request.setdefault(r["engine_request_id"], []).append(r)
    assert len(by_request) == 3 and any("e2e-lists-1" in e for e in by_request)
    ordered = sorted(by_request.values(), key=lambda rs: min(r["wall_time_ns"] for r in rs))  # sent one by one
    counting = ordered[1]
    assert per_cat["counting"] == len(counting)
    assert live["specdec_category_acceptance_rate[counting]"] == pytest.approx(
        sum(r["tokens_accepted"] for r in counting) / sum(r["tokens_proposed"] for r in counting)
    )
    assert "specdec_category_window_verify_rounds[unknown]" not in live

    # one database over the lake's two runs: marts keyed by run
    db = build(lake)
    con = duckdb.connect(str(db), read_only=True)
    try:
        runs = {
            r[0]: r[1:]
            for r in con.execute(
                "select run_id, rows, verify_rounds, tokens_proposed, tokens_accepted, engines from capture_acceptance"
            ).fetchall()
        }
        listed = con.execute("select run_id, manifest is null from raw_manifest order by run_id").fetchall()
        scraped = con.execute("select count(*) from stg_counter_scrapes where scrape_ok").fetchone()[0]
    finally:
        con.close()
    assert listed == [(RUN_ID, True), (SECOND_RUN, True)]
    assert runs[RUN_ID] == (
        len(rows),
        last["spec_num_drafts"],
        last["spec_num_draft_tokens"],
        last["spec_num_accepted_tokens"],
        1,
    )
    k = second["tokens_proposed"]
    second_verify = pc.sum(pc.cast(pc.greater(k, 0), pa.int64())).as_py()
    assert runs[SECOND_RUN] == (
        second.num_rows,
        second_verify,
        pc.sum(k).as_py(),
        pc.sum(second["tokens_accepted"]).as_py(),
        1,
    )
    assert scraped == len(ok)
    print(
        f"sidecar e2e: {len(rows)} rows, {len(verify)} verify rounds, {len(scrapes)} scrapes, "
        f"acceptance {live['specdec_acceptance_rate']:.3f}, {time.monotonic() - t0:.0f} s"
    )
