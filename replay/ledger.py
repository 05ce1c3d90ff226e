"""How many request rows this process wrote, cut off and lost.

A replay stopped by Ctrl-C or SIGTERM, or by a part file it could not write,
must say what it recorded and exit non-zero when rows were lost. The runner
counts into ``LEDGER`` as each block's file is written; the command reads it
when the run ends, however it ends. One per process (a command resets it at
its start), because the counts have to reach the command through an
interrupt that unwinds every frame in between.

Counts:

* ``written``: request rows in part files (every finished request, and every
  request cut off in flight, recorded as failed with ``error_type``
  ``interrupted``);
* ``interrupted``: of them, the requests cut off in flight;
* ``lost``: requests that were sent and are in no file (their block's file
  could not be written, or they were never settled);
* ``signal``: the signal that stopped the run (SIGTERM, SIGINT), if one did.
"""

from __future__ import annotations

import signal as _signal
from dataclasses import dataclass


@dataclass
class RowLedger:
    written: int = 0
    interrupted: int = 0
    lost: int = 0
    signal: int | None = None

    def reset(self) -> None:
        self.written = self.interrupted = self.lost = 0
        self.signal = None

    def summary(self) -> str:
        """One line a person (or a supervisor's log) reads."""
        return (
            f"{self.written} request rows written ({self.interrupted} of them cut off in flight, recorded "
            f"as failed with error_type 'interrupted'), {self.lost} rows lost"
        )

    def exit_code(self) -> int:
        """128 + the signal's number (the shell's convention) when a signal
        stopped the run, else 1."""
        return 128 + self.signal if self.signal else 1

    def signal_name(self) -> str:
        return _signal.Signals(self.signal).name if self.signal else "an interrupt"


#: The process's ledger (see the module docstring).
LEDGER = RowLedger()
