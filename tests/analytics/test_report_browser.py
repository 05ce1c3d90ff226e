"""The report as a person sees it: opened in headless Chromium (Debian's
chromium, installed by `make test` when missing), every chart drawn, no error
in the console, a screenshot taken; and each chart exported as a PNG.

Without a Chromium on the machine the browser test is skipped, except under
CI=true, where it fails: CI must see the page."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess

import pytest

from specdec.analytics.report.write import write_report
from tests.support.synthetic_run import repeated_counters, repeated_requests, write_run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
    "--virtual-time-budget=15000",
]
SPEC = {"code-0": 1000.0, "code-1": 500.0, "chat-0": 1600.0, "chat-1": 1700.0}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    e2e = lambda arm, pid, level, r: (2000.0 if arm == "baseline" else SPEC[pid]) * (1 + 0.05 * r)  # noqa: E731
    write_run(run_dir, requests=repeated_requests(e2e, levels=(1, 2, 4)), counters=repeated_counters(levels=(1, 2, 4)))
    path, _ = write_report(run_dir)
    return run_dir, path


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", data[16:24])


def test_every_chart_is_exported_as_a_png(report):
    run_dir, page = report
    ids = re.findall(r"vegaEmbed\('#([a-z_]+)'", page.read_text(encoding="utf-8"))
    assert {"speedup", "throughput", "latency_cdf"} <= set(ids)
    for name in ids:
        png = run_dir / "charts" / f"{name}.png"
        width, height = _png_size(png)
        assert width > 200 and height > 100, (name, width, height)


def _chromium(tmp_path, *args: str) -> subprocess.CompletedProcess:
    if CHROMIUM is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed: `make test` installs Debian's chromium; CI must see the page")
        pytest.skip("no chromium on this machine (`make test` installs it)")
    profile = tmp_path / "profile"
    return subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=120
    )


def test_chromium_draws_every_chart_without_a_console_error(report, tmp_path):
    run_dir, page = report
    ids = re.findall(r"vegaEmbed\('#([a-z_]+)'", page.read_text(encoding="utf-8"))
    done = _chromium(tmp_path, "--dump-dom", page.resolve().as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    for name in ids:  # vega-embed put a drawing (canvas or svg) inside each chart's element
        m = re.search(rf'<div id="{name}"[^>]*>(.*?)</div>\s*(?:<div id=|<h2|<p|<script|<table|$)', dom, re.S)
        assert m is not None and re.search(r"<(canvas|svg)\b", m.group(1)), name
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line]
    errors = [line for line in console if re.search(r"error|uncaught|warn", line, re.I)]
    assert not errors, errors
    shot = tmp_path / "report.png"
    done = _chromium(tmp_path, "--window-size=1300,2400", f"--screenshot={shot}", page.resolve().as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    assert _png_size(shot) == (1300, 2400)
    assert shot.stat().st_size > 50_000  # a page with text, tables and charts, not a blank one
