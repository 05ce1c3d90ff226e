"""``specdec compat --engine both`` on the embedded engines: the llama.cpp
engine's work (its quantization cells, then its feature pair) runs in a thread
beside the vLLM pair's (its start, its probes, its capture), not after it.

Why the cells stay fair: each engine still sends one request at a time to its
own two servers, a pair's two sends adjacent and their order alternated
(``probing``, ``quant``); the other engine's requests are load on the host
that both arms of every pair see alike, as another program's would be. The
counters, the capture and the greedy outputs are each server's own, so the
acceptance, validity, identity and reconciliation of a cell cannot see the
other engine at all. Why it saves time: alone, each engine keeps about one
of a 2-core host's cores busy (vLLM CPU's worker, which vLLM binds to one core;
one llama-server of one thread at a time, ``engines.llama_cpp.embedded.PROBE_THREADS``): side by
side, ``--engine both`` took 8 min 7 s and 8 min 37 s where one engine after
the other took 12 min 49 s (2026-12-03; 9 min 24 s since the vLLM pair's
workers compute on a core each, ``engines.server.separate_cores``, which
leaves no core idle for the llama.cpp thread). What it costs: each request's time now depends on
what the other engine does at that moment, which the pairing cancels only on
average, so the speedup intervals are wider (2026-12-03, median half-width on
the log scale: llama.cpp's feature cells 0.2 -> 0.8-1.35, the quantization
cells 0.1 -> 0.36-0.40, vLLM's about as before; BENCHMARKS.md, "Issue 22,
round four").

The manifest says so (``notes``; ``engines.<engine>.probed_beside``). Both
threads add to the run folder through one ``Book`` (a lock; the cells in the
engines' order, whichever finishes first).
``CompatConfig.together`` False runs the engines one after the other.

A failure or an interrupt in the vLLM pair's work asks the llama.cpp thread to
stop before its next probe or cell (``Stop``); its servers stop with it (their
``ExitStack``) before the error goes on. A failure in the llama.cpp thread is
raised once the vLLM pair's work is done, as when the engines ran one after the
other, vLLM first.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from pathlib import Path

from specdec.errors import SpecdecError
from specdec.runfolder import compat_file, write_manifest
from specdec.schemas.compat import CompatCell
from specdec.schemas.records import RunManifest

#: Called before each probe or cell; raises ``Stopped`` once the run is ending.
Checkpoint = Callable[[], None]


class Stopped(SpecdecError):
    """The engine beside this one failed or the run was interrupted: this engine's work ends early."""


class Stop:
    """A flag the main thread sets and the worker's ``checkpoint`` reads."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def checkpoint(self) -> None:
        if self._event.is_set():
            raise Stopped("stopped early: the other engine's work failed or the run was interrupted")


def never() -> None:
    """The checkpoint of an engine that runs alone: it never stops early."""


def side_by_side(main: Callable[[Checkpoint], None], beside: Callable[[Checkpoint], None]) -> None:
    """Run ``main`` here and ``beside`` in a thread (module docstring). ``main``'s error wins
    over ``beside``'s (which is then most likely ``Stopped``)."""
    stop = Stop()
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="specdec-compat-beside") as pool:
        fut = pool.submit(beside, stop.checkpoint)
        try:
            main(never)
        except BaseException:
            stop.set()
            concurrent.futures.wait([fut])  # its servers have stopped before the error goes on
            raise
        try:
            fut.result()
        except BaseException:  # Ctrl-C while waiting for it: it stops at its next probe or cell
            stop.set()
            raise


class Book:
    """The run folder's manifest and ``compat.parquet`` as the engines' work adds to them, behind one
    lock (the llama.cpp engine may run in a thread beside vLLM's); cells in the order of the engines."""

    def __init__(self, run_dir: Path, manifest: RunManifest, order: list[str]) -> None:
        self.run_dir, self.manifest, self.order = run_dir, manifest, order
        self.cells: dict[str, list[CompatCell]] = {e: [] for e in order}
        self.pending: dict[str, list[CompatCell]] = {e: [] for e in order}  # ``partial``: measured, not yet added
        self.lock = threading.Lock()

    def all(self) -> list[CompatCell]:
        with self.lock:
            return [c for e in self.order for c in self.cells[e]]

    def add(self, engine: str, cells: list[CompatCell], update: Callable[[RunManifest], None]) -> None:
        """Add ``engine``'s cells (they replace its ``partial`` ones), change the manifest with
        ``update``; write both."""
        with self.lock:
            update(self.manifest)
            self.cells[engine] += cells
            self.pending[engine] = []
            write_manifest(self.run_dir, self.manifest)
            self._write()

    def partial(self, engine: str, cells: list[CompatCell]) -> None:
        """``engine``'s cells so far, while its probes run (not yet reconciled with the capture):
        written at once, so a run that stops keeps them."""
        with self.lock:
            self.pending[engine] = list(cells)
            self._write()

    def flush(self) -> int:
        """Write every cell so far, the partial ones included; how many."""
        with self.lock:
            return self._write()

    def _write(self) -> int:
        from specdec.schemas.arrow import table_from_records, write_parquet_atomic  # heavy: pyarrow

        every = [c for e in self.order for c in self.cells[e] + self.pending[e]]
        write_parquet_atomic(table_from_records(CompatCell, every), compat_file(self.run_dir))
        return len(every)
