"""`specdec-capture proxy` and `proxy-export`: loopback by default (and a
warning when told otherwise), a real process that writes every row when
stopped with SIGTERM (and exits 1, saying how many, when it could not), and
an export that puts several proxy processes on one clock and loads with
load_traffic."""

import asyncio
import json
import os
import signal
import sys

import pytest
from click.testing import CliRunner

import specdec.capture.proxy.service as proxy_mod
from specdec.capture.proxy.record import Exchange, RowMaker
from specdec.capture.proxy.writer import Recorder
from specdec.cli.capture import main
from specdec.runfolder import TRAFFIC_PART_GLOB as PART_GLOB
from specdec.traffic.io import load_traffic
from tests.support.fake_server import FakeVllm


@pytest.fixture
def started(monkeypatch):
    calls = []
    monkeypatch.setattr(proxy_mod, "run_proxy", lambda settings, announce: calls.append(settings))
    return calls


@pytest.mark.parametrize(
    "listen, host, port",
    [
        (None, "127.0.0.1", 8001),
        ("9000", "127.0.0.1", 9000),
        ("0.0.0.0:9001", "0.0.0.0", 9001),
        ("[::1]:9002", "::1", 9002),
    ],
)
def test_the_proxy_listens_on_loopback_unless_told_otherwise(tmp_path, started, listen, host, port):
    args = ["proxy", "--upstream", "http://127.0.0.1:8000", "--out", str(tmp_path / "t")]
    r = CliRunner().invoke(main, args + (["--listen", listen] if listen else []), catch_exceptions=False)
    assert r.exit_code == 0, r.output
    (settings,) = started
    assert (settings.host, settings.port, settings.content) == (host, port, "hash")  # hash unless told
    if host == "0.0.0.0":  # beyond loopback: one warning on stderr saying what is exposed
        (warning,) = r.stderr.splitlines()
        assert (
            "every network interface" in warning
            and "unauthenticated route to the upstream http://127.0.0.1:8000" in warning
            and f"/specdec/stats shows the output folder {tmp_path / 't'}" in warning
        )
    else:
        assert not r.stderr


def test_the_cli_defaults_are_the_settings_defaults(tmp_path, started):
    r = CliRunner().invoke(main, ["proxy", "--upstream", "http://127.0.0.1:8000", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    (settings,) = started
    defaults = proxy_mod.ProxySettings(upstream="http://h:1", out_dir=tmp_path)
    assert (settings.header_timeout_s, settings.upstream_idle_s, settings.flush_s) == (
        defaults.header_timeout_s,
        defaults.upstream_idle_s,
        defaults.flush_s,
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--listen", "localhost:http"], "expected HOST:PORT"),
        (["--listen", "1.2.3.4:70000"], "expected HOST:PORT"),
        (["--flush-s", "0"], "flush interval"),
        (["--header-timeout-s", "0"], "--header-timeout-s"),
        (["--upstream-idle-s", "-1"], "--upstream-idle-s"),
    ],
)
def test_bad_options_are_refused(tmp_path, started, args, message):
    r = CliRunner().invoke(main, ["proxy", "--upstream", "http://h:1", "--out", str(tmp_path), *args])
    assert r.exit_code == 2 and message in r.output and not started


#: The proxy's CLI in a process whose disk is full: every Parquet write fails as ENOSPC would.
DISK_FULL = (
    "import errno, sys, specdec.schemas.arrow as arrow\n"
    "def full(table, path):\n"
    "    raise OSError(errno.ENOSPC, 'No space left on device')\n"
    "arrow.write_parquet_atomic = full\n"
    "from specdec.cli.capture import main\n"
    "main()\n"
)


async def _run_proxy_process(out, turns: int, *, disk_full: bool = False) -> tuple[int, str, str]:
    """Start `specdec-capture proxy` in a process, send ``turns`` chat turns,
    SIGTERM it; return (exit code, stdout after the first line, stderr)."""
    import aiohttp

    upstream = FakeVllm().server()
    await upstream.start_server()
    start = ["-c", DISK_FULL] if disk_full else ["-m", "specdec.cli.capture"]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *start,
        "proxy",
        "--upstream",
        str(upstream.make_url("")),
        "--listen",
        "127.0.0.1:0",
        "--out",
        str(out),
        "--flush-s",
        "3600",
        "--content",
        "keep",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        url = line.split("listening on ")[1].split()[0]
        async with aiohttp.ClientSession() as session:
            for turn in range(turns):
                messages = [{"role": "user", "content": "hi"}] + [
                    {"role": "assistant", "content": "a"},
                    {"role": "user", "content": "more"},
                ] * turn
                async with session.post(
                    url + "/v1/chat/completions", json={"messages": messages}, headers={"X-Specdec-Session": "s9"}
                ) as r:
                    assert r.status == 200 and await r.read()
        assert not list(out.glob(PART_GLOB))  # nothing flushed yet (an hour's interval)
        proc.send_signal(signal.SIGTERM)
        rest, err = await asyncio.wait_for(proc.communicate(), 60)
        return proc.returncode, rest.decode(), err.decode()
    finally:
        if proc.returncode is None:
            proc.kill()
        await upstream.close()


def test_a_proxy_process_writes_every_row_when_stopped_with_sigterm(tmp_path):
    out = tmp_path / "traffic"
    code, rest, err = asyncio.run(_run_proxy_process(out, 2))
    assert code == 0 and "2 rows written, 0 recording failures" in rest, err
    rows = load_traffic(_export(tmp_path, out)).rows
    assert [(r.session_id, r.turn_index) for r in rows] == [("s9", 0), ("s9", 1)]


def test_a_proxy_that_stops_with_rows_it_could_not_write_exits_1_and_says_how_many(tmp_path):
    code, rest, err = asyncio.run(_run_proxy_process(tmp_path / "traffic", 2, disk_full=True))
    assert "0 rows written, 1 recording failures, 2 rows not written" in rest
    assert code == 1 and "Error: 2 recorded rows not written" in err and "No space left on device" in err
    assert "Traceback" not in err


def _export(tmp_path, out):
    target = tmp_path / "merged" / "traffic.parquet"
    r = CliRunner().invoke(main, ["proxy-export", str(out), "-o", str(target)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return target


def _exchange(rec: Recorder, arrival_ms: float, category: str) -> Exchange:
    body = json.dumps({"messages": [{"role": "user", "content": category}]}).encode()
    sse = b'data: {"choices":[{"delta":{"content":"x"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    return Exchange(
        prompt_id=rec.new_prompt_id(),
        path="/v1/chat/completions",
        arrival_ms=arrival_ms,
        wall_ns=1_767_225_600_000_000_000,
        body=body,
        category=category,
        session=None,
        status=200,
        content_type="text/event-stream",
        chunks=[sse],
        complete=True,
    )


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
