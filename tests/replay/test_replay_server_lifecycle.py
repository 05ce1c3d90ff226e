"""The real replay path (``specdec-replay --engine llama.cpp``, its
``EmbeddedServers``, ``recording`` and event loop) owns its servers: a signal
while the servers start or while a level runs leaves no process of either
server's group. The ``llama-server`` binary is ``tests/support/fake_llama_server.py``
(no engine); ``tests/support/replay_owner.py`` points the run at it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from specdec.engines.lifecycle import group_members

SUPPORT = Path(__file__).parents[1] / "support"


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.Error:
        return True


def _replay(tmp: Path, startup_s: float) -> tuple[subprocess.Popen, Path]:
    binary = tmp / "llama-server"
    binary.write_text(f'#!/bin/sh\nexec {sys.executable} {SUPPORT / "fake_llama_server.py"} "$@"\n')
    binary.chmod(0o755)
    (tmp / "m.gguf").write_bytes(b"")
    pids = tmp / "pids"
    pids.mkdir()
    rows = [
        {"prompt_id": f"p{i}", "category": "chat", "prompt": f"Say hello {i}.", "max_tokens": 8, "temperature": 0.0}
        for i in range(4)
    ]
    (tmp / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = {
        **os.environ,
        "FAKE_LLAMA_BINARY": str(binary),
        "FAKE_LLAMA_PIDS": str(pids),
        "FAKE_LLAMA_STARTUP_S": str(startup_s),
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            str(SUPPORT / "replay_owner.py"),
            str(tmp / "t.jsonl"),
            "--engine",
            "llama.cpp",
            "--model",
            str(tmp / "m.gguf"),
            "--levels",
            "2",
            "--repeats",
            "1",
            "--warmup",
            "0",
            "--request-timeout",
            "20",
            "--runs-dir",
            str(tmp / "runs"),
            "--run-id",
            "x",
            "--no-progress",
            "--no-lossless-pass",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=env,
    )
    return proc, pids


def _wait_for(cond, timeout_s: float, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if proc.poll() is not None or time.monotonic() > deadline:
            out, err = proc.communicate(timeout=5) if proc.poll() is None else proc.communicate()
            pytest.fail(f"timed out waiting for {what}: {out}\n{err}")
        time.sleep(0.05)


def _groups(pids: Path) -> list[tuple[int, int]]:
    return [tuple(map(int, p.read_text().split())) for p in pids.glob("*.pids")]


def _run_and_signal(tmp: Path, sig: int, startup_s: float, ready) -> tuple[subprocess.Popen, list, float]:
    proc, pids = _replay(tmp, startup_s)
    try:
        _wait_for(lambda: ready(pids), 60, proc, "the phase to signal in")
        time.sleep(0.3)
        proc.send_signal(sig)
        started = time.monotonic()
        proc.wait(timeout=40)
        return proc, _groups(pids), time.monotonic() - started  # every group that got as far as its pid file
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        for server, _ in _groups(pids):
            try:
                os.killpg(server, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.stdout.close()
        proc.stderr.close()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP])
def test_a_signal_while_the_servers_start_leaves_no_server(tmp_path, sig):
    """Both arms' servers start at once (``server.start_all``): a signal during their
    start-up stops both, not only the one being waited for."""
    proc, groups, took = _run_and_signal(tmp_path, sig, startup_s=60, ready=lambda p: any(p.glob("*.pids")))
    assert took < 10  # not after the server's 60 s start-up
    assert proc.returncode != 0
    assert groups and all(group_members(g) == 0 and _gone(child) for g, child in groups)


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)])
def test_a_signal_while_a_level_runs_leaves_no_server(tmp_path, sig, status):
    proc, groups, took = _run_and_signal(tmp_path, sig, startup_s=0, ready=lambda p: any(p.glob("*.chat")))
    assert proc.returncode == status
    assert len(groups) == 2 and all(group_members(g) == 0 and _gone(child) for g, child in groups)
    assert took < 30
