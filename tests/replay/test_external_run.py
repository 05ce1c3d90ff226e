"""Whole replays against external (fake) servers: a failed warm-up stops the
run with a clear message, secrets stay out of every file, captured rounds are
taken from the servers' capture folder, and counters are read once per arm,
level and position."""

from __future__ import annotations

import asyncio
import json
import threading
from contextlib import contextmanager

import pyarrow.parquet as pq
import pytest
from aiohttp import web

from specdec.errors import EngineError, SpecdecError
from specdec.replay.config import ReplayConfig
from specdec.replay.experiment import run_replay
from specdec.replay.progress import Progress
from specdec.replay.runner import request_id
from specdec.schemas.arrow import table_from_columns, write_parquet_atomic
from specdec.schemas.records import RoundTrace
from tests.replay.fake_server import FakeVllm

SPEC_METRICS = ("vllm:spec_decode_num_drafts_total 0\nvllm:spec_decode_num_draft_tokens_total 0\n"
                "vllm:spec_decode_num_accepted_tokens_total 0\nvllm:generation_tokens_total 1\n")


@contextmanager
def threaded(*fakes: FakeVllm):
    """Serve each fake on 127.0.0.1 from a background event loop; yield base URLs."""
    loop = asyncio.new_event_loop()
    runners, urls = [], []
    ready = threading.Event()

    async def start():
        for fake in fakes:
            app = web.Application()
            app.router.add_post("/v1/chat/completions", fake.chat)
            app.router.add_get("/metrics", fake.metrics)
            runner = web.AppRunner(app, shutdown_timeout=0.2)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            runners.append(runner)
            urls.append(f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}")
        ready.set()

    t = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()), daemon=True)
    t.start()
    ready.wait(10)
    try:
        yield urls
    finally:
        async def stop():
            for r in runners:
                await r.cleanup()
        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        t.join(5)


def _cfg(tmp_path, fixtures, **kw) -> ReplayConfig:
    base = dict(traffic=fixtures / "traffic_small.jsonl", runs_dir=tmp_path / "runs", run_id="x",
                levels=[1, 2], warmup_requests=1, progress=False, capture_wait_s=0.0,
                connect_timeout_s=2.0, request_timeout_s=2.0)
    base.update(kw)
    return ReplayConfig(**base)


def _all_text(run_dir) -> str:
    out = []
    for f in run_dir.rglob("*"):
        if f.is_file():
            out.append(f.read_bytes().decode("utf-8", "replace"))
    return "\n".join(out)


@pytest.mark.parametrize("status, hint", [
    (501, "no OpenAI-compatible"), (404, "no OpenAI-compatible"), (401, "API key"),
])
def test_failed_warmup_stops_the_run_with_url_status_and_fix(tmp_path, fixtures, status, hint):
    with threaded(FakeVllm(status=status), FakeVllm(status=status)) as (b, s):
        with pytest.raises(EngineError) as e:
            run_replay(_cfg(tmp_path, fixtures, baseline_url=b, speculative_url=s))
    msg = str(e.value)
    assert b in msg and f"HTTP {status}" in msg and hint in msg
    manifest = json.loads((tmp_path / "runs" / "x" / "manifest.json").read_text())
    assert manifest["finished"] is False


def test_v1_suffix_is_named_as_the_likely_fix(tmp_path, fixtures):
    with threaded(FakeVllm(), FakeVllm()) as (b, s):
        with pytest.raises(EngineError, match="remove the /v1 suffix"):
            run_replay(_cfg(tmp_path, fixtures, baseline_url=b + "/v1", speculative_url=s + "/v1"))


def test_hung_server_fails_fast_with_short_timeouts(tmp_path, fixtures):
    with threaded(FakeVllm(hang_s=5), FakeVllm(hang_s=5)) as (b, s):
        with pytest.raises(EngineError, match="(?s)request_timeout.*sent nothing for 0.5 s"):
            run_replay(_cfg(tmp_path, fixtures, baseline_url=b, speculative_url=s, request_timeout_s=0.5))


