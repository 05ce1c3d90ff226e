"""The parent of the server-lifecycle tests, run as a script: it starts
``stubborn_server.py`` through ``specdec.engines.server.ServerProcess`` (the
lifecycle every embedded server uses) and holds it until it is signalled.

    server_owner.py LOG PIDFILE STARTUP_S GRACE_S [--stubborn] [--thread]

It prints "READY" once the server is healthy, then sleeps inside the
``with``; whatever ends it (a signal, an exception) runs the stop. With
``--thread`` the server is started from a worker thread (as a restart inside
the replay's event loop is) and held without a ``with``: no handler is
installed, so only the kernel (PDEATHSIG) can stop it when this process dies."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from specdec.engines.server import ServerProcess, free_port

SERVER = Path(__file__).with_name("stubborn_server.py")


def main() -> None:
    log, pidfile, startup_s, grace_s, *rest = sys.argv[1:]
    in_thread = "--thread" in rest
    rest = [a for a in rest if a != "--thread"]
    port = free_port()
    cmd = [sys.executable, str(SERVER), str(port), pidfile, "--startup-s", startup_s, *rest]
    srv = ServerProcess(cmd, {}, Path(log), port, startup_timeout_s=60)
    srv.grace_s = float(grace_s)
    if in_thread:
        worker = threading.Thread(target=srv.__enter__)
        worker.start()
        worker.join()  # the thread that started the server is gone now
        print("READY", flush=True)
        time.sleep(120)
        return
    with srv:
        print("READY", flush=True)
        time.sleep(120)


if __name__ == "__main__":
    main()
