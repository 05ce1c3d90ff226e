"""`specdec-capture proxy` and `proxy-export`: loopback by default, a real
process that writes every row when stopped with SIGTERM, and an export that
puts several proxy processes on one clock and loads with load_traffic."""

import asyncio
import json
import os
import signal
import sys

import pytest
from click.testing import CliRunner

import specdec.capture.proxy as proxy_mod
from specdec.capture.cli import main
from specdec.capture.proxy_record import Exchange, RowMaker
from specdec.capture.proxy_writer import Recorder
from specdec.runfolder import TRAFFIC_PART_GLOB as PART_GLOB
from specdec.replay.traffic import load_traffic
from tests.replay.fake_server import FakeVllm


@pytest.fixture
def started(monkeypatch):
    calls = []
    monkeypatch.setattr(proxy_mod, "run_proxy", lambda settings, announce: calls.append(settings))
    return calls


@pytest.mark.parametrize("listen, host, port", [(None, "127.0.0.1", 8001), ("9000", "127.0.0.1", 9000),
                                                ("0.0.0.0:9001", "0.0.0.0", 9001), ("[::1]:9002", "::1", 9002)])
def test_the_proxy_listens_on_loopback_unless_told_otherwise(tmp_path, started, listen, host, port):
    args = ["proxy", "--upstream", "http://127.0.0.1:8000", "--out", str(tmp_path / "t")]
    r = CliRunner().invoke(main, args + (["--listen", listen] if listen else []), catch_exceptions=False)
    assert r.exit_code == 0, r.output
    (settings,) = started
    assert (settings.host, settings.port, settings.content) == (host, port, "hash")  # hash unless told


@pytest.mark.parametrize("args, message", [
    (["--listen", "localhost:http"], "expected HOST:PORT"),
    (["--listen", "1.2.3.4:70000"], "expected HOST:PORT"),
    (["--flush-s", "0"], "flush interval"),
])
def test_bad_options_are_refused(tmp_path, started, args, message):
    r = CliRunner().invoke(main, ["proxy", "--upstream", "http://h:1", "--out", str(tmp_path), *args])
    assert r.exit_code == 2 and message in r.output and not started


def test_a_proxy_process_writes_every_row_when_stopped_with_sigterm(tmp_path):
    out = tmp_path / "traffic"

    async def go():
        upstream = FakeVllm().server()
        await upstream.start_server()
        import aiohttp

        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "specdec.capture.cli", "proxy", "--upstream", str(upstream.make_url("")),
            "--listen", "127.0.0.1:0", "--out", str(out), "--flush-s", "3600", "--content", "keep",
            stdout=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
            url = line.split("listening on ")[1].split()[0]
            async with aiohttp.ClientSession() as session:
                for turn in range(2):
                    messages = [{"role": "user", "content": "hi"}] + [{"role": "assistant", "content": "a"},
                                                                      {"role": "user", "content": "more"}] * turn
                    async with session.post(url + "/v1/chat/completions", json={"messages": messages},
                                            headers={"X-Specdec-Session": "s9"}) as r:
                        assert r.status == 200 and await r.read()
            assert not list(out.glob(PART_GLOB))  # nothing flushed yet (an hour's interval)
            proc.send_signal(signal.SIGTERM)
            rest = (await asyncio.wait_for(proc.stdout.read(), 60)).decode()
            return await proc.wait(), rest
        finally:
            if proc.returncode is None:
                proc.kill()
            await upstream.close()

    code, rest = asyncio.run(go())
    assert code == 0 and "2 rows written, 0 recording failures" in rest
    rows = load_traffic(_export(tmp_path, out)).rows
    assert [(r.session_id, r.turn_index) for r in rows] == [("s9", 0), ("s9", 1)]


def _export(tmp_path, out):
    target = tmp_path / "merged" / "traffic.parquet"
    r = CliRunner().invoke(main, ["proxy-export", str(out), "-o", str(target)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return target


def _exchange(rec: Recorder, arrival_ms: float, category: str) -> Exchange:
    body = json.dumps({"messages": [{"role": "user", "content": category}]}).encode()
    sse = b'data: {"choices":[{"delta":{"content":"x"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    return Exchange(prompt_id=rec.new_prompt_id(), path="/v1/chat/completions", arrival_ms=arrival_ms,
                    wall_ns=1_767_225_600_000_000_000, body=body, category=category, session=None, status=200,
                    content_type="text/event-stream", chunks=[sse], complete=True)


def test_export_puts_several_proxy_processes_on_one_clock(tmp_path):
    out = tmp_path / "traffic"
    first, second = Recorder(out, RowMaker()), Recorder(out, RowMaker())
    first.start_wall_ns, second.start_wall_ns = 10_000_000_000, 10_500_000_000  # second started 500 ms later
    first.submit(_exchange(first, 0.0, "a"))
    first.submit(_exchange(first, 900.0, "b"))
    second.submit(_exchange(second, 100.0, "c"))  # 600 ms on the first one's clock
    first.close()
    second.close()
    assert [p.parent.name for p in out.glob(PART_GLOB)] == ["date=2026-01-01"] * 2
    traffic = load_traffic(_export(tmp_path, out))
    assert [(r.category, r.arrival_ms) for r in traffic.rows] == [("a", 0.0), ("c", 600.0), ("b", 900.0)]
    assert len({r.prompt_id for r in traffic.rows}) == 3


def test_export_of_a_folder_without_parts_names_the_folder(tmp_path):
    r = CliRunner().invoke(main, ["proxy-export", str(tmp_path), "-o", str(tmp_path / "t.parquet")])
    assert r.exit_code == 1 and str(tmp_path) in r.output and "no proxy part files" in r.output