def test_url_credentials_and_api_key_are_written_nowhere(tmp_path, fixtures, monkeypatch):
    monkeypatch.setenv("SPECDEC_TEST_KEY", "sk-live-abcdef123456")
    with threaded(FakeVllm(api_key="sk-live-abcdef123456"), FakeVllm(status=500)) as (b, s):
        b_url = b.replace("http://", "http://alice:pa55word99@") + "?api_key=qwerty98765"
        with pytest.raises(EngineError) as e:  # the speculative server fails its warm-up
            run_replay(_cfg(tmp_path, fixtures, baseline_url=b_url, speculative_url=s,
                            api_key_env="SPECDEC_TEST_KEY"))
    run_dir = tmp_path / "runs" / "x"
    everything = _all_text(run_dir) + str(e.value)
    for secret in ("sk-live-abcdef123456", "pa55word99", "qwerty98765", "alice"):
        assert secret not in everything, secret
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["arms"][0]["endpoint"].startswith("http://***@127.0.0.1")
    # the baseline arm ran: its requests authenticated with the key
    assert pq.read_table(run_dir / "requests.parquet").column("success").to_pylist() == [True] * 6


def test_missing_api_key_variable_is_refused_before_anything_is_created(tmp_path, fixtures):
    with pytest.raises(SpecdecError, match="NOPE_NOT_SET"):
        run_replay(_cfg(tmp_path, fixtures, baseline_url="http://127.0.0.1:9", speculative_url="http://127.0.0.1:9",
                        api_key_env="NOPE_NOT_SET"))
    assert not (tmp_path / "runs").exists()


def test_bad_url_is_refused_before_anything_is_created(tmp_path, fixtures):
    with pytest.raises(SpecdecError, match="--baseline-url"):
        run_replay(_cfg(tmp_path, fixtures, baseline_url="ftp://x", speculative_url="http://127.0.0.1:9"))
    assert not (tmp_path / "runs").exists()


def _fake_capture(folder, run_id: str, other_run: str) -> None:
    """What a sidecar's capture folder holds: rows of this run's speculative
    requests (3 prompts x 2 levels, 2 verify rounds each) and someone else's."""
    cols = {f: [] for f in RoundTrace.model_fields}

    def add(engine_id, step, k, a):
        vals = dict(run_id="adhoc", engine_request_id=engine_id, pid=7, process_token="7-abcd", step_index=step, round_index=step,
                    phase="decode", tokens_proposed=k, tokens_accepted=a, tokens_emitted=a + 1, batch_size=1,
                    num_scheduled_tokens=1 + k, context_len=10, draft_ms=0.1, verify_ms=5.0, wall_time_ns=1)
        for f in cols:
            cols[f].append(vals[f])

    for level in (1, 2):
        for i in range(3):
            rid = f"chatcmpl-{request_id(run_id, 'speculative', level, i)}-0123abcd"
            add(rid, 1, 4, 3)
            add(rid, 2, 4, 1)
    add(f"chatcmpl-{request_id(other_run, 'speculative', 1, 0)}-0123abcd", 1, 4, 4)
    write_parquet_atomic(table_from_columns(RoundTrace, cols), folder / "rounds-7-abcd-000000.parquet")
    (folder / "rounds-8-ffff-000000.parquet").write_bytes(b"PAR1 truncated")  # a broken part is skipped


def test_external_capture_dir_and_one_counter_snapshot_per_arm_level_position(tmp_path, fixtures):
    cap = tmp_path / "sidecar"
    cap.mkdir()
    _fake_capture(cap, "x", "someone-else")
    base, spec = FakeVllm(), FakeVllm(metrics_text=SPEC_METRICS)
    with threaded(base, spec) as (b, s):
        run_dir = run_replay(_cfg(tmp_path, fixtures, baseline_url=b, speculative_url=s, capture_dir=cap))
    rounds = pq.read_table(run_dir / "rounds.parquet")
    assert rounds.num_rows == 12  # this run's rows only
    assert set(rounds.column("run_id").to_pylist()) == {"x"}
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["finished"] is True
    assert manifest["capture"]["source"] == "directory" and manifest["capture"]["rows"] == 12
    assert manifest["capture"]["skipped_files"][0].startswith("rounds-8-ffff")
    assert manifest["arms"][1]["speculative_config_source"] == "declared"
    snaps = pq.read_table(run_dir / "engine_counters.parquet").to_pylist()
    keys = [(r["arm"], r["concurrency"], r["position"]) for r in snaps]
    assert sorted(keys) == sorted({(a, c, p) for a in ("baseline", "speculative") for c in (1, 2)
                                   for p in ("before", "after")})


