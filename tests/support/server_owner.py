"""The parent of the server-lifecycle tests, run as a script: it starts
``stubborn_server.py`` through ``specdec.engines.server.ServerProcess`` (the
lifecycle every embedded server uses) and holds it until it is signalled.

    server_owner.py LOG PIDFILE STARTUP_S GRACE_S [--stubborn]

It prints "READY" once the server is healthy, then sleeps inside the
``with``; whatever ends it (a signal, an exception) runs the stop."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from specdec.engines.server import ServerProcess, free_port

SERVER = Path(__file__).with_name("stubborn_server.py")


def main() -> None:
    log, pidfile, startup_s, grace_s, *rest = sys.argv[1:]
    port = free_port()
    cmd = [sys.executable, str(SERVER), str(port), pidfile, "--startup-s", startup_s, *rest]
    srv = ServerProcess(cmd, {}, Path(log), port, startup_timeout_s=60)
    srv.grace_s = float(grace_s)
    with srv:
        print("READY", flush=True)
        time.sleep(120)


if __name__ == "__main__":
    main()
