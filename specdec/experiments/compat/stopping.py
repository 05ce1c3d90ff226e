"""What a ``specdec compat`` run keeps when it ends early: a signal (SIGTERM,
SIGINT, SIGHUP), or an error such as a server that does not serve
(``watch.ServerFailed``).

``keeping(runs_dir, book)`` wraps the run's work. SIGTERM and SIGHUP do what
Ctrl-C does there (``engines.lifecycle.interrupt_on_signals``: inside the
probes' event loop asyncio cancels the run, the embedded servers stop with
their ``ExitStack``). However the work ends early, every cell measured so far
is in ``compat.parquet`` (``Book`` writes them as each probe is measured; the
last write is repeated here), the manifest says the run stopped and why
(``finished`` stays false), and ``runs/latest`` moves to the folder only
when it holds a cell: a folder without any is no run to build. A signal
then ends in ``CompatStopped``, whose ``exit_code`` is 128 + the signal
(130 for SIGINT, 143 for SIGTERM); an error goes on as it was.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from specdec.engines.lifecycle import interrupt_on_signals
from specdec.errors import SpecdecError
from specdec.experiments.compat.together import Book
from specdec.runfolder import point_latest, write_manifest


class CompatStopped(SpecdecError):
    """The run was stopped by a signal; the cells measured before are kept."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code  # 128 + the signal


@contextmanager
def keeping(runs_dir: Path, book: Book) -> Iterator[None]:
    """The run's work, kept when it ends early (module docstring)."""
    signals: list[int] = []
    try:
        with interrupt_on_signals(signals.append):  # SIGTERM, SIGHUP: what Ctrl-C does (main thread only)
            yield
    except (KeyboardInterrupt, asyncio.CancelledError):
        name = signal.Signals(signals[0] if signals else signal.SIGINT)
        kept = stopped(runs_dir, book, f"stopped by {name.name}")
        raise CompatStopped(f"stopped by {name.name}: {kept} cell(s) kept in {book.run_dir}", 128 + name) from None
    except BaseException as exc:
        stopped(runs_dir, book, f"stopped by an error: {exc}"[:500])
        raise


def stopped(runs_dir: Path, book: Book, why: str) -> int:
    """Keep what a stopped run measured (module docstring); the cells kept."""
    kept = book.flush()
    book.manifest.notes.append(
        f"{why}; not finished: the {kept} cell(s) measured before are in compat.parquet "
        "(those of an engine whose probes had not ended are not reconciled with the capture)"
    )
    write_manifest(book.run_dir, book.manifest)
    if kept:
        point_latest(runs_dir, book.run_dir)
    return kept
