"""The sidecar tells when it is blind or exposed (issue 24, case 11 and the
scrape note): ``/healthz`` says degraded (503) while the server's
``/metrics`` cannot be read, and ok again once it can, with one log line per
change of state, not one per scrape; ``--listen`` beyond loopback warns at
start, naming what it exposes."""

import asyncio
import logging
import signal
import subprocess
import sys

import aiohttp

from specdec.capture.sidecar.service import Sidecar, SidecarSettings
from tests.support.fake_server import FakeVllm, serving

LOGGER = "specdec.capture.sidecar.service"


async def _health(url: str) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as s, s.get(url + "/healthz") as r:
        return r.status, await r.json()


def _settings(tmp_path, server: str) -> SidecarSettings:
    return SidecarSettings(capture_dir=tmp_path / "cap", lake=tmp_path / "lake", server=server, port=0)


def test_healthz_degrades_while_scrapes_fail_and_logs_once_per_change(tmp_path, caplog):
    fake = FakeVllm()

    async def go():
        seen = []
        async with serving(fake.server()) as (_, url):
            sc = Sidecar(_settings(tmp_path, url))
            await sc.start()
            try:
                await sc.scrape()
                seen.append(("ok", *await _health(sc.url)))
                fake.api_key = "secret"  # the sidecar sends none: /metrics answers 401 from now on
                for _ in range(3):
                    await sc.scrape()
                seen.append(("failing", *await _health(sc.url)))
                async with aiohttp.ClientSession() as s, s.get(sc.url + "/metrics") as r:
                    seen.append(("metrics", r.status, {}))
                fake.api_key = None
                await sc.scrape()
                await sc.scrape()
                seen.append(("recovered", *await _health(sc.url)))
            finally:
                await sc.close()
        return seen

    with caplog.at_level(logging.INFO, logger=LOGGER):
        seen = asyncio.run(go())

    (_, s0, ok), (_, s1, bad), (_, s_metrics, _), (_, s2, again) = seen
    assert (s0, ok["ok"], ok["status"]) == (200, True, "ok")
    assert (s1, bad["ok"], bad["status"]) == (503, False, "degraded")
    assert "HTTP 401" in bad["reasons"][0] and "last 3 read(s)" in bad["reasons"][0]
    assert s_metrics == 200  # Prometheus still reads the failure counters
    assert (s2, again["status"]) == (200, "ok") and "reasons" not in again
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER and "/metrics" in r.getMessage()]
    assert len(lines) == 2, lines  # one on failing, one on recovering: not one per scrape
    assert "cannot read" in lines[0] and "HTTP 401" in lines[0] and "degraded" in lines[0]
    assert "read again after 3 failed read(s)" in lines[1]


def test_healthz_is_ok_before_the_first_scrape(tmp_path):
    async def go():
        sc = Sidecar(_settings(tmp_path, "http://127.0.0.1:9"))
        await sc.start()
        try:
            return await _health(sc.url)
        finally:
            await sc.close()

    status, body = asyncio.run(go())
    assert (status, body["status"]) == (200, "ok")


def _run_cli(tmp_path, listen: str) -> tuple[str, str]:
    """The CLI sidecar on ``listen``, stopped by SIGTERM once it has started: (stdout, stderr)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specdec.cli.capture",
            "sidecar",
            "--capture-dir",
            str(tmp_path / "cap"),
            "--lake",
            str(tmp_path / "lake"),
            "--server",
            "http://127.0.0.1:9",
            "--listen",
            listen,
            "--compact-s",
            "3600",
            "--scrape-s",
            "3600",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = proc.stdout.readline()
        assert "listening on" in first, first
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return first + out, err


def test_listen_beyond_loopback_warns_at_start_naming_what_is_exposed(tmp_path):
    out, err = _run_cli(tmp_path, "0.0.0.0:0")
    warnings = [line for line in err.splitlines() if "WARNING" in line]
    assert len(warnings) == 1, err
    assert "every network interface" in warnings[0] and "/metrics" in warnings[0] and "/healthz" in warnings[0]
    assert "http://127.0.0.1:9" in warnings[0]  # the server it names


def test_listen_on_loopback_does_not_warn(tmp_path):
    out, err = _run_cli(tmp_path, "127.0.0.1:0")
    assert "WARNING" not in err and "WARNING" not in out


def test_proxy_listen_beyond_loopback_warns_too(tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specdec.cli.capture",
            "sidecar",
            "--capture-dir",
            str(tmp_path / "cap"),
            "--lake",
            str(tmp_path / "lake"),
            "--server",
            "http://127.0.0.1:9",
            "--listen",
            "127.0.0.1:0",
            "--proxy-listen",
            "0.0.0.0:0",
            "--compact-s",
            "3600",
            "--scrape-s",
            "3600",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(2):  # the sidecar's line, then the proxy's
            assert "listening on" in proc.stdout.readline()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    warnings = [line for line in err.splitlines() if "WARNING" in line]
    assert len(warnings) == 1, err  # the proxy's; the sidecar's own endpoint is on loopback
    assert "the recording proxy" in warnings[0] and "http://127.0.0.1:9" in warnings[0]