def test_without_capture_dir_the_manifest_says_no_rounds(tmp_path, fixtures):
    with threaded(FakeVllm(), FakeVllm()) as (b, s):
        run_dir = run_replay(_cfg(tmp_path, fixtures, baseline_url=b, speculative_url=s))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["capture"]["source"] == "none" and "no --capture-dir" in manifest["capture"]["reason"]


def test_no_progress_prints_one_line_per_level_and_arm(tmp_path, fixtures, capsys):
    with threaded(FakeVllm(), FakeVllm(status=200)) as (b, s):
        run_replay(_cfg(tmp_path, fixtures, baseline_url=b, speculative_url=s))
    err = capsys.readouterr().err
    for arm in ("baseline", "speculative"):
        for level in (1, 2):
            assert f"{arm} c={level}: 3/3 done, 0 failed" in err


def test_progress_lines_count_failures():
    import io

    from specdec.replay.client import StreamResult

    out = io.StringIO()
    p = Progress(False, stream=out)
    t = p.start_level("baseline", 4, 2)
    p.advance(t, StreamResult("a", 0, success=True))
    p.advance(t, StreamResult("b", 0, success=False, error_type="http_status"))
    p.end_level(t)
    assert "baseline c=4: 2/2 done, 1 FAILED" in out.getvalue()


class FlakyVllm(FakeVllm):
    """Serves the warm-up, then fails every other request with HTTP 500."""

    async def chat(self, request):
        n = len(self.request_ids)
        if n >= 1 and n % 2 == 1:
            self.request_ids.append(request.headers.get("X-Request-Id", ""))
            return web.Response(status=500, text="overloaded")
        return await super().chat(request)


def test_a_run_whose_levels_fail_exits_1_after_writing_everything(tmp_path, fixtures):
    from click.testing import CliRunner

    from specdec.replay.cli import main as replay_main

    with threaded(FakeVllm(), FlakyVllm()) as (b, s):
        r = CliRunner().invoke(replay_main, [
            str(fixtures / "traffic_small.jsonl"), "--baseline-url", b, "--speculative-url", s,
            "--runs-dir", str(tmp_path / "runs"), "--run-id", "flaky", "--levels", "1,2", "--warmup", "1",
            "--no-progress"])
    run_dir = tmp_path / "runs" / "flaky"
    assert r.exit_code == 1, r.output
    assert (run_dir / "report.html").is_file() and (run_dir / "specdec.duckdb").is_file()
    assert "level(s) failed" in r.output and "speculative c1" in r.output and "speculative c2" in r.output
    assert "baseline c1" not in r.output.split("Error:")[-1]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["finished"] is True  # it ran to the end; the levels failed their error budget


def test_a_run_stopped_by_a_failed_warmup_still_reports_what_it_recorded(tmp_path, fixtures):
    """The baseline arm ran; the speculative server refuses: the command fails
    with the warm-up message, and the report of the baseline arm is written."""
    from click.testing import CliRunner

    from specdec.replay.cli import main as replay_main

    with threaded(FakeVllm(), FakeVllm(status=501)) as (b, s):
        r = CliRunner().invoke(replay_main, [
            str(fixtures / "traffic_small.jsonl"), "--baseline-url", b, "--speculative-url", s,
            "--runs-dir", str(tmp_path / "runs"), "--run-id", "half", "--levels", "1", "--no-progress"])
    assert r.exit_code == 1 and "failed the warm-up request (HTTP 501)" in r.output
    assert "report of what was recorded before it" in r.output
    page = (tmp_path / "runs" / "half" / "report.html").read_text()
    assert "Run finished: False" in page or "not finished" in page
