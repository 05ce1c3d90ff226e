"""A stand-in for llama.cpp's ``llama-server`` binary in the lifecycle tests
of the real replay path: takes llama-server's arguments (uses only
``--port``), forks a child of its own, writes "<own pid> <child pid>" to
``$FAKE_LLAMA_PIDS/<port>.pids``, and serves ``tests/support/fake_server.py``'s
``EndlessVllm`` (a chunk a second, never finished) after
``$FAKE_LLAMA_STARTUP_S`` seconds of start-up that ignore SIGTERM, touching
``$FAKE_LLAMA_PIDS/<port>.chat`` when a timed request arrives."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from aiohttp import web

sys.path.insert(0, str(Path(__file__).parents[2]))
from tests.support.fake_server import EndlessVllm  # noqa: E402  (run as a script: the repo root first)


class Marking(EndlessVllm):
    def __init__(self, marker: Path, **kw):
        super().__init__(**kw)
        self.marker = marker

    async def chat(self, request):
        if not request.headers.get("X-Request-Id", "").endswith(".warmup"):
            self.marker.touch()
        return await super().chat(request)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    a, _ = ap.parse_known_args()
    out = Path(os.environ["FAKE_LLAMA_PIDS"])
    child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)"])
    (out / f"{a.port}.pids").write_text(f"{os.getpid()} {child.pid}")
    if float(os.environ.get("FAKE_LLAMA_STARTUP_S", "0")) > 0:  # "loading": SIGTERM ignored, as vLLM's
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(float(os.environ["FAKE_LLAMA_STARTUP_S"]))
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    fake = Marking(out / f"{a.port}.chat", gap_s=1.0)
    try:
        web.run_app(fake.server().app, host="127.0.0.1", port=a.port, print=None, handle_signals=True)
    finally:
        child.terminate()


if __name__ == "__main__":
    main()
