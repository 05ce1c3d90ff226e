"""The life of a run folder while a command writes into it.

(``replay/recording.py`` until 2026-12-06: "recording" is the proxy's rows, docs/glossary.md.)

``writing_run(run_dir, manifest)`` is shared by every command that writes a
run (replay, demo, stability): a ``kill`` (SIGTERM) or a closed terminal
(SIGHUP) gets the same clean-up as Ctrl-C (``engines.lifecycle.interrupt_on_signals``
calls whatever handles Ctrl-C at that moment: inside the event loop,
asyncio's, which cancels the run so requests in flight are recorded as
failed rows; elsewhere a KeyboardInterrupt), the signal is noted in
``ledger.LEDGER`` for the exit status, and however the block ends (done, error, interrupt) the part files
are merged into one Parquet per record type and the manifest is written,
``finished`` staying false unless the block set it. A SpecdecError that
stops the run carries ``run_dir``, so the command can still report what was
recorded before it.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from pathlib import Path

from specdec.engines.lifecycle import interrupt_on_signals
from specdec.errors import SpecdecError
from specdec.replay.ledger import LEDGER
from specdec.runfolder import PART_SUBDIRS, RECORD_FILES, merge_capture_status, write_manifest
from specdec.schemas.arrow import arrow_schema, merge_parquet_atomic

log = logging.getLogger("specdec.replay")


@contextmanager
def writing_run(run_dir: Path, manifest):
    with interrupt_on_signals(_note):  # SIGTERM, SIGHUP: what Ctrl-C does now (main thread only)
        try:
            yield
        except SpecdecError as exc:  # lets the CLI still report what was recorded
            exc.run_dir = Path(run_dir)
            raise
        finally:
            consolidate(run_dir)
            write_manifest(run_dir, manifest)


def _note(signum: int) -> None:
    """The first signal that stopped the run, for the exit status (``LEDGER``)."""
    LEDGER.signal = LEDGER.signal or signum


def consolidate(run_dir: Path) -> None:
    """Merge part files into one Parquet per record type; parts are removed
    only after the merged file is safely written."""
    run_dir = Path(run_dir)
    for rec in RECORD_FILES:
        parts = sorted(p for p in run_dir.glob(rec.part_glob) if not p.name.startswith("."))
        if not parts:
            continue
        target = run_dir / rec.consolidated
        existing = [target] if target.exists() else []
        try:  # streamed, part by part, in row groups of bounded size (merge_parquet_atomic)
            merge_parquet_atomic(existing + parts, arrow_schema(rec.record()), target)
        except Exception as exc:
            log.error("could not consolidate %s (%s); part files kept", target.name, exc)
            continue
        for p in parts:
            p.unlink()
    try:
        merge_capture_status(run_dir)
    except Exception as exc:  # a status file is not a record: never fail the run for it
        log.error("could not merge the capture status files (%s); they are kept in capture/", exc)
    for sub in PART_SUBDIRS:
        d = run_dir / sub
        if d.is_dir() and not any(d.iterdir()):
            d.rmdir()
