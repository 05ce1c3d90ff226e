"""A fake engine server for the server-lifecycle tests, run as a script:

    stubborn_server.py PORT PIDFILE [--startup-s S] [--stubborn]

Like vLLM it forks a child of its own (the "engine core", which stays in its
process group) and, during its "start-up" sleep, ignores SIGTERM. Then it
serves ``GET /health`` (200) on 127.0.0.1:PORT. Once serving, SIGTERM stops
the child and then itself, unless ``--stubborn``: then it ignores SIGTERM
for good and only SIGKILL ends it. PIDFILE gets "<own pid> <child pid>" as
soon as the child exists, so a test knows the group before it is healthy.
"""

from __future__ import annotations

import argparse
import http.server
import os
import signal
import subprocess
import sys
import time

CHILD = "import time\nwhile True: time.sleep(1)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("pidfile")
    ap.add_argument("--startup-s", type=float, default=0.0)
    ap.add_argument("--stubborn", action="store_true")
    a = ap.parse_args()
    child = subprocess.Popen([sys.executable, "-c", CHILD])  # default SIGTERM action: it dies
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # after the fork: an ignored signal is inherited
    tmp = a.pidfile + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{os.getpid()} {child.pid}")
    os.replace(tmp, a.pidfile)
    time.sleep(a.startup_s)  # "loading the model": SIGTERM ignored

    if not a.stubborn:

        def stop(signum, frame):
            child.terminate()
            child.wait(5)
            os._exit(0)

        signal.signal(signal.SIGTERM, stop)

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    http.server.HTTPServer(("127.0.0.1", a.port), Health).serve_forever()


if __name__ == "__main__":
    main()
