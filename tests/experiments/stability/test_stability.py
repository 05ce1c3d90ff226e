"""specdec stability against a fake vLLM (no engine): each probe's judgement,
the run folder it writes, the loopback rule, and the small helpers.

The fake answers like vLLM where the probes look: HTTP 400 for a negative
temperature, a top_p outside (0, 1], a prompt longer than max_model_len
(counted in words) and text that is not valid Unicode; it streams one chunk
per token otherwise, exports num_requests_running, and can be told to leak
dropped streams, refuse a burst, change its greedy outputs, or fall over.
It runs on its own event loop in a thread, so the synchronous runner (which
calls asyncio.run) can target it as it would a real server.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from aiohttp import web
from click.testing import CliRunner

from specdec.errors import SpecdecError
from specdec.experiments.stability import StabilityConfig, fault_table, faults, load_faults, run_stability, table_text
from specdec.experiments.stability.faults import Finding, Probe, Target, clean, gauge_sum
from specdec.experiments.stability.runner import probe_all, run_probe
from specdec.experiments.stability.server import EndpointServer, require_loopback
from specdec.experiments.stability.soak import rss_trend
from specdec.http.urls import parse_endpoint
from specdec.replay.http.client import ClientSettings, stream_payload
from specdec.schemas.records import StabilityResult

MAX_LEN = 1000
ALL_FAULTS = [
    "empty_prompt",
    "whitespace_prompt",
    "over_length_prompt",
    "odd_unicode",
    "extreme_temperature",
    "extreme_top_p",
    "disconnect_mid_stream",
    "burst",
    "soak",
    "greedy_recheck",
    "kill_restart",
]


class FakeEngine:
    """Behaviour switches: leak (dropped streams keep 'running'), capacity
    (refuse with 429 beyond it), drift (greedy outputs change after the first
    `drift_after` requests), poison (a temperature that makes /health fail)."""

    def __init__(
        self,
        delay_s: float = 0.002,
        leak: bool = False,
        capacity: int | None = None,
        drift_after: int | None = None,
        poison_temperature: float | None = None,
    ):
        self.delay_s, self.leak, self.capacity = delay_s, leak, capacity
        self.drift_after, self.poison_temperature = drift_after, poison_temperature
        self.running = 0  # what /metrics reports
        self.active = 0  # streams really being written
        self.requests = 0
        self.sick = False
        self.raw_bodies: list[bytes] = []
        self.auth: list[str | None] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics)
        return app

    async def models(self, request):
        return web.json_response({"data": [{"id": "fake-model", "max_model_len": MAX_LEN}]})

    async def health(self, request):
        return web.Response(status=500 if self.sick else 200)

    async def metrics(self, request):
        return web.Response(
            text=f'vllm:num_requests_running{{engine="0"}} {self.running}.0\n'
            'vllm:num_requests_waiting{engine="0"} 0.0\n'
        )

    async def chat(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.raw_bodies.append(raw)
        self.auth.append(request.headers.get("Authorization"))
        body = json.loads(raw)
        content = body["messages"][0]["content"]
        temp, top_p = body.get("temperature", 1.0), body.get("top_p", 1.0)
        if temp == self.poison_temperature:
            self.sick = True
        if temp < 0 or not 0 < top_p <= 1:
            return web.json_response({"error": "bad sampling"}, status=400)
        try:
            content.encode("utf-8")
        except UnicodeEncodeError:
            return web.json_response({"error": "surrogates not allowed"}, status=400)
        if len(content.split()) > MAX_LEN:
            return web.json_response({"error": "prompt too long"}, status=400)
        if self.capacity is not None and self.active >= self.capacity:
            return web.json_response({"error": "busy"}, status=429)
        self.requests += 1
        drift = self.drift_after is not None and self.requests > self.drift_after
        self.running += 1
        self.active += 1
        dropped = False
        try:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            n = body["max_tokens"]
            for i in range(n):
                word = f"{'x' if drift else ''}{len(content) % 7}{i} "
                await resp.write(b"data: " + json.dumps({"choices": [{"delta": {"content": word}}]}).encode() + b"\n\n")
                await asyncio.sleep(self.delay_s)
            await resp.write(b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":%d}}\n\n' % n)
            await resp.write(b"data: [DONE]\n\n")
            return resp
        except (ConnectionResetError, asyncio.CancelledError):
            dropped = True
            raise
        finally:
            self.active -= 1
            if not (dropped and self.leak):
                self.running -= 1


class ThreadedServer:
    """A FakeEngine served on its own event loop in a daemon thread."""

    def __init__(self, engine: FakeEngine):
        self.engine = engine
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.runner = None
        self.starts = 0

    def _call(self, coro, timeout=10):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _start(self) -> str:
        self.runner = web.AppRunner(self.engine.app(), shutdown_timeout=0.05)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.starts += 1
        return f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"

    def start(self) -> str:
        self.url = self._call(self._start())
        return self.url

    def stop(self) -> None:
        if self.runner is not None:
            self._call(self.runner.cleanup())
            self.runner = None


@pytest.fixture
def serve():
    servers = []

    def start(engine: FakeEngine) -> ThreadedServer:
        srv = ThreadedServer(engine)
        srv.start()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.stop()
        srv.loop.call_soon_threadsafe(srv.loop.stop)


class RestartableFake:
    """A server control like EmbeddedServer, over a ThreadedServer: kill drops
    every connection, start serves again on a new port; RSS is made up."""

    restartable = True

    def __init__(self, srv: ThreadedServer):
        self.srv = srv
        self.endpoint = parse_endpoint(srv.url)
        self.kills = 0
        self._rss = iter(range(100, 10_000, 2))

    def rss_mb(self) -> float:
        return float(next(self._rss))

    async def kill(self) -> None:
        self.kills += 1
        await asyncio.to_thread(self.srv.stop)
        self.srv.engine.running = 0

    async def start(self) -> None:
        self.endpoint = parse_endpoint(await asyncio.to_thread(self.srv.start))

    def stop(self) -> None:
        pass


def _cfg(tmp_path: Path, url: str, **kw) -> StabilityConfig:
    base = dict(
        url=url,
        runs_dir=tmp_path / "runs",
        run_id="st",
        concurrency=2,
        soak_minutes=0.01,
        rss_interval_s=0.1,
        connect_timeout_s=2,
        request_timeout_s=5,
        probe_timeout_s=30,
    )
    return StabilityConfig(**{**base, **kw})


def _probe_rows(cfg: StabilityConfig, control) -> list[StabilityResult]:
    settings = ClientSettings(connect_timeout_s=cfg.connect_timeout_s, request_timeout_s=cfg.request_timeout_s)
    return asyncio.run(probe_all(cfg, control, "st", settings, sink=lambda row: None, echo=lambda s: None))


@pytest.fixture(autouse=True)
def short_waits(monkeypatch):
    monkeypatch.setattr(load_faults, "IDLE_WAIT_S", 1.0)
    monkeypatch.setattr(faults, "POLL_S", 0.05)


# ------------------------------------------------------------------ helpers
def test_rss_trend_hand_numbers():
    t = rss_trend([(0.0, 100.0), (30.0, 105.0), (60.0, 110.0)])
    assert (t.samples, t.first_mb, t.last_mb, t.max_mb) == (3, 100.0, 110.0, 110.0)
    assert t.slope_mb_per_min == pytest.approx(10.0)
    flat = rss_trend([(0.0, 50.0), (10.0, 60.0), (20.0, 50.0)])
    assert flat.slope_mb_per_min == pytest.approx(0.0) and flat.max_mb == 60.0
    assert rss_trend([(5.0, 1.0)]).slope_mb_per_min is None
    assert rss_trend([]) is None


def test_gauge_sum_over_label_sets():
    text = (
        '# HELP vllm:num_requests_running x\nvllm:num_requests_running{engine="0",model_name="m"} 2.0\n'
        'vllm:num_requests_running{engine="1",model_name="m"} 1.0\nvllm:num_requests_waiting 3\n'
        "vllm:num_requests_running_total 99\n"
    )
    assert gauge_sum(text, ("vllm:num_requests_running",)) == 3.0
    assert gauge_sum(text, faults.BUSY_GAUGES) == 6.0
    assert gauge_sum("other 1\n", faults.BUSY_GAUGES) is None


def test_clean_shows_control_characters_as_escapes():
    assert clean("a\x1b[31mb\u2028c\x00") == "a\\x1b[31mb\\u2028c\\x00"
    assert clean("x" * 200, 10) == "xxxxxxx..."


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8000", "http://127.9.9.9", "http://localhost:1/", "http://[::1]:8000", "http://u:p@127.0.0.1:9"],
)
def test_loopback_urls_are_accepted(url):
    assert require_loopback(url).base.startswith("http://")


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1:8000",
        "http://example.com",
        "http://0.0.0.0:8000",
        "http://[::2]:80",
        "http://localhost.example.com",
        "http://192.168.1.2",
    ],
)
def test_other_hosts_are_refused_before_anything_is_written(tmp_path, url):
    with pytest.raises(SpecdecError, match="only targets a server on this machine"):
        run_stability(_cfg(tmp_path, url))
    assert not (tmp_path / "runs").exists()


def test_lone_surrogate_goes_out_as_a_json_escape(serve):
    # Python's json (aiohttp's default) writes "\ud800" as an ASCII escape, so
    # the request is sendable; the server decides what to do with it.
    srv = serve(FakeEngine())

    async def go():
        import aiohttp

        async with aiohttp.ClientSession() as s:
            return await stream_payload(s, srv.url, faults.chat("m", "x\ud800y"), "r1")

    res = asyncio.run(go())
    assert b'"x\\ud800y"' in srv.engine.raw_bodies[0]
    assert res.error_type == "http_status" and res.http_status == 400


# ------------------------------------------------------------------ whole runs
def test_well_behaved_server_passes_every_probe_and_run_folder_is_written(serve, tmp_path, monkeypatch):
    srv = serve(FakeEngine())
    url = srv.url.replace("http://", "http://alice:s3cret-pw@") + "?api_key=k3y-in-url"
    monkeypatch.setenv("SPECDEC_TEST_KEY", "sk-never-written")
    run_dir, rows = run_stability(_cfg(tmp_path, url, api_key_env="SPECDEC_TEST_KEY"), echo=lambda s: None)

    table = {f["fault"]: f for f in fault_table(rows)}
    assert list(table) == ALL_FAULTS
    assert {f: v["outcome"] for f, v in table.items()} == {**{f: "ok" for f in ALL_FAULTS}, "kill_restart": "skipped"}
    assert all(r.server_healthy_after for r in rows)
    by = {(r.fault, r.probe_index): r for r in rows}
    assert by[("extreme_temperature", 3)].error_types == ["http_400"]  # temperature -1
    assert by[("over_length_prompt", 0)].error_types == ["http_400"]
    assert by[("odd_unicode", 8)].error_types == ["http_400"]  # lone surrogate, refused
    assert by[("empty_prompt", 0)].requests_sent == 1 and by[("empty_prompt", 0)].requests_failed == 0
    assert by[("burst", 0)].requests_sent == 8  # 4 x concurrency 2
    assert by[("disconnect_mid_stream", 0)].requests_sent == 3  # 2 dropped + 1 normal
    assert "went back to 0" in by[("disconnect_mid_stream", 0)].detail
    assert by[("soak", 0)].requests_sent > 0 and by[("soak", 0)].rss_samples is None  # endpoint: no RSS
    assert [r.probe_index for r in rows if r.fault == "greedy_recheck"] == [0, 1]
    assert "not killed or restarted" in by[("kill_restart", 0)].detail

    assert srv.engine.auth[-1] == "Bearer sk-never-written"
    stored = pq.read_table(run_dir / "stability.parquet")
    assert stored.num_rows == len(rows) and stored.schema.metadata[b"record"] == b"StabilityResult"
    assert not list(run_dir.glob("stability-*.parquet"))  # parts consolidated
    assert (tmp_path / "runs" / "latest").resolve() == run_dir.resolve()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["finished"] is True and manifest["kind"] == "stability"
    assert manifest["model"] == "fake-model" and "max_model_len 1000" in manifest["notes"]
    assert [a["name"] for a in manifest["arms"]] == ["baseline"]
    assert "s3cret-pw" not in manifest["arms"][0]["endpoint"] and "***" in manifest["arms"][0]["endpoint"]
    for f in run_dir.rglob("*"):
        data = f.read_bytes()
        assert b"s3cret-pw" not in data and b"k3y-in-url" not in data and b"sk-never-written" not in data, f


def test_misbehaviour_is_judged_per_fault(serve, tmp_path):
    # drops leak, the burst is refused past 2 streams, greedy outputs change after the reference
    srv = serve(FakeEngine(leak=True, capacity=2, drift_after=6))
    rows = _probe_rows(_cfg(tmp_path, srv.url), EndpointServer(parse_endpoint(srv.url)))
    table = {f["fault"]: f for f in fault_table(rows)}
    disc = table["disconnect_mid_stream"]
    assert disc["outcome"] == "degraded" and "still running or waiting" in disc["detail"]
    burst = next(r for r in rows if r.fault == "burst")
    assert burst.outcome == "ok" and "http_429" in burst.error_types  # refusing is allowed
    greedy = [r for r in rows if r.fault == "greedy_recheck"]
    assert [r.outcome for r in greedy] == ["failed", "failed"] and "0/3 outputs unchanged" in greedy[0].detail
    assert table["greedy_recheck"]["outcome"] == "failed"


def test_a_probe_that_leaves_the_server_unhealthy_fails_and_later_probes_are_skipped(serve, tmp_path):
    srv = serve(FakeEngine(poison_temperature=1e6))
    rows = _probe_rows(_cfg(tmp_path, srv.url), EndpointServer(parse_endpoint(srv.url)))
    poisoned = next(r for r in rows if r.fault == "extreme_temperature" and r.probe_index == 2)
    assert poisoned.outcome == "failed" and not poisoned.server_healthy_after
    assert "did not answer 200" in poisoned.detail
    later = rows[rows.index(poisoned) + 1 :]
    assert later and all(r.outcome == "skipped" and r.requests_sent == 0 for r in later)
    assert {f["fault"] for f in fault_table(rows)} == set(ALL_FAULTS)  # every fault still has a row


def test_kill_and_restart_turn_streams_in_flight_into_typed_errors(serve, tmp_path):
    srv = serve(FakeEngine(delay_s=0.005))
    control = RestartableFake(srv)
    rows = _probe_rows(_cfg(tmp_path, srv.url), control)
    kill = next(r for r in rows if r.fault == "kill_restart")
    assert control.kills == 1 and srv.starts == 2
    assert kill.outcome == "ok", kill.detail
    assert kill.requests_sent == 3 and kill.requests_failed == 2  # 2 streams lost, then 1 normal request
    assert set(kill.error_types) <= {"stream_truncated", "connect_error"}
    after = [r for r in rows if r.fault == "greedy_recheck"]
    assert [r.outcome for r in after] == ["ok", "ok"] and "after the restart" in after[1].detail
    soak = next(r for r in rows if r.fault == "soak")
    assert soak.rss_samples >= 2 and soak.rss_first_mb < soak.rss_last_mb and soak.rss_slope_mb_per_min > 0
    assert "trend +" in soak.detail


def test_unhealthy_embedded_server_is_restarted_so_later_probes_still_run(serve, tmp_path):
    engine = FakeEngine(poison_temperature=1e6)
    srv = serve(engine)
    control = RestartableFake(srv)
    orig_start = control.start

    async def start_healed():
        engine.sick = False  # a fresh process
        await orig_start()

    control.start = start_healed
    rows = _probe_rows(_cfg(tmp_path, srv.url), control)
    poisoned = next(r for r in rows if r.fault == "extreme_temperature" and r.probe_index == 2)
    assert poisoned.outcome == "failed"
    assert control.kills == 2  # the recovery, then the kill_restart probe
    assert all(r.outcome != "skipped" for r in rows)


def test_a_probe_over_its_budget_is_cut_off_and_counted(serve):
    srv = serve(FakeEngine(delay_s=0.05))

    async def slow(t: Target) -> Finding:
        await t.send("slow", faults.chat(t.model, "hi", 2))
        await asyncio.sleep(30)
        return Finding("ok", "never")

    async def go():
        import aiohttp

        async with aiohttp.ClientSession() as s:
            t = Target(s, EndpointServer(parse_endpoint(srv.url)), "m", MAX_LEN, ClientSettings(), 1, "st")
            return await run_probe(t, Probe("slow", "finishes", slow), 0, "st", budget_s=0.5)

    started = time.monotonic()
    row = asyncio.run(go())
    assert time.monotonic() - started < 10
    assert row.outcome == "degraded" and "budget of 0.5 s" in row.detail
    assert row.requests_sent == 1 and row.server_healthy_after


def test_cli_prints_the_table_and_exits_1_when_a_fault_failed(serve, tmp_path):
    from specdec.cli.main import main

    srv = serve(FakeEngine(drift_after=6))
    r = CliRunner().invoke(
        main,
        [
            "stability",
            "--url",
            srv.url,
            "--runs-dir",
            str(tmp_path / "runs"),
            "--run-id",
            "cli",
            "--soak-minutes",
            "0.01",
            "--request-timeout",
            "5",
            "--probe-timeout",
            "30",
        ],
    )
    assert r.exit_code == 1, r.output
    lines = r.output.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("fault "))
    table = {line.split()[0]: line.split()[1] for line in lines[head + 1 : head + 1 + len(ALL_FAULTS)]}
    assert list(table) == ALL_FAULTS and table["greedy_recheck"] == "failed" and table["empty_prompt"] == "ok"
    assert "1 fault type(s) failed: greedy_recheck" in r.output
    assert (tmp_path / "runs" / "cli" / "report.html").is_file()
    assert "Traceback" not in r.output


def test_table_text_lists_worst_outcome_per_fault():
    def row(fault, i, outcome, healthy=True):
        return StabilityResult(
            run_id="t",
            fault=fault,
            probe_index=i,
            wall_start_ns=i,
            duration_ms=1.0,
            requests_sent=1,
            requests_failed=int(outcome in ("degraded", "failed")),
            error_types=[],
            expected="completes",
            outcome=outcome,
            server_healthy_after=healthy,
            detail=f"{fault} {i} {outcome}",
        )

    text = table_text(
        [row("a", 0, "ok"), row("a", 1, "degraded"), row("b", 0, "skipped"), row("b", 1, "failed", False)]
    )
    lines = text.splitlines()
    assert lines[1].split()[:4] == ["a", "degraded", "2", "1"] and lines[1].endswith("a 1 degraded")
    assert lines[2].split()[:5] == ["b", "failed", "2", "1", "NO"]


def test_a_server_that_does_not_list_models_stops_the_run_with_a_hint(serve, tmp_path):
    srv = serve(FakeEngine())
    with pytest.raises(SpecdecError, match=r"v1/v1/models answered 404 \(drop the /v1 suffix from --url\)"):
        run_stability(_cfg(tmp_path, srv.url + "/v1"), echo=lambda s: None)
    manifest = json.loads((tmp_path / "runs" / "st" / "manifest.json").read_text())
    assert manifest["finished"] is False


def test_stability_is_a_specdec_command():
    from specdec.cli.main import main

    r = CliRunner().invoke(main, ["--help"])
    assert r.exit_code == 0 and "stability" in r.output
    r = CliRunner().invoke(main, ["stability", "--concurrency", "0"])
    assert r.exit_code == 2 and "--concurrency" in r.output
